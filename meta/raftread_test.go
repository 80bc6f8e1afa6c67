package meta

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestGroupFollowerReadIndex sends AnyMember reads straight to a follower
// whose store is held back (its applies wait on the store's mutex, as
// behind a slow disk): a read that arrives after a write was acknowledged
// must not be answered before the follower applied that write, and then
// shows it. Without the read index the follower refuses the read (not the
// leader); answering it from the store at once would miss the write.
func TestGroupFollowerReadIndex(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "readindex")
	f := g.follower(l)
	fc, conn, err := Dial(f.addr, DialTLS(f.node.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	type answer struct {
		list *metapb.ListResponse
		res  *metapb.ResolveResponse
		err  error
	}
	round := func(round int) {
		dir := fmt.Sprintf("d%d", round)
		f.svc.mu.Lock() // the follower applies nothing from here
		held := true
		release := func() {
			if held {
				f.svc.mu.Unlock()
				held = false
			}
		}
		defer release()
		if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "readindex", Path: dir}); err != nil {
			t.Fatal(err)
		}
		done := make(chan answer, 2)
		go func() {
			r, err := fc.Resolve(AnyMember(bg), &metapb.ResolveRequest{Ns: "readindex", Path: dir})
			done <- answer{res: r, err: err}
		}()
		go func() {
			r, err := fc.List(AnyMember(bg), &metapb.ListRequest{Ns: "readindex", Delimiter: "/"})
			done <- answer{list: r, err: err}
		}()
		await.Until(t, 20*time.Second, "the follower's reads to wait for its store to apply the write", func() bool {
			select {
			case a := <-done:
				t.Fatalf("round %d: the follower answered before applying the acknowledged write: %v %v", round, a.res, a.err)
			default:
			}
			return f.svc.group.readWaits.Load() >= 2
		})
		select {
		case a := <-done:
			t.Fatalf("round %d: the follower answered before applying the acknowledged write: %v %v", round, a.res, a.err)
		default:
		}
		release()
		for range 2 {
			a := <-done
			if a.err != nil {
				t.Fatalf("round %d: %v", round, a.err)
			}
			if a.res != nil && (a.res.Inode == nil || a.res.Inode.Type != metapb.FileType_DIRECTORY) {
				t.Fatalf("round %d: resolved %v, want the directory", round, a.res)
			}
			if a.list != nil && len(a.list.Entries) != round+1 {
				t.Fatalf("round %d: the follower listed %v, want %d directories", round, a.list.Entries, round+1)
			}
		}
	}
	round(0)
	round(1)
	if n := f.svc.group.reads.roundsOK.Load(); n == 0 {
		t.Fatalf("the follower never asked the leader for a read index")
	}
	// Through the group client, AnyMember reads go round robin and every
	// member answers them.
	for i := range 9 {
		if _, err := cl.Resolve(AnyMember(bg), &metapb.ResolveRequest{Ns: "readindex", Path: "d1"}); err != nil {
			t.Fatalf("AnyMember resolve %d through the group client: %v", i, err)
		}
	}
}

// BenchmarkGroupResolveGRPC resolves (without extents, as a listing or a
// stat does) from 32 callers against a group of three in-process members:
// "leader" sends every call to the leader (its lease), "any-member" marks
// them AnyMember (round robin, followers through the read index), "stale"
// marks them StaleOK.
func BenchmarkGroupResolveGRPC(b *testing.B) {
	g := newTestGroup(b, 3, nil)
	g.awaitLeader()
	cl := g.client()
	mkns(b, cl, "bench")
	put(b, cl, "bench", benchPath, 1000, 1)
	for _, mode := range []struct {
		name string
		mark func(context.Context) context.Context
	}{
		{"leader", func(ctx context.Context) context.Context { return ctx }},
		{"any-member", AnyMember},
		{"stale", StaleOK},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := mode.mark(bg)
			parallelism(b, 32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := &metapb.ResolveRequest{Ns: "bench", Path: benchPath}
				for pb.Next() {
					if _, err := cl.Resolve(ctx, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resolves/s")
		})
	}
}
