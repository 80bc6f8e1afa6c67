package meta

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

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
