package console

import (
	"testing"
	"time"
)

// TestLimitsWindow: the limits count per window and forget at its end.
func TestLimitsWindow(t *testing.T) {
	l := newLimits(3, 2, time.Minute)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if w := l.allow("ip1", "k", t0); w != 0 {
			t.Fatalf("attempt %d refused", i+1)
		}
	}
	if w := l.allow("ip1", "k", t0.Add(10*time.Second)); w != 50*time.Second {
		t.Fatalf("4th attempt in the window: wait %v, want 50s", w)
	}
	if w := l.allow("ip2", "k", t0); w != 0 {
		t.Fatal("another address was refused")
	}
	l.failed("k", t0)
	l.failed("k", t0)
	if w := l.allow("ip3", "k", t0.Add(time.Second)); w != 59*time.Second {
		t.Fatalf("a key with 2 failures: wait %v, want 59s", w)
	}
	later := t0.Add(time.Minute)
	if w := l.allow("ip1", "k", later); w != 0 {
		t.Fatalf("after the window: wait %v", w)
	}
	l.sweep(later.Add(time.Minute))
	if len(l.ips) != 0 || len(l.keys) != 0 {
		t.Fatalf("sweep left %d addresses, %d keys", len(l.ips), len(l.keys))
	}
}
