package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/errors"
	"cairn/proto/metapb"
)

// tierLoad writes and reads a namespace while tiering moves its files:
// every acknowledged write is remembered, and every read must return
// bytes some write of that path put there.
type tierLoad struct {
	c  *Cluster
	ns string

	mu       sync.Mutex
	versions map[string][][]byte // per path, every write tried, in order
	errs     map[string][]error  // per path, each write's outcome (nil: acknowledged)
	acked    map[string]int      // per path, the index of the last acknowledged write
	static   []string            // paths written once (reads must always succeed)

	crashing   atomic.Bool   // a process is being killed: read errors are expected
	crashes    atomic.Uint64 // bumped when crashing is set or cleared
	reads      atomic.Int64
	readErrs   atomic.Int64
	writes     atomic.Int64
	wrong      atomic.Int64 // reads that returned bytes no write put there
	firstWrong atomic.Value
}

func newTierLoad(c *Cluster, ns string) *tierLoad {
	return &tierLoad{c: c, ns: ns, versions: map[string][][]byte{}, errs: map[string][]error{}, acked: map[string]int{}}
}

// put writes p and records the outcome.
func (l *tierLoad) put(ctx context.Context, p string, data []byte) error {
	l.mu.Lock()
	l.versions[p] = append(l.versions[p], data)
	l.errs[p] = append(l.errs[p], errors.New("in flight"))
	i := len(l.versions[p]) - 1
	l.mu.Unlock()
	_, err := l.c.Client.Put(ctx, l.ns, p, bytes.NewReader(data), client.PutOptions{SizeHint: int64(len(data))})
	l.mu.Lock()
	l.errs[p][i] = err
	if err == nil {
		if cur, ok := l.acked[p]; !ok || i > cur {
			l.acked[p] = i
		}
	}
	l.mu.Unlock()
	if err == nil {
		l.writes.Add(1)
	}
	return err
}

func (l *tierLoad) isVersion(p string, got []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.versions[p] {
		if bytes.Equal(v, got) {
			return true
		}
	}
	return false
}

// read reads p through a fresh resolution and checks what it got.
func (l *tierLoad) read(ctx context.Context, p string) error {
	l.reads.Add(1)
	f, err := l.c.Client.StatFresh(ctx, l.ns, p)
	if err == nil {
		var got []byte
		if got, err = l.c.Client.ReadAll(ctx, f); err == nil {
			if !l.isVersion(p, got) {
				l.wrong.Add(1)
				l.firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s: %d bytes no write put there", p, len(got)))
			}
			return nil
		}
	}
	l.readErrs.Add(1)
	return err
}

// run writes and reads until ctx ends: static files written once each
// (under archive/new-), files overwritten again and again (archive/churn-
// and live/), and reads of the static files, each of which must succeed
// unless a process is being killed.
func (l *tierLoad) run(ctx context.Context, t *testing.T, wg *sync.WaitGroup) {
	wg.Add(2)
	// The load is paced (a write every 20 ms, a read every 10 ms at most):
	// the 2 cores also run 6 data servers, meta and the mover.
	go func() { // writer
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var p string
			switch i % 3 {
			case 0:
				p = fmt.Sprintf("archive/new-%04d", i)
			case 1:
				p = fmt.Sprintf("archive/churn-%d", i%4)
			default:
				p = fmt.Sprintf("live/w%d", i%5)
			}
			data := chunktest.Data(uint64(i)+7_000_000, 20<<10+(i*7919)%(200<<10))
			if err := l.put(ctx, p, data); err == nil && i%3 == 0 {
				l.mu.Lock()
				l.static = append(l.static, p)
				l.mu.Unlock()
			}
		}
	}()
	go func() { // reader
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.mu.Lock()
			if len(l.static) == 0 {
				l.mu.Unlock()
				continue
			}
			p := l.static[(i*7)%len(l.static)]
			l.mu.Unlock()
			epoch := l.crashes.Load()
			err := l.read(ctx, p)
			if err != nil && ctx.Err() == nil && !l.crashing.Load() && l.crashes.Load() == epoch {
				t.Errorf("read of %s during tiering failed with every process up: %v", p, err)
			}
		}
	}()
}

