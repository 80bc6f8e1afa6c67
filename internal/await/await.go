// Package await is the suite's one way to wait for a condition: tests wait
// for the event they need (a pass done, an event delivered, a file present)
// with a deadline, never for a while.
package await

import (
	"testing"
	"time"
)

// Until polls cond until it holds, failing tb if within passes first. The
// poll starts at a millisecond and backs off to 20 ms, so a condition that
// is met at once costs nothing and a slow one costs little CPU.
func Until(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !poll(within, cond) {
		tb.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// poll reports whether cond held before within passed.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}
