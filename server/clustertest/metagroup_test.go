package clustertest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/meta/metatest"
	"cairn/proto/metapb"
)

// metaKillRounds is how often TestMetaGroupKillLeader kills the leader
// (the 20).
const metaKillRounds = 20

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
// mixed write load: puts through the gateway, porcupine's clients (puts,
// deletes, reads through the group client), appends and a chain of
// renames. Kill -9 the leader metaKillRounds times (restarting it each
// time): writes resume on the new leader within seconds and a killed
// member rejoins and catches up. Then kill all three at once and start
// them again. Then SIGTERM the leader: it hands the lead over and exits
// within 2 s. At the end every acknowledged file reads back, no
// acknowledged append or rename is lost (none applied twice), and the
// history is linearizable.
func TestMetaGroupKillLeader(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "metaha", 2)
	l := startLoad(c, "metaha", 4)
	h := metatest.Clients(c.MC, "metaha", 2, 5*time.Second)
	m := startMetaMix(c.MC, "metaha")
	await.Until(t, 30*time.Second, "writes before the first fault", func() bool { return l.count() >= 20 })
	var worst time.Duration
	var tooks []time.Duration
	for round := range metaKillRounds {
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
		tooks = append(tooks, took)
		await.Until(t, 30*time.Second, "a put on a new leader", func() bool { _, ok := l.firstAfter(killed); return ok })
		first, _ := l.firstAfter(killed)
		t.Logf("round %d: killed leader %s; first mkdir acknowledged after %v, first put started after the kill after %v",
			round, leader.Addr, took.Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond))
		leader.Start(t)
		before, hb := l.count(), h.Len()
		await.Until(t, 30*time.Second, "more writes", func() bool { return l.count() >= before+5 && h.Len() >= hb+20 })
	}
	sort.Slice(tooks, func(i, j int) bool { return tooks[i] < tooks[j] })
	t.Logf("%d kills: failover (kill to first acknowledged mkdir) median %v, worst %v", len(tooks),
		tooks[len(tooks)/2].Round(time.Millisecond), worst.Round(time.Millisecond))

	// All three at once: every member dies, then all start again.
	for _, p := range c.Metas {
		p.Kill(t)
	}
	allDown := time.Now()
	for _, p := range c.Metas {
		p.Start(t)
	}
	c.MetaLeader(t)
	before, hb := l.count(), h.Len()
	await.Until(t, 60*time.Second, "writes after restarting every member", func() bool { return l.count() >= before+5 && h.Len() >= hb+20 })
	t.Logf("all three killed and restarted: writes again %v after the kill", time.Since(allDown).Round(time.Millisecond))

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
	h.Stop()
	m.stop()
	h.Check(t)
	m.check(t, c.MC)
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

// metaMix appends to one file and renames another along a chain, through
// the group client, recording what was acknowledged: the commands
// porcupine's clients do not make. Appends and renames carry request ids
// (the group client's), so a retry across a leader change applies once.
type metaMix struct {
	ns   string
	quit chan struct{}
	wg   sync.WaitGroup

	mu                     sync.Mutex
	appended, appendFailed int // acknowledged appends, and those that failed (outcome unknown)
	renamed                int // the chain's acknowledged position: the file is at chain<renamed> or later
	at                     int // where the file is believed to be now
}

const mixAppend = 100 // bytes per append

func startMetaMix(mc metapb.MetaClient, ns string) *metaMix {
	m := &metaMix{ns: ns, quit: make(chan struct{})}
	m.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-m.quit:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := mc.Append(ctx, &metapb.AppendRequest{Ns: ns, Path: "mix/log", Create: true, Parents: true,
				Extents: []*metapb.Extent{{Length: mixAppend, Volume: 1, Key: uint64(1_000_000 + i)}}})
			cancel()
			m.mu.Lock()
			if err == nil {
				m.appended++
			} else {
				m.appendFailed++
			}
			m.mu.Unlock()
		}
	})
	m.wg.Go(func() {
		put := func() error {
			_, err := mc.Commit(context.Background(), &metapb.CommitRequest{Ns: ns, Path: "mix/chain0", Parents: true, Size: 1,
				Extents: []*metapb.Extent{{Length: 1, Volume: 1, Key: 999}}})
			return err
		}
		for put() != nil {
			select {
			case <-m.quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		for {
			select {
			case <-m.quit:
				return
			default:
			}
			m.mu.Lock()
			at := m.at
			m.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := mc.Rename(ctx, &metapb.RenameRequest{Ns: ns, From: fmt.Sprintf("mix/chain%d", at), To: fmt.Sprintf("mix/chain%d", at+1)})
			cancel()
			if err != nil {
				// Applied or not: look where the file is.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, rerr := mc.Resolve(ctx, &metapb.ResolveRequest{Ns: ns, Path: fmt.Sprintf("mix/chain%d", at+1)})
				cancel()
				if rerr != nil {
					continue
				}
			}
			m.mu.Lock()
			m.at = at + 1
			if err == nil {
				m.renamed = at + 1
			}
			m.mu.Unlock()
		}
	})
	return m
}

func (m *metaMix) stop() { close(m.quit); m.wg.Wait() }

// check fails t if an acknowledged append or rename was lost, or an
// append applied twice.
func (m *metaMix) check(t *testing.T, mc metapb.MetaClient) {
	t.Helper()
	r, err := mc.Resolve(context.Background(), &metapb.ResolveRequest{Ns: m.ns, Path: "mix/log"})
	if err != nil {
		t.Fatalf("the appended file: %v", err)
	}
	lo, hi := uint64(m.appended*mixAppend), uint64((m.appended+m.appendFailed)*mixAppend)
	if r.Inode.Size < lo || r.Inode.Size > hi {
		t.Errorf("appended file of %d bytes: %d appends acknowledged, %d failed: want %d..%d", r.Inode.Size, m.appended, m.appendFailed, lo, hi)
	}
	if _, err := mc.Resolve(context.Background(), &metapb.ResolveRequest{Ns: m.ns, Path: fmt.Sprintf("mix/chain%d", m.at)}); err != nil {
		t.Errorf("renamed file not at chain%d (renames acknowledged up to chain%d): %v", m.at, m.renamed, err)
	}
	for i := range m.at {
		if _, err := mc.Resolve(context.Background(), &metapb.ResolveRequest{Ns: m.ns, Path: fmt.Sprintf("mix/chain%d", i)}); !errors.Is(errors.NotExist, err) {
			t.Errorf("chain%d still resolves (%v) after renames acknowledged up to chain%d", i, err, m.renamed)
		}
	}
	t.Logf("mix: %d appends acknowledged, %d failed, file %d bytes; %d renames (%d acknowledged)", m.appended, m.appendFailed, r.Inode.Size, m.at, m.renamed)
}