// crash marks the time a process is killed and restarted.
func (l *tierLoad) crash(on bool) {
	l.crashing.Store(on)
	l.crashes.Add(1)
}

// verify reads every path back: the last acknowledged write, or one tried
// after it (whose acknowledgement a crash may have cut off). when says
// which check this is, for the failure's message.
func (l *tierLoad) verify(t *testing.T, when string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := 0
	for p, vs := range l.versions {
		i, ok := l.acked[p]
		if !ok {
			continue // never acknowledged
		}
		f, err := l.c.Client.StatFresh(bg, l.ns, p)
		var got []byte
		if err == nil {
			got, err = l.c.Client.ReadAll(bg, f)
		}
		match := false
		for _, v := range vs[i:] {
			match = match || err == nil && bytes.Equal(got, v)
		}
		if !match {
			bad++
			if bad <= 5 {
				// How the writes from the last acknowledged one on ended
				// tells a lost acknowledged write from a failed one that
				// applied.
				t.Errorf("%s, %s: %d bytes, err %v: not the last acknowledged write (or a later one); writes %d.. of %d ended: %v",
					when, p, len(got), err, i, len(vs), l.errs[p][i:])
				if f != nil {
					// Which copy the file names (a client's write, or a
					// move's: its version and class) goes with meta's log.
					t.Errorf("%s at %s: version %d, class %q, extents %v", p, time.Now().UTC().Format("15:04:05.000"),
						f.Inode.Version, f.Inode.StorageClass, f.Extents)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d paths lost their acknowledged write", bad, len(l.versions))
	}
	if n := l.wrong.Load(); n > 0 {
		t.Fatalf("%d reads returned bytes no write put there; first: %v", n, l.firstWrong.Load())
	}
}

func classOf(t *testing.T, c *Cluster, ns, p string) string {
	t.Helper()
	r, err := c.MC.Resolve(bg, &metapb.ResolveRequest{Ns: ns, Path: p})
	if err != nil {
		t.Fatalf("%s/%s: %v", ns, p, err)
	}
	return r.Inode.StorageClass
}

func tierStatus(t *testing.T, c *Cluster) *metapb.TierStatusResponse {
	t.Helper()
	var st *metapb.TierStatusResponse
	WaitFor(t, 60*time.Second, "meta to answer TierStatus", func() bool {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		var err error
		st, err = c.MC.TierStatus(ctx, &metapb.Empty{})
		return err == nil
	})
	return st
}

// TestTiering: 6 data servers, 3 with media=ssd (class hot, 2 replicas)
// and 3 with media=hdd (class cold, erasure-coded 2+1). A policy moves
// archive/ and files unread for 4 s to cold, and files read within 3 s
// back to hot, while a writer and a reader run; meta and then a data
// server are killed (-9) in the middle of a move. Every read returns
// bytes that were written, every acknowledged write reads back, and the
// files end in the classes the policy says.
func TestTiering(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 6, DeadAfter: 3 * time.Second,
		MetaArgs: []string{"--max-volume-size", "3MiB", "--ec-cell", "64KiB", "--tier-interval", "1s",
			"--class", "hot=replicated:2,media=ssd", "--class", "cold=ec:2+1,media=hdd,rf=2"},
		Labels: func(i int) []string {
			media := "ssd"
			if i >= 3 {
				media = "hdd"
			}
			return []string{"media=" + media, fmt.Sprintf("rack=r%d", i%3)}
		}})
	const ns = "tiered"
	if _, err := c.MC.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: ns, Owner: Root, StorageClass: "hot"}); err != nil {
		t.Fatal(err)
	}
	load := newTierLoad(c, ns)
	for i := range 20 {
		p := fmt.Sprintf("archive/old-%02d", i)
		if err := load.put(bg, p, chunktest.Data(uint64(i)+5_000_000, 30<<10+(i*104729)%(250<<10))); err != nil {
			t.Fatal(err)
		}
		load.static = append(load.static, p)
	}
	ctx, stop := context.WithCancel(bg)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	load.run(ctx, t, &wg)

	// Slow moves (64 KiB/s) so that the kills below land in the middle of one.
	out := c.Admin(t, "tier", "policy", "set", "--rate", "64KiB")
	if !strings.Contains(out, "--rate 65536") {
		t.Fatalf("admin tier policy set (global):\n%s", out)
	}
	out = c.Admin(t, "tier", "policy", "set", ns, "--rule", "to=cold,prefix=archive/", "--rule", "to=cold,unread=4s",
		"--promote-to", "hot", "--promote-read", "3s")
	if !strings.Contains(out, "--rule to=cold,prefix=archive/ --rule to=cold,unread=4s") {
		t.Fatalf("admin tier policy set %s:\n%s", ns, out)
	}

	// Kill -9 meta while a move is in progress, and start it again.
	midMove := func(what string) {
		t.Helper()
		WaitFor(t, 120*time.Second, "a move in progress "+what, func() bool {
			st, err := c.MC.TierStatus(bg, &metapb.Empty{})
			return err == nil && len(st.Moving) > 0
		})
	}
	midMove("before killing meta")
	// ... with copies made: the move's intent names them (meta/tier_intent.go).
	WaitFor(t, 120*time.Second, "a move with copies made", func() bool {
		st, err := c.MC.TierStatus(bg, &metapb.Empty{})
		return err == nil && st.Intents > 0
	})
	load.crash(true)
	c.Meta.Kill(t)
	c.Meta.Start(t)
	c.WaitAlive(t, c.Chunks...)
	load.crash(false)
	t.Logf("meta killed mid-move and restarted; %d writes, %d reads so far", load.writes.Load(), load.reads.Load())

	// Kill -9 a data server (an hdd one: moves write there) mid-move.
	midMove("before killing a data server")
	victim := c.Chunks[4]
	load.crash(true)
	victim.Kill(t)
	victim.Start(t)
	c.WaitAlive(t, victim)
	load.crash(false)
	t.Logf("data server killed mid-move and restarted")

	// Faster now: every archive/old- file reaches cold.
	c.Admin(t, "tier", "policy", "set", "--rate", "64MiB")
	WaitFor(t, 180*time.Second, "the old archive files to move to cold", func() bool {
		for i := range 20 {
			if classOf(t, c, ns, fmt.Sprintf("archive/old-%02d", i)) != "cold" {
				return false
			}
		}
		return true
	})
	st := tierStatus(t, c)
	t.Logf("tier status under load: moved %d (%d bytes), stale %d, failed %d; classes %v", st.Moved, st.MovedBytes, st.Stale, st.Failed, st.Classes)

	stop()
	wg.Wait()
	load.verify(t, "after the load stopped")
	t.Logf("load: %d writes acknowledged, %d reads (%d failed while a process was killed), all verified", load.writes.Load(), load.reads.Load(), load.readErrs.Load())

	// Promotion: a cold file read lately goes back to hot.
	p := "archive/old-00"
	if err := load.read(bg, p); err != nil {
		t.Fatal(err)
	}
	// archive/ always goes to cold: first narrow the prefix rules to the
	// files written under load, so that the old ones (read by the reader
	// throughout) are promoted.
	c.Admin(t, "tier", "policy", "set", ns, "--rule", "to=cold,prefix=archive/new-", "--rule", "to=cold,prefix=archive/churn-",
		"--rule", "to=cold,unread=1h", "--promote-to", "hot", "--promote-read", "1h")
	WaitFor(t, 120*time.Second, p+" to be promoted to hot", func() bool {
		return classOf(t, c, ns, p) == "" // the namespace's class
	})
	load.verify(t, "after the promotions")

	out = c.Admin(t, "tier", "status")
	for _, want := range []string{"CLASS", "cold", "hot", "moved", "policies:"} {
		if !strings.Contains(out, want) {
			t.Errorf("admin tier status lacks %q:\n%s", want, out)
		}
	}
	t.Logf("admin tier status:\n%s", out)

	// Every move's intent ended: switched, aborted, or (the one meta was
	// killed in) released to the collector; no copy is left unreferenced.
	WaitFor(t, 120*time.Second, "every move intent to end", func() bool {
		st, err := c.MC.TierStatus(bg, &metapb.Empty{})
		return err == nil && st.Intents == 0 && len(st.Moving) == 0
	})
	st = tierStatus(t, c)
	t.Logf("after the moves: %d intents open, %d unfinished moves' copies released", st.Intents, st.UnfinishedReleased)
}
