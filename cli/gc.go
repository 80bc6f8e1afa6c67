package cli

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// garbageHeadroom is the most garbage a server lets pile up between
// collections (limitGarbage).
const garbageHeadroom = 256 << 20

// mountGarbageHeadroom is a mount's, smaller: a mount runs beside the
// user's own programs.
const mountGarbageHeadroom = 128 << 20

// limitGarbage bounds a server's garbage to headroom bytes. tuneGC's
// GOGC=400 collects when the heap is five times what was live: cheap for a
// small heap, but a large one (the gateway's hot cache, meta's block and
// read caches, each bounded) grows five times over, and the gateway's
// 256 MiB of cache made a 930 MiB process. After every collection this sets
// the soft memory limit to what the process then holds (the live heap and
// the memory outside it) plus headroom, so the collector runs at whichever
// of the two comes first. stop lifts the limit.
func limitGarbage(headroom uint64) (stop func()) {
	g := &garbageLimit{headroom: headroom}
	g.arm()
	return func() {
		g.stopped.Store(true)
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

type garbageLimit struct {
	headroom uint64
	stopped  atomic.Bool
}

// gcCycle is garbage as soon as it is made: its finalizer runs after the
// next collection. It has a size, since the finalizer of a zero-size
// object may never run.
type gcCycle struct {
	g *garbageLimit
	_ [16]byte
}

func (g *garbageLimit) arm() {
	runtime.SetFinalizer(&gcCycle{g: g}, func(c *gcCycle) { c.g.collected() })
}

// memSamples are what collected reads: the live heap the collection
// found, and the memory the limit counts (all the runtime holds from the
// OS, less what it gave back) split into the heap's spans and the rest.
var memSamples = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

func (g *garbageLimit) collected() {
	if g.stopped.Load() {
		return
	}
	s := make([]metrics.Sample, len(memSamples))
	for i, name := range memSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	live, total, released := v(0), v(1), v(2)
	heap := v(3) + v(4) + v(5)
	outside := total - released - min(heap, total-released) // stacks, runtime metadata
	debug.SetMemoryLimit(int64(live + outside + g.headroom))
	g.arm()
}
