package meta

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// nsOp is one call of the history: a put (commit of a file with a size),
// a delete, or a read (resolve) of one of a few files.
type nsOp struct {
	kind string // "put", "del", "get"
	key  string
	size uint64 // put: the size written
}

// nsOut is a call's answer; unknown marks a command whose outcome the
// client could not learn (its member went away mid-call).
type nsOut struct {
	size    uint64 // get: 0 when absent
	unknown bool
}

// nsModel is the namespace as a map from file to size (absent: 0),
// partitioned by file: each file is a register that puts set, deletes
// clear and reads return.
var nsModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, o := range h {
			k := o.Input.(nsOp).key
			by[k] = append(by[k], o)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(uint64), input.(nsOp), output.(nsOut)
		switch in.kind {
		case "put":
			return true, in.size
		case "del":
			return true, uint64(0)
		default:
			return out.size == st, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(nsOp), output.(nsOut)
		return fmt.Sprintf("%s(%s,%d) -> %d unknown=%v", in.kind, in.key, in.size, out.size, out.unknown)
	},
}

// TestGroupLinearizable records every call of 4 clients (puts, deletes
// and reads of 3 files) across the loss of the leader and checks the
// history with porcupine: no acknowledged write lost, no stale read.
func TestGroupLinearizable(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	old := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "lin")
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var (
		mu   sync.Mutex
		hist []porcupine.Operation
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	for c := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				op := nsOp{key: fmt.Sprintf("f%d", (c+i)%3)}
				switch i % 4 {
				case 0, 2:
					op.kind = "get"
				case 1:
					op.kind, op.size = "put", uint64(c*1_000_000+i+1)
				case 3:
					op.kind = "del"
				}
				call := now()
				var out nsOut
				var err error
				switch op.kind {
				case "put":
					_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "lin", Path: op.key, Size: op.size,
						Extents: []*metapb.Extent{ext(0, op.size, 1, op.size)}, Etag: "e"})
				case "del":
					_, err = cl.Delete(bg, &metapb.DeleteRequest{Ns: "lin", Path: op.key})
					if errors.Is(errors.NotExist, err) {
						err = nil
					}
				case "get":
					var r *metapb.ResolveResponse
					r, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "lin", Path: op.key})
					if err == nil {
						out.size = r.Inode.Size
					} else if errors.Is(errors.NotExist, err) {
						err = nil
					}
				}
				ret := now()
				if err != nil {
					if op.kind == "get" {
						continue // a failed read says nothing
					}
					out.unknown, ret = true, math.MaxInt64 // applied or not: any time after the call
				}
				mu.Lock()
				hist = append(hist, porcupine.Operation{ClientId: c, Input: op, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(hist) }
	await.Until(t, 30*time.Second, "300 operations", func() bool { return count() >= 300 })
	g.stop(old)
	before := count()
	await.Until(t, 30*time.Second, "300 operations after the leader's loss", func() bool { return count() >= before+300 })
	close(stop)
	wg.Wait()
	unknown := 0
	for _, o := range hist {
		if o.Output.(nsOut).unknown {
			unknown++
		}
	}
	t.Logf("%d operations recorded (%d with an unknown outcome), the leader stopped after %d", len(hist), unknown, before)
	res, _ := porcupine.CheckOperationsVerbose(nsModel, hist, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("history is not linearizable (%v)", res)
	}
}
