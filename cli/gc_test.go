package cli

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"cairn/internal/await"
)

// TestLimitGarbage: after every collection the soft memory limit is the
// live heap plus the headroom (and the little the runtime holds outside
// the heap): it rises with a live heap of 128 MiB, falls when that heap
// is dropped, and stop lifts it. (How closely the runtime keeps to the
// limit is the runtime's: on a loaded machine a collection lets some
// allocation through while it runs. The gateway's RSS under a read load,
// in the closing note of issue 19, is the figure end to end.)
func TestLimitGarbage(t *testing.T) {
	const live, headroom = 128 << 20, 32 << 20
	const outside = 64 << 20 // stacks and runtime metadata: a test binary's are a few MiB
	limitAfterGC := func(what string, ok func(int64) bool) int64 {
		t.Helper()
		var l int64
		await.Until(t, 10*time.Second, what, func() bool {
			runtime.GC() // the limit is set by a finalizer that runs after it
			l = debug.SetMemoryLimit(-1)
			return ok(l)
		})
		return l
	}
	stop := limitGarbage(headroom)
	base := limitAfterGC("a limit after a collection", func(l int64) bool { return l < math.MaxInt64 })
	if base < headroom || base > headroom+live/2 {
		t.Fatalf("limit %d MiB with nothing much live; want about %d", base>>20, headroom>>20)
	}
	hold := make([][]byte, 0, live>>20)
	for range live >> 20 {
		hold = append(hold, make([]byte, 1<<20))
	}
	up := limitAfterGC("the limit to count the live heap", func(l int64) bool { return l >= live+headroom })
	if up > live+headroom+outside {
		t.Fatalf("limit %d MiB with %d MiB live and %d of headroom", up>>20, live>>20, headroom>>20)
	}
	runtime.KeepAlive(hold)
	hold = nil
	down := limitAfterGC("the limit to fall with the live heap", func(l int64) bool { return l < live })
	stop()
	runtime.GC()
	runtime.GC()
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("limit %d after stop", l)
	}
	t.Logf("limits: %d MiB, %d MiB with %d MiB live, %d MiB once dropped", base>>20, up>>20, live>>20, down>>20)
}
