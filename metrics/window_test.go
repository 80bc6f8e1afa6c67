package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestTotalsWindow(t *testing.T) {
	o := NewOps(prometheus.NewRegistry(), "window")
	o.Observe("get", time.Second, nil) // before the window: must not count
	before := o.Totals()
	for range 99 {
		o.Observe("get", 100*time.Microsecond, nil)
	}
	o.Observe("put", 50*time.Millisecond, errors.New("x"))
	o.AddBytes(10, 2000)
	w := o.Totals().Sub(before)
	if w.Calls != 100 || w.Errors != 1 || w.BytesIn != 10 || w.BytesOut != 2000 {
		t.Fatalf("window %+v", w)
	}
	if w.PerOp["get"].Calls != 99 || w.PerOp["put"].Errors != 1 {
		t.Fatalf("per op %+v", w.PerOp)
	}
	if p50 := w.Quantile(0.5); p50 < 100*time.Microsecond || p50 > 113*time.Microsecond {
		t.Fatalf("p50 %v, want ~100us", p50)
	}
	if p99 := w.Quantile(0.99); p99 > 113*time.Microsecond {
		t.Fatalf("p99 %v: the 1 s call before the window leaked in", p99)
	}
	if q := w.Quantile(1); q < 50*time.Millisecond || q > 57*time.Millisecond {
		t.Fatalf("max %v, want ~50ms", q)
	}
	if (Totals{}).Sub(Totals{}).Quantile(0.5) != 0 {
		t.Fatal("empty window has a latency")
	}
}
