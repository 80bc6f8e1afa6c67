package meta

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"cairn/proto/metapb"
)

// BenchmarkGroupClientCall is the group client's own cost per call (its
// interceptor around a call answered at once, no network): "watched" is
// a leader call as every client makes it (the hung-leader check armed and
// disarmed), "unwatched" the same without the check.
func BenchmarkGroupClientCall(b *testing.B) {
	answer := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for _, mode := range []struct {
		name string
		hang bool
	}{{"watched", true}, {"unwatched", false}} {
		b.Run(mode.name, func(b *testing.B) {
			c := &groupClient{hint: &leaderHint{}}
			if mode.hang {
				c.hangCheck = hangCheck
			}
			parallelism(b, 32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, reply := &metapb.ResolveRequest{Ns: "bench", Path: benchPath}, &metapb.ResolveResponse{}
				for pb.Next() {
					if err := c.unary(bg, metapb.Meta_Resolve_FullMethodName, req, reply, nil, answer); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkGroupLeaderResolve resolves on the leader of a group of three
// in-process members from 32 callers, through a group client with the
// hung-leader check ("watched", as every client) and without it
// ("unwatched"): what the check costs a call end to end. Run with -count
// to interleave the two on a noisy machine.
func BenchmarkGroupLeaderResolve(b *testing.B) {
	g := newTestGroup(b, 3, nil)
	g.awaitLeader()
	mkns(b, g.client(), "bench")
	put(b, g.client(), "bench", benchPath, 1000, 1)
	var addrs []string
	for _, m := range g.members {
		addrs = append(addrs, m.addr)
	}
	for _, mode := range []struct {
		name string
		hang bool
	}{{"watched", true}, {"unwatched", false}} {
		b.Run(mode.name, func(b *testing.B) {
			hang := hangCheck
			if !mode.hang {
				hang = 0
			}
			cl, conn, err := dial(strings.Join(addrs, ","), hang, DialTLS(g.members[0].node.Client()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			req := &metapb.ResolveRequest{Ns: "bench", Path: benchPath}
			if _, err := cl.Resolve(bg, req); err != nil { // connected, the leader found
				b.Fatal(err)
			}
			parallelism(b, 32)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cl.Resolve(bg, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resolves/s")
		})
	}
}
