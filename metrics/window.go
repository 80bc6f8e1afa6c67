package metrics

import (
	"math"
	"time"
)

// Totals is a role's cumulative counters at one instant, summed over its
// operations. Two snapshots subtracted give a window (the console's
// activity charts): its rates, and quantiles of exactly the calls that
// finished inside it, which the cumulative Snapshot cannot give.
type Totals struct {
	Calls, Errors     uint64
	BytesIn, BytesOut uint64
	PerOp             map[string]OpTotals
	hist              []uint64 // all operations' latency buckets
}

// OpTotals are one operation's cumulative calls and errors.
type OpTotals struct{ Calls, Errors uint64 }

// AddBytes counts payload bytes received and sent by the role (bodies,
// not headers), for byte rates.
func (o *Ops) AddBytes(in, out int64) {
	if in > 0 {
		o.bytesIn.Add(uint64(in))
	}
	if out > 0 {
		o.bytesOut.Add(uint64(out))
	}
}

// Totals returns the role's cumulative counters now.
func (o *Ops) Totals() Totals {
	t := Totals{BytesIn: o.bytesIn.Load(), BytesOut: o.bytesOut.Load(),
		PerOp: map[string]OpTotals{}, hist: make([]uint64, 64*subBuckets)}
	o.mu.RLock()
	defer o.mu.RUnlock()
	for name, s := range o.ops {
		ot := OpTotals{Calls: s.calls.Load(), Errors: s.errors.Load()}
		t.PerOp[name] = ot
		t.Calls += ot.Calls
		t.Errors += ot.Errors
		for i := range s.hist.buckets {
			t.hist[i] += s.hist.buckets[i].Load()
		}
	}
	return t
}

// Sub returns the counts of the window from prev to t.
func (t Totals) Sub(prev Totals) Totals {
	d := Totals{Calls: t.Calls - prev.Calls, Errors: t.Errors - prev.Errors,
		BytesIn: t.BytesIn - prev.BytesIn, BytesOut: t.BytesOut - prev.BytesOut,
		PerOp: map[string]OpTotals{}, hist: make([]uint64, len(t.hist))}
	for name, ot := range t.PerOp {
		p := prev.PerOp[name]
		if c := ot.Calls - p.Calls; c > 0 {
			d.PerOp[name] = OpTotals{Calls: c, Errors: ot.Errors - p.Errors}
		}
	}
	for i := range t.hist {
		d.hist[i] = t.hist[i]
		if i < len(prev.hist) {
			d.hist[i] -= prev.hist[i]
		}
	}
	return d
}

// Quantile is the latency below which a fraction q of the counted calls
// finished (within the histogram's 12.5%); 0 when none were counted.
func (t Totals) Quantile(q float64) time.Duration {
	var total uint64
	for _, n := range t.hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range t.hist {
		seen += n
		if seen >= rank {
			return time.Duration(bucketUpper(i))
		}
	}
	return 0
}
