package clustertest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/meta"
	"cairn/meta/metatest"
	"cairn/proto/metapb"
)

// TestMetaGroupPartitions runs a meta group of three real processes, the
// first in a network namespace whose Raft traffic the test cuts (iptables
// inside the namespace drops every segment of the three Raft ports) while
// clients still reach all three members. Four clients put, delete and
// read files through the group client the whole time; the first member
// is cut off once as the leader (it must step down and stop answering,
// the other two elect a leader and go on) and once as a follower (the
// other two go on); each time the cut heals and it rejoins. porcupine
// checks the history: no acknowledged write lost, no stale read, no two
// leaders answering.
func TestMetaGroupPartitions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	n := NewNetns(t)
	c := Start(t, Options{Bin: bin, Servers: 1, Host: n.HostIP, MetaGroup: 3,
		MetaPlacement: func(i int) ([]string, string) {
			if i == 0 {
				return n.Prefix(), n.NSIP
			}
			return nil, ""
		}})
	c.CreateNS(t, "part", 1)
	var ports []string
	for _, a := range c.MetaRaft {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	cut := c.Metas[0]
	h := metatest.Clients(c.MC, "part", 4, 2*time.Second)
	progress := func(n int, what string) {
		t.Helper()
		await.Until(t, 90*time.Second, what, func() bool { return h.Len() >= n })
	}
	progress(100, "operations before the first cut")

	// lead steers the lead onto (or off) the member that will be cut: a
	// leader told to stop hands the lead to another member.
	lead := func(want bool) {
		t.Helper()
		for range 12 {
			l := c.MetaLeader(t)
			if (l == cut) == want {
				return
			}
			if want {
				l.Stop(t)
				l.Start(t)
			} else {
				cut.Stop(t)
				cut.Start(t)
			}
		}
		t.Fatalf("could not make %s leader=%v", cut.Addr, want)
	}
	for _, asLeader := range []bool{true, false} {
		lead(asLeader)
		before := h.Len()
		cutAt := time.Now()
		n.CutTCP(t, ports...)
		progress(before+200, "operations while the first member is cut off")
		t.Logf("cut as leader=%v: 200 operations in %v", asLeader, time.Since(cutAt).Round(time.Millisecond))
		// The cut member must not lead, whatever it thinks: a client of it
		// alone is refused (a follower names the leader, or none).
		if err := refusedBy(cut.Addr, c); err != nil {
			t.Fatalf("the cut-off member (leader=%v before the cut): %v", asLeader, err)
		}
		n.HealTCP(t)
		before = h.Len()
		progress(before+100, "operations after the heal")
	}
	h.Stop()
	h.Check(t)
	// One group again: every member names the same leader.
	await.Until(t, 60*time.Second, "every member naming one leader", func() bool {
		var leader string
		for _, p := range c.Metas {
			r, err := memberView(p.Addr, c)
			if err != nil || r.Leader == "" || (leader != "" && r.Leader != leader) {
				return false
			}
			leader = r.Leader
		}
		return true
	})
}

// memberView asks one member alone who leads.
func memberView(addr string, c *Cluster) (*metapb.MetaMembersResponse, error) {
	mc, conn, err := meta.Dial(addr, meta.DialTLS(c.TLS))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return mc.MetaMembers(ctx, &metapb.Empty{})
}

// refusedBy checks that the member at addr, asked alone, refuses a read
// as not the leader.
func refusedBy(addr string, c *Cluster) error {
	mc, conn, err := meta.Dial(addr, meta.DialTLS(c.TLS))
	if err != nil {
		return err
	}
	defer conn.Close()
	var last error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := mc.Resolve(ctx, &metapb.ResolveRequest{Ns: "part", Path: "f0"})
		cancel()
		if _, ok := meta.LeaderOf(err); ok {
			return nil
		}
		last = err
		<-time.After(50 * time.Millisecond)
	}
	return &notRefused{last}
}

type notRefused struct{ err error }

func (e *notRefused) Error() string {
	if e.err == nil {
		return "it answered a read as the leader"
	}
	return "it did not refuse a read as not the leader: " + e.err.Error()
}
