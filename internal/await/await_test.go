package await

import (
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	n := 0
	if !poll(time.Second, func() bool { n++; return n == 5 }) {
		t.Fatal("a condition met on the fifth poll timed out")
	}
	start := time.Now()
	if poll(30*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition never met was reported met")
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the deadline", d)
	}
}
