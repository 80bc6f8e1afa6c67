package clustertest

import (
	"context"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
)

// TestMetaGroupFrozenMember: a meta group of three processes, one member
// frozen (SIGSTOP: its connections stay open and it answers nothing, as
// when it is cut off), a follower and then the leader. Reads any member
// may answer (StaleOK, AnyMember: the group client sends them round
// robin, so some go to the frozen member) must all be answered, by the
// others, while it stays frozen: none may wait on it until TCP gives up
// or the caller's deadline passes.
func TestMetaGroupFrozenMember(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 1, MetaGroup: 3})
	c.CreateNS(t, "frozen", 1)
	if _, err := c.MC.Mkdir(bg, &metapb.MkdirRequest{Ns: "frozen", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	leader := c.MetaLeader(t)
	lv, err := memberView(leader.Addr, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Metas { // every member's stale reads see the directory
		await.Until(t, 30*time.Second, p.Name+" to apply the directory", func() bool {
			r, err := memberView(p.Addr, c)
			return err == nil && r.Applied >= lv.Applied
		})
	}
	reads := func(frozen *Proc, role string) {
		t.Helper()
		start := time.Now()
		for i := range 6 { // round robin: each mark reaches every member
			for _, m := range []struct {
				name string
				mark func(context.Context) context.Context
			}{{"stale-ok", meta.StaleOK}, {"any-member", meta.AnyMember}} {
				ctx, cancel := context.WithTimeout(bg, 30*time.Second)
				_, err := c.MC.Resolve(m.mark(ctx), &metapb.ResolveRequest{Ns: "frozen", Path: "d"})
				cancel()
				if err != nil {
					t.Fatalf("%s read %d with %s (%s) frozen: %v", m.name, i, frozen.Name, role, err)
				}
			}
		}
		t.Logf("12 reads with %s (%s) frozen: %v", frozen.Name, role, time.Since(start).Round(time.Millisecond))
	}

	var follower *Proc
	for _, p := range c.Metas {
		if p != leader {
			follower = p
		}
	}
	follower.Pause(t)
	reads(follower, "a follower")
	follower.Resume(t)
	await.Until(t, 60*time.Second, "the thawed follower back in the group", func() bool {
		r, err := memberView(follower.Addr, c)
		return err == nil && r.Leader != ""
	})

	leader = c.MetaLeader(t)
	leader.Pause(t)
	reads(leader, "the leader")
	leader.Resume(t)
}
