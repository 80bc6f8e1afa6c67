package metrics

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	within := func(got, want time.Duration) bool {
		return got >= want && float64(got) <= float64(want)*1.13
	}
	if p := h.quantile(0.5); !within(p, 500*time.Microsecond) {
		t.Errorf("p50 = %v", p)
	}
	if p := h.quantile(0.99); !within(p, 990*time.Microsecond) {
		t.Errorf("p99 = %v", p)
	}
	if h.max() != time.Millisecond {
		t.Errorf("max = %v", h.max())
	}
}

func TestBucketsMonotonic(t *testing.T) {
	prev := -1
	for ns := int64(0); ns < 1<<20; ns += 7 {
		b := bucketOf(ns)
		if b < prev || bucketUpper(b) < ns {
			t.Fatalf("ns=%d bucket=%d upper=%d prev=%d", ns, b, bucketUpper(b), prev)
		}
		prev = b
	}
}

func TestAdminProfile(t *testing.T) {
	reg := prometheus.NewRegistry()
	ops := NewOps(reg, "test")
	ops.Observe("get", time.Millisecond, nil)
	ops.Observe("get", 2*time.Millisecond, errors.New("x"))
	srv := httptest.NewServer(AdminHandler(reg, ops))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/debug/profile")
	if err != nil {
		t.Fatal(err)
	}
	var rows []OpStat
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Calls != 2 || rows[0].Errors != 1 || rows[0].Op != "get" {
		t.Fatalf("rows = %+v", rows)
	}
	resp, err = srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	buf := new(strings.Builder)
	_, _ = bufCopy(buf, resp)
	if !strings.Contains(buf.String(), `cairn_test_ops_total{op="get"} 2`) {
		t.Fatalf("metrics missing counter:\n%s", buf)
	}
}

func BenchmarkObserve(b *testing.B) {
	ops := NewOps(prometheus.NewRegistry(), "bench")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ops.Observe("get", 100*time.Microsecond, nil)
		}
	})
}
