// Package metrics counts operations and their latency on every server role
// and serves them: Prometheus /metrics, a JSON profile table for
// `cairn admin profile`, and pprof, all on the role's admin listener.
package metrics

import (
	"math"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Ops records calls, errors and latencies per operation for one role
// ("gateway", "meta", "chunk"). It is safe for concurrent use, and a call
// to Observe takes no lock once the operation has been seen.
type Ops struct {
	role    string
	calls   *prometheus.CounterVec
	errs    *prometheus.CounterVec
	latency *prometheus.HistogramVec

	mu  sync.RWMutex
	ops map[string]*opStat

	bytesIn, bytesOut atomic.Uint64 // AddBytes (window.go)
}

// opStat keeps an exact-enough latency histogram of its own: Prometheus
// buckets are too coarse for a p50 of a 100 µs operation.
type opStat struct {
	calls  atomic.Uint64
	errors atomic.Uint64
	hist   histogram
}

// NewOps registers the role's collectors with reg (nil: the default registry).
func NewOps(reg prometheus.Registerer, role string) *Ops {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	o := &Ops{
		role: role,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: role, Name: "ops_total",
			Help: "Operations served, by operation.",
		}, []string{"op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cairn", Subsystem: role, Name: "op_errors_total",
			Help: "Operations that failed, by operation.",
		}, []string{"op"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cairn", Subsystem: role, Name: "op_seconds",
			Help:    "Operation latency, by operation.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 20),
		}, []string{"op"}),
		ops: map[string]*opStat{},
	}
	allMu.Lock()
	all = append(all, o)
	allMu.Unlock()
	for _, c := range []prometheus.Collector{o.calls, o.errs, o.latency} {
		if err := reg.Register(c); err != nil {
			// A second Ops for the same role (tests start several servers
			// in one process) shares the collectors already registered.
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				switch c {
				case o.calls:
					o.calls = are.ExistingCollector.(*prometheus.CounterVec)
				case o.errs:
					o.errs = are.ExistingCollector.(*prometheus.CounterVec)
				case o.latency:
					o.latency = are.ExistingCollector.(*prometheus.HistogramVec)
				}
				continue
			}
			panic(err)
		}
	}
	return o
}

// all lists every Ops made in this process, so that one admin listener can
// profile every role that `cairn server` runs in one process.
var (
	allMu sync.Mutex
	all   []*Ops
)

// All returns every Ops created in this process, in creation order.
func All() []*Ops {
	allMu.Lock()
	defer allMu.Unlock()
	return append([]*Ops(nil), all...)
}

// Role is the name given to NewOps.
func (o *Ops) Role() string { return o.role }

// Start begins timing op; call the returned function with the outcome.
//
//	done := ops.Start("get")
//	defer func() { done(err) }()
func (o *Ops) Start(op string) func(error) {
	t := time.Now()
	return func(err error) { o.Observe(op, time.Since(t), err) }
}

// Observe records one finished call of op.
func (o *Ops) Observe(op string, d time.Duration, err error) {
	s := o.stat(op)
	s.calls.Add(1)
	s.hist.add(d)
	o.calls.WithLabelValues(op).Inc()
	o.latency.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		s.errors.Add(1)
		o.errs.WithLabelValues(op).Inc()
	}
}

func (o *Ops) stat(op string) *opStat {
	o.mu.RLock()
	s := o.ops[op]
	o.mu.RUnlock()
	if s != nil {
		return s
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s = o.ops[op]; s == nil {
		s = &opStat{}
		o.ops[op] = s
	}
	return s
}

// OpStat is one row of a profile table.
type OpStat struct {
	Role   string        `json:"role"`
	Op     string        `json:"op"`
	Calls  uint64        `json:"calls"`
	Errors uint64        `json:"errors"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

// Snapshot returns a row per operation seen, sorted by operation.
func (o *Ops) Snapshot() []OpStat {
	o.mu.RLock()
	defer o.mu.RUnlock()
	rows := make([]OpStat, 0, len(o.ops))
	for name, s := range o.ops {
		rows = append(rows, OpStat{
			Role: o.role, Op: name, Calls: s.calls.Load(), Errors: s.errors.Load(),
			P50: s.hist.quantile(0.50), P99: s.hist.quantile(0.99), Max: s.hist.max(),
		})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Op < rows[j].Op })
	return rows
}

// histogram is a lock-free log-linear histogram of durations: 8 linear
// sub-buckets per power of two of nanoseconds, so quantiles are within
// 12.5% of the truth from 1 ns to hours.
type histogram struct {
	buckets [64 * subBuckets]atomic.Uint64
	maxNs   atomic.Int64
}

const subBits = 3
const subBuckets = 1 << subBits

func bucketOf(ns int64) int {
	if ns < subBuckets {
		if ns < 0 {
			return 0
		}
		return int(ns)
	}
	exp := bits.Len64(uint64(ns)) - 1 // >= subBits
	sub := int(ns>>(exp-subBits)) & (subBuckets - 1)
	return (exp-subBits+1)*subBuckets + sub
}

// bucketUpper is the largest value that falls in bucket b.
func bucketUpper(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	exp := b/subBuckets + subBits - 1
	sub := int64(b % subBuckets)
	lo := (int64(1) << exp) + sub<<(exp-subBits)
	return lo + (int64(1) << (exp - subBits)) - 1
}

func (h *histogram) add(d time.Duration) {
	ns := int64(d)
	h.buckets[bucketOf(ns)].Add(1)
	for {
		m := h.maxNs.Load()
		if ns <= m || h.maxNs.CompareAndSwap(m, ns) {
			return
		}
	}
}

func (h *histogram) max() time.Duration { return time.Duration(h.maxNs.Load()) }

func (h *histogram) quantile(q float64) time.Duration {
	var total uint64
	for i := range h.buckets {
		total += h.buckets[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			return min(time.Duration(bucketUpper(i)), h.max())
		}
	}
	return h.max()
}
