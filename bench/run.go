package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Op performs one operation and returns the payload bytes it moved.
type Op func(ctx context.Context) (int64, error)

// Load is how hard and how long to drive an Op.
type Load struct {
	Concurrency int           // closed-loop workers, each one operation at a time
	Duration    time.Duration // measured time
	Warmup      time.Duration // run but not measured first: dials, caches, JIT-free but not cold
}

// Result is what one Load measured.
type Result struct {
	Name        string        `json:"name"`
	Concurrency int           `json:"concurrency"`
	Ops         int64         `json:"ops"`    // successful operations
	Errors      int64         `json:"errors"` // failed operations
	Bytes       int64         `json:"bytes"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	OpsPerSec   float64       `json:"ops_per_sec"`
	MBPerSec    float64       `json:"mb_per_sec"` // 10^6 bytes, as dd counts
	P50         time.Duration `json:"p50_ns"`
	P90         time.Duration `json:"p90_ns"`
	P99         time.Duration `json:"p99_ns"`
	P999        time.Duration `json:"p999_ns"`
	Max         time.Duration `json:"max_ns"`
	Mean        time.Duration `json:"mean_ns"`
	FirstError  string        `json:"first_error,omitempty"`
}

// Run drives load.Concurrency workers, each calling its own Op (made by
// newOp, so per-worker buffers need no locks) back to back until the time
// is up, and measures the operations that start after the warm-up. Latency
// is recorded for successful operations only; a failed one counts as an
// error.
func Run(ctx context.Context, name string, load Load, newOp func(worker int) Op) Result {
	c := max(load.Concurrency, 1)
	start := time.Now()
	measureFrom := start.Add(load.Warmup)
	end := measureFrom.Add(load.Duration)
	// Operations still running at the end get a grace period, then are
	// canceled, so a hung server cannot hang the benchmark. A timer
	// cancels rather than a context deadline: a deadline travels with
	// every gRPC call (a grpc-timeout header, a timer on each side), which
	// cost meta Resolve about a tenth of its throughput.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	grace := time.AfterFunc(time.Until(end.Add(10*time.Second+load.Duration)), cancel)
	defer grace.Stop()

	w := make([]worker, c)
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for i := range w {
		op := newOp(i)
		wg.Go(func() { w[i].loop(ctx, op, measureFrom, end, &firstErr) })
	}
	wg.Wait()
	return tally(name, c, measureFrom, w, firstErr.Load())
}

// worker is one closed loop's tally.
type worker struct {
	rec      Recorder
	errors   int64
	bytes    int64
	finished time.Time
}

func (w *worker) loop(ctx context.Context, op Op, measureFrom, end time.Time, firstErr *atomic.Pointer[string]) {
	w.rec.samples = make([]time.Duration, 0, 4096)
	for ctx.Err() == nil {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		n, err := op(ctx)
		t1 := time.Now()
		if t0.Before(measureFrom) {
			continue
		}
		w.finished = t1
		if err != nil {
			w.errors++
			msg := err.Error()
			firstErr.CompareAndSwap(nil, &msg)
			continue
		}
		w.bytes += n
		w.rec.Add(t1.Sub(t0))
	}
}

// tally adds up all workers' counts; the measured time runs until the
// last measured operation finished.
func tally(name string, c int, measureFrom time.Time, ws []worker, firstErr *string) Result {
	r := Result{Name: name, Concurrency: c}
	recs := make([]*Recorder, len(ws))
	last := measureFrom
	for i := range ws {
		recs[i] = &ws[i].rec
		r.Errors += ws[i].errors
		r.Bytes += ws[i].bytes
		if ws[i].finished.After(last) {
			last = ws[i].finished
		}
	}
	s := Summarize(recs...)
	r.Ops = int64(s.Count)
	r.Elapsed = last.Sub(measureFrom)
	if secs := r.Elapsed.Seconds(); secs > 0 {
		r.OpsPerSec = float64(r.Ops) / secs
		r.MBPerSec = float64(r.Bytes) / secs / 1e6
	}
	r.P50, r.P90, r.P99, r.P999, r.Max, r.Mean = s.P50, s.P90, s.P99, s.P999, s.Max, s.Mean
	if firstErr != nil {
		r.FirstError = *firstErr
	}
	return r
}
