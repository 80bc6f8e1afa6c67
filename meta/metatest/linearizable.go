package metatest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"cairn/errors"
	"cairn/proto/metapb"
)

// The linearizability check of a meta (alone or a group): clients put,
// delete and read a few files while faults happen, every call and return
// is recorded, and porcupine checks the history against a model of the
// namespace (each file a register of its size).

// NSOp is one call of the history: a put (commit of a file with a size),
// a delete, or a read (resolve) of one of a few files.
type NSOp struct {
	Kind string // "put", "del", "get"
	Key  string
	Size uint64 // put: the size written
}

// NSOut is a call's answer; Unknown marks a command whose outcome the
// client could not learn (its member went away mid-call).
type NSOut struct {
	Size    uint64 // get: 0 when absent
	Unknown bool
}

// NSModel is the namespace as a map from file to size (absent: 0),
// partitioned by file: each file is a register that puts set, deletes
// clear and reads return.
var NSModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, o := range h {
			k := o.Input.(NSOp).Key
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
		st, in, out := state.(uint64), input.(NSOp), output.(NSOut)
		switch in.Kind {
		case "put":
			return true, in.Size
		case "del":
			return true, uint64(0)
		default:
			return out.Size == st, st
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(NSOp), output.(NSOut)
		return fmt.Sprintf("%s(%s,%d) -> %d unknown=%v", in.Kind, in.Key, in.Size, out.Size, out.Unknown)
	},
}

// History is the record of Clients' calls.
type History struct {
	mu   sync.Mutex
	ops  []porcupine.Operation
	stop chan struct{}
	wg   sync.WaitGroup
}

// Clients starts n clients calling cl on namespace ns (which must exist)
// until Stop: each call is bounded by callTimeout, so that a call to a
// member cut off from everyone ends (its outcome unknown) and the next
// goes elsewhere.
func Clients(cl metapb.MetaClient, ns string, n int, callTimeout time.Duration) *History {
	h := &History{stop: make(chan struct{})}
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	for c := range n {
		h.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-h.stop:
					return
				default:
				}
				op := NSOp{Key: fmt.Sprintf("f%d", (c+i)%3)}
				switch i % 4 {
				case 0, 2:
					op.Kind = "get"
				case 1:
					op.Kind, op.Size = "put", uint64(c*1_000_000+i+1)
				case 3:
					op.Kind = "del"
				}
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				call := now()
				var out NSOut
				var err error
				switch op.Kind {
				case "put":
					_, err = cl.Commit(ctx, &metapb.CommitRequest{Ns: ns, Path: op.Key, Size: op.Size,
						Extents: []*metapb.Extent{{Offset: 0, Length: op.Size, Volume: 1, Key: op.Size}}, Etag: "e"})
				case "del":
					_, err = cl.Delete(ctx, &metapb.DeleteRequest{Ns: ns, Path: op.Key})
					if errors.Is(errors.NotExist, err) {
						err = nil
					}
				case "get":
					var r *metapb.ResolveResponse
					r, err = cl.Resolve(ctx, &metapb.ResolveRequest{Ns: ns, Path: op.Key})
					if err == nil {
						out.Size = r.Inode.Size
					} else if errors.Is(errors.NotExist, err) {
						err = nil
					}
				}
				ret := now()
				cancel()
				if err != nil {
					if op.Kind == "get" {
						continue // a failed read says nothing
					}
					out.Unknown, ret = true, math.MaxInt64 // applied or not: any time after the call
				}
				h.mu.Lock()
				h.ops = append(h.ops, porcupine.Operation{ClientId: c, Input: op, Call: call, Output: out, Return: ret})
				h.mu.Unlock()
			}
		})
	}
	return h
}

// Len is the number of calls recorded so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Stop ends the clients and waits for them.
func (h *History) Stop() {
	close(h.stop)
	h.wg.Wait()
}

// Check fails t unless the history (after Stop) is linearizable.
func (h *History) Check(t testing.TB) {
	t.Helper()
	unknown := 0
	for _, o := range h.ops {
		if o.Output.(NSOut).Unknown {
			unknown++
		}
	}
	t.Logf("%d operations recorded, %d with an unknown outcome", len(h.ops), unknown)
	res, _ := porcupine.CheckOperationsVerbose(NSModel, h.ops, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("history is not linearizable (%v)", res)
	}
}
