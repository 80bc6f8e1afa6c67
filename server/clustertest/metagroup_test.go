package clustertest

import (
	"fmt"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// firstAfter is the end of the first acknowledged put that started after t.
func (l *load) firstAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for i, s := range l.starts {
		if s.After(t) && (first.IsZero() || l.ends[i].Before(first)) {
			first = l.ends[i]
		}
	}
	return first, !first.IsZero()
}

// TestMetaGroupKillLeader: a meta group of three real processes under a
// write load; kill -9 the leader three times (restarting it each
// time). Writes resume on the new leader within seconds, every
// acknowledged file reads back, and a killed member rejoins and catches up.
// Then SIGTERM the leader: it hands the lead over and exits within 2 s.
func TestMetaGroupKillLeader(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "metaha", 2)
	l := startLoad(c, "metaha", 4)
	await.Until(t, 30*time.Second, "writes before the first fault", func() bool { return l.count() >= 20 })
	var worst time.Duration
	for round := range 3 {
		leader := c.MetaLeader(t)
		killed := time.Now()
		leader.Kill(t)
		// The meta failover alone: a metadata write (mkdir) retried until
		// one is acknowledged. The load's own first put across the kill
		// also waits for data transfers, which a loaded machine stretches.
		var took time.Duration
		for i := 0; took == 0; i++ {
			if _, err := c.MC.Mkdir(bg, &metapb.MkdirRequest{Ns: "metaha", Path: fmt.Sprintf("probe%d-%d", round, i)}); err == nil {
				took = time.Since(killed)
			} else if time.Since(killed) > 30*time.Second {
				t.Fatalf("no metadata write within 30s of the kill: %v", err)
			}
		}
		worst = max(worst, took)
		await.Until(t, 30*time.Second, "a put on a new leader", func() bool { _, ok := l.firstAfter(killed); return ok })
		first, _ := l.firstAfter(killed)
		t.Logf("round %d: killed leader %s; first mkdir acknowledged after %v, first put started after the kill after %v",
			round, leader.Addr, took.Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond))
		leader.Start(t)
		before := l.count()
		await.Until(t, 30*time.Second, "more writes", func() bool { return l.count() >= before+20 })
	}
	// SIGTERM: the leader hands over and is gone within 2 s.
	leader := c.MetaLeader(t)
	termed := time.Now()
	leader.Stop(t)
	if exit := time.Since(termed); exit > 2*time.Second {
		t.Errorf("the leader took %v to exit on SIGTERM (want at most 2s)", exit)
	} else {
		t.Logf("SIGTERM: the leader exited after %v", exit.Round(time.Millisecond))
	}
	await.Until(t, 30*time.Second, "a write after the hand-over", func() bool { _, ok := l.firstAfter(termed); return ok })
	first, _ := l.firstAfter(termed)
	t.Logf("SIGTERM: first write started after the signal acknowledged %v later", first.Sub(termed).Round(time.Millisecond))
	leader.Start(t)
	l.finish()
	t.Logf("%d files acknowledged, %d puts failed (in flight at a kill, or before data servers found the new leader); worst failover %v",
		len(l.acked), len(l.errs), worst.Round(time.Millisecond))
	if worst > 10*time.Second { // the goal is 3 s; this guards against a hang on a loaded machine
		t.Errorf("failover took %v", worst)
	}
	for i, err := range l.errs {
		if i < 10 {
			t.Logf("put failed: %v", err)
		}
	}
	checkAll(t, c, "metaha", l.acked)
	r, err := c.MC.MetaMembers(bg, &metapb.Empty{})
	if err != nil || len(r.Members) != 3 || r.Leader == "" {
		t.Fatalf("members after the faults: %v %v", r, err)
	}
	out := c.Admin(t, "meta", "ls")
	t.Logf("cairn admin meta ls:\n%s", out)
}
