package clustertest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// groupLoad is writers putting small files through the client library
// (whose meta connection spans the group) and recording each call and
// return.
type groupLoad struct {
	mu    sync.Mutex
	acked map[string][]byte
	ends  []time.Time // of acknowledged puts, with their starts
	start []time.Time
	errs  int
	first map[string]int // error messages, counted
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startGroupLoad(c *Cluster, ns string, writers int) *groupLoad {
	l := &groupLoad{acked: map[string][]byte{}, stop: make(chan struct{}), first: map[string]int{}}
	for w := range writers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				p := fmt.Sprintf("w%d/f%05d", w, i)
				data := chunktest.Data(uint64(w)<<32|uint64(i), 4096)
				start := time.Now()
				_, err := c.Client.Put(bg, ns, p, bytes.NewReader(data), client.PutOptions{SizeHint: int64(len(data))})
				l.mu.Lock()
				if err != nil {
					l.errs++
					l.first[err.Error()]++
				} else {
					l.acked[p] = data
					l.start, l.ends = append(l.start, start), append(l.ends, time.Now())
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *groupLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// firstAfter is the end of the first acknowledged put that started after t.
func (l *groupLoad) firstAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for i, s := range l.start {
		if s.After(t) && (first.IsZero() || l.ends[i].Before(first)) {
			first = l.ends[i]
		}
	}
	return first, !first.IsZero()
}

// TestMetaGroupKillLeader: a meta group of three real processes under a
// 4 KiB write load; kill -9 the leader three times (restarting it each
// time). Writes resume on the new leader within seconds, every
// acknowledged file reads back, and a killed member rejoins and catches up.
// Then SIGTERM the leader: it hands the lead over and exits within 2 s.
func TestMetaGroupKillLeader(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "metaha", 2)
	l := startGroupLoad(c, "metaha", 4)
	await.Until(t, 30*time.Second, "writes before the first fault", func() bool { return l.count() >= 20 })
	var worst time.Duration
	for round := range 3 {
		leader := c.MetaLeader(t)
		killed := time.Now()
		leader.Kill(t)
		await.Until(t, 30*time.Second, "a write on a new leader", func() bool { _, ok := l.firstAfter(killed); return ok })
		first, _ := l.firstAfter(killed)
		took := first.Sub(killed)
		worst = max(worst, took)
		t.Logf("round %d: killed leader %s; first write started after the kill acknowledged %v later", round, leader.Addr, took.Round(time.Millisecond))
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
	close(l.stop)
	l.wg.Wait()
	t.Logf("%d files acknowledged, %d puts failed (in flight at a kill, or before data servers found the new leader); worst failover %v",
		len(l.acked), l.errs, worst.Round(time.Millisecond))
	if worst > 5*time.Second {
		t.Errorf("failover took %v", worst)
	}
	for msg, n := range l.first {
		t.Logf("%5d x %s", n, msg)
	}
	checkAll(t, c, "metaha", l.acked)
	r, err := c.MC.MetaMembers(bg, &metapb.Empty{})
	if err != nil || len(r.Members) != 3 || r.Leader == "" {
		t.Fatalf("members after the faults: %v %v", r, err)
	}
	out := c.Admin(t, "meta", "ls")
	t.Logf("cairn admin meta ls:\n%s", out)
}
