package meta

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// listed reports whether a listing of ns names name.
func listed(r *metapb.ListResponse, name string) bool {
	for _, e := range r.GetEntries() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestGroupStaleReads: a follower answers a read marked StaleOK from what
// it applied, refuses the same read unmarked and the reads it cannot
// serve (a Resolve wanting extents), and stops answering once it has not
// heard from a leader for StaleReadBound; a group client spreads marked
// reads over the members; and a linearizable read, after a write the
// group acknowledged, sees it on whatever member answers it.
func TestGroupStaleReads(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{} // member -> stale Lists it answered
	g := newTestGroupWith(t, 3, func(c *GroupConfig) { c.StaleReadBound = 300 * time.Millisecond }, func(m *member) []grpc.ServerOption {
		addr := m.addr
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if err == nil && opName(info.FullMethod) == "List" && staleRequested(ctx) {
				mu.Lock()
				served[addr]++
				mu.Unlock()
			}
			return resp, err
		})}
	})
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "stale")
	put(t, cl, "stale", "a", 1, 1)

	f := g.follower(l)
	fc, conn, err := Dial(f.addr, DialTLS(f.node.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list := &metapb.ListRequest{Ns: "stale", Delimiter: "/"}
	if _, err := fc.List(bg, list); err == nil {
		t.Fatal("a follower answered an unmarked List")
	} else if _, ok := LeaderOf(err); !ok {
		t.Fatalf("a follower refused an unmarked List with %v, want a not-leader refusal", err)
	}
	await.Until(t, 20*time.Second, "the follower's stale List to show the file", func() bool {
		r, err := fc.List(StaleOK(bg), list)
		return err == nil && listed(r, "a")
	})
	if _, err := fc.Resolve(StaleOK(bg), &metapb.ResolveRequest{Ns: "stale", Path: "a"}); err != nil {
		t.Fatalf("a follower refused a stale Resolve of the inode: %v", err)
	}
	if _, err := fc.Resolve(StaleOK(bg), &metapb.ResolveRequest{Ns: "stale", Path: "a", WantExtents: true}); err == nil {
		t.Fatal("a follower answered a Resolve wanting extents")
	}

	// Linearizable reads: every member either refuses or sees the write
	// the group acknowledged just before; the group client sees it.
	direct := map[string]metapb.MetaClient{}
	for _, m := range g.members {
		c, conn, err := Dial(m.addr, DialTLS(m.node.Client()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		direct[m.addr] = c
	}
	for i := range 20 {
		name := fmt.Sprintf("lin%d", i)
		put(t, cl, "stale", name, 1, uint64(10+i))
		if _, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "stale", Path: name}); err != nil {
			t.Fatalf("a linearizable read missed the write acknowledged before it: %v", err)
		}
		for addr, c := range direct {
			_, err := c.Resolve(bg, &metapb.ResolveRequest{Ns: "stale", Path: name})
			if _, refused := LeaderOf(err); err != nil && !refused {
				t.Fatalf("member %s answered a linearizable read of an acknowledged write with %v", addr, err)
			}
		}
	}

	// A group client sends marked reads to every member.
	for range 30 {
		if _, err := cl.List(StaleOK(bg), list); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	n := len(served)
	mu.Unlock()
	if n < 2 {
		t.Fatalf("stale Lists were answered by %d member(s) (%v), want them spread", n, served)
	}

	// Cut off from every other member, the follower stops answering.
	for _, m := range g.members {
		if m != f {
			g.stop(m)
		}
	}
	await.Until(t, 20*time.Second, "the cut-off follower to refuse stale reads", func() bool {
		_, err := fc.List(StaleOK(bg), list)
		return errors.Is(errors.Unavailable, err)
	})
	for range 5 {
		if _, err := fc.List(StaleOK(bg), list); err == nil {
			t.Fatal("a follower cut off from the leader answered a stale read")
		}
	}
}
