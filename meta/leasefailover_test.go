package meta

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestGroupNewLeaderHonoursLeases: a member that led, lost the lead and
// leads again must not take a data server for dead on what it heard when
// it led before. The server heartbeated to member A long ago (as far
// back as DeadAfter and more), then, A having handed the lead to B, to B,
// whose lease it holds; when A leads again the server is alive as far as
// A may know: A gives it DeadAfter to heartbeat, as it gives a server it
// never heard from.
func TestGroupNewLeaderHonoursLeases(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	ctx := context.Background()
	hb := &metapb.HeartbeatRequest{ServerId: "s1", Addr: "10.0.0.1:9000"}
	a := g.awaitLeader()
	if _, err := a.svc.Heartbeat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	a.svc.pmu.Lock()
	a.svc.servers["s1"].lastSeen = time.Now().Add(-2 * a.svc.cfg.DeadAfter) // long ago
	a.svc.pmu.Unlock()
	lead := func(m *member) {
		t.Helper()
		l := g.awaitLeader()
		if err := l.svc.group.r.LeadershipTransferToServer(raft.ServerID(m.addr), raft.ServerAddress(m.raftAddr)).Error(); err != nil {
			t.Fatalf("lead to %s: %v", m.addr, err)
		}
		await.Until(t, 20*time.Second, "the new leader ready", func() bool { return g.leader() == m })
	}
	b := g.follower(a)
	lead(b)
	if _, err := b.svc.Heartbeat(ctx, hb); err != nil { // a lease from B
		t.Fatal(err)
	}
	lead(a)
	a.svc.pmu.Lock()
	dead := a.svc.dead("s1", time.Now())
	a.svc.pmu.Unlock()
	if dead {
		t.Fatal("a leader that led before takes for dead a server that heartbeats to the leader between (it may hold that leader's lease)")
	}
}

// TestGroupClientLeavesHungLeader: a leader that takes a call and answers
// nothing (stopped, or cut off with its connections open) while another
// member comes to lead must not hold the call until TCP gives up: the
// group client asks the members who leads and sends the call there. Here
// the leader holds every Mkdir and hands the lead over.
func TestGroupClientLeavesHungLeader(t *testing.T) {
	var hung atomic.Pointer[string] // the member holding Mkdirs
	var held atomic.Int64
	release := make(chan struct{})
	g := newTestGroupWith(t, 3, nil, func(m *member) []grpc.ServerOption {
		addr := m.addr
		return holdCalls(func(method string) bool {
			p := hung.Load()
			return p != nil && *p == addr && method == "Mkdir"
		}, &held, release)
	})
	t.Cleanup(func() { close(release) }) // before the members stop
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "hung")
	hung.Store(&l.addr)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := cl.Mkdir(ctx, &metapb.MkdirRequest{Ns: "hung", Path: "d"})
		done <- err
	}()
	await.Until(t, 20*time.Second, "the leader to hold the Mkdir", func() bool { return held.Load() > 0 })
	if err := l.svc.group.r.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Mkdir with the leader that took it silent and another leading: %v", err)
	}
	if _, err := cl.Resolve(context.Background(), &metapb.ResolveRequest{Ns: "hung", Path: "d"}); err != nil {
		t.Fatalf("the directory the Mkdir made: %v", err)
	}
}

// TestGroupLeaderCutOffGrantsNoLease: a leader that lost its group but
// does not know it yet (its followers gone: it still calls itself leader
// until its raft lease runs out) must not answer a data server's
// heartbeat with a lease. Another member may lead by then, and count the
// server's DeadAfter from its takeover, which a lease granted now would
// outlast.
func TestGroupLeaderCutOffGrantsNoLease(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	for _, m := range g.members {
		if m != l {
			g.stop(m)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := l.svc.Heartbeat(ctx, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "10.0.0.1:9000"})
	if err == nil {
		t.Fatalf("a leader without its majority granted a lease of %v", time.Duration(resp.LeaseNs))
	}
	if _, ok := LeaderOf(err); !ok {
		t.Fatalf("refusal %v: want a not-leader answer, which sends the server to the members again", err)
	}
}
