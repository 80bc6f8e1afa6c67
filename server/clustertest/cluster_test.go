package clustertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // every test here starts a cluster, which -short skips
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "cairn-clustertest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var bg = context.Background()

// content is the reproducible body of file i of writer w.
func content(w, i int) []byte {
	size := 1<<10 + (w*7919+i*104729)%(200<<10)
	if i%10 == 3 {
		size = 2<<20 + 12345 // several extents (the test client cuts at 1 MiB)
	}
	return chunktest.Data(uint64(w)<<32|uint64(i), size)
}

// load runs writers that each put files in a loop until stop closes. It
// returns the files acknowledged, the errors seen, and the longest single
// Put that was running at or started after the moment mark() was called.
type load struct {
	mu      sync.Mutex
	acked   map[string][]byte
	errs    []error
	markAt  time.Time
	longest time.Duration
	wg      sync.WaitGroup
	stop    chan struct{}

	// starts and ends of the acknowledged puts (metagroup_test.go)
	starts, ends []time.Time
}

func startLoad(c *Cluster, ns string, writers int) *load {
	l := &load{acked: map[string][]byte{}, stop: make(chan struct{})}
	for w := range writers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				p := fmt.Sprintf("w%d/f%05d", w, i)
				data := content(w, i)
				start := time.Now()
				_, err := c.Client.Put(bg, ns, p, bytes.NewReader(data), client.PutOptions{SizeHint: int64(len(data))})
				end := time.Now()
				l.mu.Lock()
				if !l.markAt.IsZero() && end.After(l.markAt) {
					l.longest = max(l.longest, end.Sub(start))
				}
				if err != nil {
					l.errs = append(l.errs, fmt.Errorf("%s: %w", p, err))
				} else {
					l.acked[p] = data
					l.starts, l.ends = append(l.starts, start), append(l.ends, end)
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// count is the number of files acknowledged so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitDead waits until meta reports the data server id not alive.
func waitDead(t *testing.T, c *Cluster, id string) {
	t.Helper()
	WaitFor(t, 60*time.Second, "meta to declare "+id+" dead", func() bool {
		for _, s := range c.Status(t).Servers {
			if s.Id == id {
				return !s.Alive
			}
		}
		return false
	})
}

// slowest is the longest acknowledged put that ended before from or began
// after to: what a put costs on this machine, at this load, without the
// failover in between.
func (l *load) slowest(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d time.Duration
	for i, s := range l.starts {
		if e := l.ends[i]; e.Before(from) || s.After(to) {
			d = max(d, e.Sub(s))
		}
	}
	return d
}

func (l *load) mark() {
	l.mu.Lock()
	l.markAt = time.Now()
	l.mu.Unlock()
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// checkAll reads back every acknowledged file.
func checkAll(t *testing.T, c *Cluster, ns string, files map[string][]byte) {
	t.Helper()
	bad := 0
	for p, data := range files {
		if err := c.Check(bg, ns, p, data); err != nil {
			bad++
			if bad <= 5 {
				t.Error(err)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d acknowledged files do not read back", bad, len(files))
	}
}

// primaryOfWritable returns the data server that is the primary of a
// writable volume: killing it hits writers in the middle of their work.
func primaryOfWritable(t *testing.T, c *Cluster) *Proc {
	for _, v := range c.Status(t).Volumes {
		if !v.Volume.ReadOnly && len(v.Volume.Servers) > 0 {
			if p := c.Find(v.Volume.Servers[0]); p != nil {
				return p
			}
		}
	}
	t.Fatal("no writable volume")
	return nil
}

// TestKillDuringWrites: kill -9 a data server under a write load. No
// acknowledged write is lost, writers go on within 2 s (more than a put
// takes on this machine without a kill), every file reads back, and the
// replication factor comes back without anyone acting.
func TestKillDuringWrites(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 4})
	c.CreateNS(t, "kill", 3)
	l := startLoad(c, "kill", 4)
	await.Until(t, 30*time.Second, "writes going through before the kill", func() bool { return l.count() >= 10 })
	victim := primaryOfWritable(t, c)
	victimID := victim.ID(t)
	l.mark()
	victim.Kill(t)
	killed := time.Now()
	// The load runs until meta has declared the victim dead and writers
	// have gone on past that: the whole failover is under load.
	waitDead(t, c, victimID)
	dead := time.Now()
	after := l.count()
	await.Until(t, 30*time.Second, "writes going on after the victim was declared dead", func() bool { return l.count() >= after+20 })
	l.finish()
	// A put across the kill may wait up to 2 s for the failover, on top of
	// what a put takes on this machine at its present load: the slowest
	// put before the kill or after meta declared the victim dead. A writer
	// that waited for that declaration (--dead-after 3s, after the last
	// heartbeat) or for a timeout still fails this on a quiet machine.
	base := l.slowest(killed, dead)
	t.Logf("%d files acknowledged, longest put across the kill %v, slowest without it %v, %d errors", len(l.acked), l.longest, base, len(l.errs))
	for i, err := range l.errs {
		if i < 5 {
			t.Errorf("writer error: %v", err)
		}
	}
	if l.longest > 2*time.Second+base {
		t.Errorf("a writer waited %v across the kill (want at most 2s more than the slowest put without a kill, %v)", l.longest, base)
	}
	checkAll(t, c, "kill", l.acked)
	st := c.WaitReplicated(t, 90*time.Second, victimID)
	t.Logf("replication factor restored %v after the kill (%d volumes, %d repairs)", time.Since(killed).Round(time.Millisecond), len(st.Volumes), st.RepairsDone)
	checkAll(t, c, "kill", l.acked)
}

// TestDeleteWhileReplicaDown: a file deleted while one of its replicas is
// down stays deleted when that replica comes back, and the space its
// needles took is reclaimed there too.
func TestDeleteWhileReplicaDown(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, DeadAfter: 20 * time.Second})
	c.CreateNS(t, "del", 3)
	files := map[string][]byte{}
	for i := range 12 {
		p := fmt.Sprintf("f%02d", i)
		files[p] = chunktest.Data(uint64(i), 300<<10)
		if _, err := c.Client.Put(bg, "del", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
	}
	f, err := c.Client.StatFresh(bg, "del", "f00")
	if err != nil {
		t.Fatal(err)
	}
	ext := f.Extents[0]
	down := c.Chunks[2]
	down.Kill(t)
	for p := range files {
		if p != "f11" {
			if err := c.Client.Delete(bg, "del", p, false, ""); err != nil {
				t.Fatal(err)
			}
			delete(files, p)
		}
	}
	// The collector has run while the server was down once the live
	// replicas dropped the needle (it skips the down one and retries).
	for _, p := range c.Chunks[:2] {
		r := c.Remote(p.Addr)
		await.Until(t, 60*time.Second, p.Name+" to drop the deleted needle while "+down.Name+" is down", func() bool {
			var b bytes.Buffer
			_, err := r.ReadTo(bg, ext.Volume, ext.Key, 0, 1, &b)
			return errors.Is(errors.NotExist, err)
		})
	}
	down.Start(t)
	c.WaitAlive(t, down)
	if _, err := c.Client.StatFresh(bg, "del", "f00"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("deleted file after the replica came back: %v", err)
	}
	checkAll(t, c, "del", files)
	// Every replica drops the needles: the one that was down included,
	// and compaction gives the space back.
	for _, p := range c.Chunks {
		r := c.Remote(p.Addr)
		WaitFor(t, 60*time.Second, p.Name+" to drop the deleted needle and reclaim its space", func() bool {
			var b bytes.Buffer
			if _, err := r.ReadTo(bg, ext.Volume, ext.Key, 0, 1, &b); !errors.Is(errors.NotExist, err) {
				return false
			}
			vols, err := r.Volumes(bg)
			if err != nil {
				return false
			}
			for _, v := range vols {
				if v.ID == ext.Volume && v.Size > 2*(300<<10)+4096 {
					return false // only f11 (and a tombstone or two) may remain
				}
			}
			return true
		})
	}
}

// TestCorruptReplica flips bytes in one replica's volume file: the client
// reads the right bytes from another replica and has the bad copy repaired;
// a needle nobody reads is found and repaired by the scrub.
func TestCorruptReplica(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, ChunkArgs: []string{"--scrub-rate", "64MiB", "--scrub-period", "1s"}, ExtentSize: 8 << 20})
	c.CreateNS(t, "rot", 3)
	a, b := chunktest.Data(101, 100<<10), chunktest.Data(102, 100<<10)
	// c is one 3 MiB needle, checked block by block as it streams: its
	// corrupt block comes after good ones have already reached the reader,
	// who must get the rest from another replica.
	cc := chunktest.Data(103, 3<<20)
	for p, d := range map[string][]byte{"a": a, "b": b, "c": cc} {
		if _, err := c.Client.Put(bg, "rot", p, bytes.NewReader(d), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
	}
	fa, _ := c.Client.StatFresh(bg, "rot", "a")
	fb, _ := c.Client.StatFresh(bg, "rot", "b")
	fc, _ := c.Client.StatFresh(bg, "rot", "c")
	// Corrupt a's and c's needles on the replica the client reads first,
	// b's on another.
	ea, eb, ec := fa.Extents[0], fb.Extents[0], fc.Extents[0]
	if len(fc.Extents) != 1 {
		t.Fatalf("c has %d extents, want one needle", len(fc.Extents))
	}
	servers := volumeServers(t, c, ea.Volume)
	firstA := int(ea.Key % uint64(len(servers))) // keys carry a random cookie in their high bits
	badA := c.Find(servers[firstA])
	badB := c.Find(servers[(firstA+1)%len(servers)])
	cServers := volumeServers(t, c, ec.Volume)
	badC := c.Find(cServers[int(ec.Key%uint64(len(cServers)))])
	flip(t, badA, ea.Volume, a[1000:1064])
	flip(t, badB, eb.Volume, b[5000:5064])
	flip(t, badC, ec.Volume, cc[5<<19:5<<19+64]) // at 2.5 MiB

	if err := c.Check(bg, "rot", "a", a); err != nil {
		t.Fatalf("read with a corrupt replica: %v", err)
	}
	if err := c.Check(bg, "rot", "c", cc); err != nil {
		t.Fatalf("read of a large needle corrupt past its first block: %v", err)
	}
	for _, x := range []struct {
		p    *Proc
		vid  uint32
		key  uint64
		want []byte
	}{{badA, ea.Volume, ea.Key, a}, {badB, eb.Volume, eb.Key, b}, {badC, ec.Volume, ec.Key, cc}} {
		r := c.Remote(x.p.Addr)
		WaitFor(t, 60*time.Second, x.p.Name+" to detect and repair its corrupt copy", func() bool {
			var buf bytes.Buffer
			_, err := r.ReadTo(bg, x.vid, x.key, 0, int64(len(x.want)), &buf)
			return err == nil && bytes.Equal(buf.Bytes(), x.want)
		})
		vols, err := r.Volumes(bg)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if v.ID == x.vid && v.Corrupt == 0 {
				t.Errorf("%s: the corruption was never detected (no corrupt read counted)", x.p.Name)
			}
		}
	}
}

func volumeServers(t *testing.T, c *Cluster, vid uint32) []string {
	for _, v := range c.Status(t).Volumes {
		if v.Volume.Id == vid {
			return v.Volume.Servers
		}
	}
	t.Fatalf("no volume %d", vid)
	return nil
}

// flip finds needle bytes in a data server's volume file and inverts one
// of them, as bit rot would, behind the server's back.
func flip(t *testing.T, p *Proc, vid uint32, needle []byte) {
	t.Helper()
	name := fmt.Sprintf("%s/%d.dat", p.Dir, vid)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, needle)
	if i < 0 {
		t.Fatalf("needle bytes not found in %s", name)
	}
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{^b[i+10]}, int64(i+10)); err != nil {
		t.Fatal(err)
	}
}

// TestRestartCluster: stop every process at once (kill -9) and start them
// again: everything reads back, and appends land at the end.
func TestRestartCluster(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 3, DeadAfter: 10 * time.Second})
	c.CreateNS(t, "rst", 3)
	files := map[string][]byte{}
	for i := range 20 {
		p := fmt.Sprintf("f%02d", i)
		files[p] = content(9, i)
		if _, err := c.Client.Put(bg, "rst", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
	}
	var log []byte
	for i := range 3 {
		part := []byte(fmt.Sprintf("line %d before the restart\n", i))
		if _, err := c.Client.Append(bg, "rst", "log", bytes.NewReader(part), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
		log = append(log, part...)
	}
	for _, p := range append([]*Proc{c.Meta}, c.Chunks...) {
		p.Kill(t)
	}
	c.Meta.Start(t)
	for _, p := range c.Chunks {
		p.Start(t)
	}
	c.WaitAlive(t, c.Chunks...)
	checkAll(t, c, "rst", files)
	for i := range 3 {
		part := []byte(fmt.Sprintf("line %d after the restart\n", i))
		if _, err := c.Client.Append(bg, "rst", "log", bytes.NewReader(part), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
		log = append(log, part...)
	}
	if err := c.Check(bg, "rst", "log", log); err != nil {
		t.Fatal(err)
	}
	more := chunktest.Data(rand.Uint64(), 50<<10)
	if _, err := c.Client.Put(bg, "rst", "new", bytes.NewReader(more), client.PutOptions{SizeHint: -1}); err != nil {
		t.Fatal(err)
	}
	files["new"] = more
	checkAll(t, c, "rst", files)
}

// startCuttable starts a cluster of 4 data servers, the last of them
// (c.Chunks[3]) in a network namespace that n.Cut partitions off.
func startCuttable(t *testing.T, labels func(i int) []string) (*Cluster, *Netns) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	n := NewNetns(t)
	c := Start(t, Options{
		Bin: bin, Servers: 4, Host: n.HostIP, Labels: labels,
		Placement: func(i int) ([]string, string) {
			if i == 3 {
				return n.Prefix(), n.NSIP
			}
			return nil, ""
		},
	})
	return c, n
}

// TestPartition cuts a data server off the network (a network namespace
// whose link goes down) while writers run and files are deleted, then
// heals it. Writers carry on, meta re-replicates without it, and once
// back it never serves its stale copies: it refuses while it holds no
// lease and drops them when meta answers its first heartbeat.
func TestPartition(t *testing.T) {
	// The cut-off server is alone in its zone, so every volume has a
	// replica on it.
	c, n := startCuttable(t, func(i int) []string {
		if i == 3 {
			return []string{"zone=z2"}
		}
		return []string{"zone=z1"}
	})
	cut := c.Chunks[3]
	cutID := cut.ID(t)
	c.CreateNS(t, "part", 3)
	files := map[string][]byte{}
	for i := range 30 {
		p := fmt.Sprintf("old%02d", i)
		files[p] = content(7, i)
		if _, err := c.Client.Put(bg, "part", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
	}
	type needle struct {
		vid uint32
		key uint64
	}
	var probes []needle // needles the cut-off server holds
	for p := range files {
		f, err := c.Client.StatFresh(bg, "part", p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range f.Extents {
			if slicesContains(volumeServers(t, c, e.Volume), cut.Addr) {
				probes = append(probes, needle{e.Volume, e.Key})
			}
		}
	}
	if len(probes) == 0 {
		t.Fatal("placement put no replica on the server in its own zone")
	}

	n.Cut(t)
	cutAt := time.Now()
	l := startLoad(c, "part", 2)
	l.mark()
	for i := range 10 { // deleted while the server is away
		p := fmt.Sprintf("old%02d", i)
		if err := c.Client.Delete(bg, "part", p, false, ""); err != nil {
			t.Fatal(err)
		}
		delete(files, p)
	}
	st := c.WaitReplicated(t, 90*time.Second, cutID)
	l.finish()
	t.Logf("re-replicated without the cut-off server %v after the cut (%d repairs); %d files written meanwhile, longest put %v",
		time.Since(cutAt).Round(time.Millisecond), st.RepairsDone, len(l.acked), l.longest)
	for i, err := range l.errs {
		if i < 5 {
			t.Errorf("writer error during the partition: %v", err)
		}
	}
	// The stall itself is a figure (logged above, about 1-2 s on a quiet
	// machine; 2.8 s was seen at load 34): the bound only catches a writer
	// that waited out a long timeout instead of moving on.
	if l.longest > 10*time.Second {
		t.Errorf("a writer waited %v across the cut (about 2 s expected; 10 s means it hung on a timeout)", l.longest)
	}

	n.Heal(t)
	healAt := time.Now()
	r := c.Remote(cut.Addr)
	WaitFor(t, 60*time.Second, "the healed server to drop its stale copies", func() bool {
		gone := true
		for _, nd := range probes {
			var b bytes.Buffer
			_, err := r.ReadTo(bg, nd.vid, nd.key, 0, 1, &b)
			if err == nil {
				t.Fatalf("the healed server served volume %d needle %d from its stale copy", nd.vid, nd.key)
			}
			if _, err := r.Needles(bg, nd.vid); !errors.Is(errors.NotExist, err) {
				gone = false
			}
		}
		return gone
	})
	t.Logf("stale copies dropped %v after the heal", time.Since(healAt).Round(time.Millisecond))
	c.WaitAlive(t, cut)
	for i := range 10 {
		if _, err := c.Client.StatFresh(bg, "part", fmt.Sprintf("old%02d", i)); !errors.Is(errors.NotExist, err) {
			t.Errorf("old%02d, deleted during the partition: %v", i, err)
		}
	}
	checkAll(t, c, "part", files)
	checkAll(t, c, "part", l.acked)
	// Back in service: new volumes may use it again.
	c.WaitReplicated(t, 30*time.Second)
}

// TestCutPrimary: the primary of the volume every writer is using is cut
// off the network (no reset, no answer: its process keeps running). The
// writers hear nothing from it, give up on it within the liveness window
// (chunk.Silence), and go on on another volume: no Put waits more than
// about 2 s, none fails, and everything acknowledged reads back once the
// server is back.
func TestCutPrimary(t *testing.T) {
	c, n := startCuttable(t, nil)
	cut := c.Chunks[3]
	c.CreateNS(t, "cutp", 3)
	// Turn volumes read-only until the writable one has the server in the
	// namespace as its primary. Placement puts the server holding the
	// fewest replicas first, so this takes a few volumes at most.
	var full []uint32
	var vol *metapb.Volume
	for range 20 {
		r, err := c.MC.Assign(bg, &metapb.AssignRequest{Ns: "cutp", Full: full})
		if err != nil {
			t.Fatal(err)
		}
		if r.Volume.Servers[0] == cut.Addr {
			vol = r.Volume
			break
		}
		full = append(full, r.Volume.Id)
	}
	if vol == nil {
		t.Fatalf("no volume had %s as its primary after %d tries", cut.Addr, len(full))
	}
	l := startLoad(c, "cutp", 4)
	acked := func() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.acked) }
	await.Until(t, 30*time.Second, "writes going through before the cut", func() bool { return acked() >= 10 })
	before := acked()
	l.mark()
	n.Cut(t)
	// Under load until meta has declared the cut server dead and writers
	// have gone on past that.
	waitDead(t, c, cut.ID(t))
	after := acked()
	await.Until(t, 30*time.Second, "writes going on after the cut server was declared dead", func() bool { return acked() >= after+20 })
	l.finish()
	t.Logf("volume %d on %v: %d files acknowledged (%d before the cut), longest put across the cut %v, %d errors",
		vol.Id, vol.Servers, len(l.acked), before, l.longest, len(l.errs))
	for i, err := range l.errs {
		if i < 5 {
			t.Errorf("writer error: %v", err)
		}
	}
	if len(l.acked) == before {
		t.Error("no write went through after the cut")
	}
	// The stall itself is a figure (logged above, about 1-2 s on a quiet
	// machine; 2.8 s was seen at load 34): the bound only catches a writer
	// that waited out a long timeout instead of moving on.
	if l.longest > 10*time.Second {
		t.Errorf("a writer waited %v across the cut (about 2 s expected; 10 s means it hung on a timeout)", l.longest)
	}
	n.Heal(t)
	c.WaitAlive(t, cut)
	checkAll(t, c, "cutp", l.acked)
}

// readLoop reads files back over and over until the returned function is
// called; that function returns the first failed read, if any (and may
// be called again).
func readLoop(c *Cluster, ns string, files map[string][]byte) func() error {
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			for p, d := range files {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if err := c.Check(bg, ns, p, d); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { close(stop); err = <-done })
		return err
	}
}

func slicesContains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// TestDrain empties a data server while its data stays readable: every
// replica it held moves elsewhere, and it deletes its copies.
func TestDrain(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 4})
	c.CreateNS(t, "drn", 3)
	files := map[string][]byte{}
	for i := range 20 {
		p := fmt.Sprintf("f%02d", i)
		files[p] = content(5, i)
		if _, err := c.Client.Put(bg, "drn", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
	}
	victim := primaryOfWritable(t, c)
	id := victim.ID(t)
	if _, err := c.MC.ClusterDrain(bg, &metapb.ClusterDrainRequest{Server: victim.Addr}); err != nil {
		t.Fatal(err)
	}
	stopReads := readLoop(c, "drn", files) // reads keep working throughout
	c.WaitReplicated(t, 60*time.Second, id)
	r := c.Remote(victim.Addr)
	WaitFor(t, 30*time.Second, "the drained server to delete its copies", func() bool {
		vols, err := r.Volumes(bg)
		return err == nil && len(vols) == 0
	})
	if err := stopReads(); err != nil {
		t.Fatalf("read during the drain: %v", err)
	}
	checkAll(t, c, "drn", files)
}

// TestRebalance: a data server joins a cluster whose volumes all sit on
// the other three. With --rebalance-on-join volumes move to it at once;
// without, nothing moves until `cairn admin rebalance`. The moves are
// throttled and shown by `cairn admin status`; every file stays readable
// throughout and every volume keeps three replicas on three servers; the
// servers a replica left delete their copy; usage ends up even.
func TestRebalance(t *testing.T) {
	for _, onJoin := range []bool{true, false} {
		t.Run(map[bool]string{true: "OnJoin", false: "OnDemand"}[onJoin], func(t *testing.T) {
			const rate = 8 << 20
			args := []string{"--max-volume-size", "3MiB", "--repair-rate", "8MiB", fmt.Sprintf("--rebalance-on-join=%v", onJoin)}
			c := Start(t, Options{Bin: bin, Servers: 3, MetaArgs: args})
			c.CreateNS(t, "bal", 3)
			files := map[string][]byte{}
			var written uint64
			for i := range 40 {
				p := fmt.Sprintf("f%02d", i)
				files[p] = content(4, i)
				written += uint64(len(files[p]))
				if _, err := c.Client.Put(bg, "bal", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: -1}); err != nil {
					t.Fatal(err)
				}
				if i%10 == 9 {
					// A volume turns read-only when its size reaches the
					// limit in a heartbeat: let it, so that data spreads
					// over several volumes.
					WaitFor(t, 10*time.Second, "full volumes to turn read-only", func() bool {
						var sum uint64
						for _, v := range c.Status(t).Volumes {
							if !v.Volume.ReadOnly && v.Volume.Size >= 3<<20 {
								return false
							}
							sum += v.Volume.Size
						}
						return sum >= written // the sizes are those of a heartbeat after the writes
					})
				}
			}
			if n := len(c.Status(t).Volumes); n < 3 {
				t.Fatalf("%d volumes: too few to move some", n)
			}
			// A server joining in meta's first --dead-after is one coming
			// back after a restart, not a new one: wait that out.
			WaitFor(t, 30*time.Second, "meta to count a joining server as new", func() bool { return c.Status(t).Settled })

			stopReads := readLoop(c, "bal", files) // reads keep working throughout
			defer stopReads()
			joined := c.AddChunk(t)
			id := joined.ID(t)
			held := func(st *metapb.ClusterStatusResponse) int {
				n := 0
				for _, v := range st.Volumes {
					if slicesContains(v.Volume.ServerIds, id) {
						n++
					}
				}
				return n
			}
			if !onJoin {
				// Three repair planning rounds that start after meta knows
				// the new server (AddChunk waited for it to be alive): any
				// of them would have planned a move.
				from := c.Status(t).RepairRounds
				var st *metapb.ClusterStatusResponse
				WaitFor(t, 30*time.Second, "three repair rounds after the join", func() bool {
					st = c.Status(t)
					return st.RepairRounds >= from+3
				})
				for _, r := range st.Repairs {
					if r.To == joined.Addr {
						t.Fatalf("a %s move to the new server without --rebalance-on-join or a rebalance", r.Kind)
					}
				}
				if n := held(st); n != 0 {
					t.Fatalf("%d volumes moved to the new server without --rebalance-on-join or a rebalance", n)
				}
				if out := c.Admin(t, "rebalance"); !bytes.Contains([]byte(out), []byte("rebalance started")) {
					t.Fatalf("cairn admin rebalance: %q", out)
				}
			}
			// The moves show in the status while they run.
			sawMove := false
			WaitFor(t, 60*time.Second, "a rebalancing move in the status", func() bool {
				st := c.Status(t)
				for _, r := range st.Repairs {
					sawMove = sawMove || r.Kind == "rebalance" && r.To == joined.Addr
				}
				return sawMove || held(st) > 0
			})
			moving := time.Now()
			// Settled: no move running and the volume map unchanged for 3s
			// (meta plans a move every second while one is worth it).
			var st *metapb.ClusterStatusResponse
			var last string
			var since time.Time
			WaitFor(t, 90*time.Second, "the rebalance to settle", func() bool {
				st = c.Status(t)
				sig := fmt.Sprint(len(st.Repairs))
				for _, v := range st.Volumes {
					sig += fmt.Sprintf(" %d:%d", v.Volume.Id, v.Volume.Generation)
				}
				if sig != last || len(st.Repairs) > 0 {
					last, since = sig, time.Now()
					return false
				}
				return time.Since(since) > 3*time.Second
			})
			took := time.Since(moving) - 3*time.Second
			if held(st) == 0 {
				t.Errorf("no volume moved to the new server")
			}
			// Usage evened out: the gap between the fullest and the
			// emptiest server narrowed from what the first three held, and
			// no server is left empty (a rebalance must not overshoot).
			var lo, hi, before uint64 = 1 << 62, 0, 0
			for _, s := range st.Servers {
				lo, hi = min(lo, s.Used), max(hi, s.Used)
			}
			for _, v := range st.Volumes {
				before += v.Volume.Size
			}
			if lo == 0 || hi-lo >= before {
				t.Errorf("bytes per server after the rebalance from %d to %d (each of the first three held %d)", lo, hi, before)
			}
			if err := stopReads(); err != nil {
				t.Fatalf("read during the rebalance: %v", err)
			}
			moved := uint64(0)
			for _, v := range st.Volumes {
				if len(v.Volume.ServerIds) != 3 || v.Health != "ok" {
					t.Errorf("volume %d after the rebalance: %v, %s", v.Volume.Id, v.Volume.ServerIds, v.Health)
				}
				seen := map[string]bool{}
				for _, s := range v.Volume.ServerIds {
					if seen[s] {
						t.Errorf("volume %d has two replicas on %s", v.Volume.Id, s)
					}
					seen[s] = true
				}
				if seen[id] {
					moved += v.Volume.Size
				}
			}
			t.Logf("%d of %d volumes (%d bytes) moved to the new server in %v (throttle %d B/s)",
				held(st), len(st.Volumes), moved, took.Round(time.Millisecond), rate)
			// Throttled: the bytes moved cannot have gone faster than the rate
			// (with a second of slack for the first move's start).
			if floor := time.Duration(float64(moved)/rate*float64(time.Second)) - time.Second; took < floor {
				t.Errorf("%d bytes moved in %v: faster than --repair-rate", moved, took)
			}
			// Every server holds exactly the copies meta places on it: the
			// ones a replica left have deleted theirs.
			for _, p := range c.Chunks {
				pid := p.ID(t)
				want := 0
				for _, v := range st.Volumes {
					if slicesContains(v.Volume.ServerIds, pid) {
						want++
					}
				}
				r := c.Remote(p.Addr)
				WaitFor(t, 30*time.Second, p.Name+" to hold only its own copies", func() bool {
					vols, err := r.Volumes(bg)
					return err == nil && len(vols) == want
				})
			}
			status := c.Admin(t, "status")
			for _, p := range c.Chunks {
				if !bytes.Contains([]byte(status), []byte(p.Addr)) {
					t.Errorf("cairn admin status does not list %s:\n%s", p.Addr, status)
				}
			}
			if !bytes.Contains([]byte(status), []byte(fmt.Sprintf("volumes: %d ok, 0 degraded", len(st.Volumes)))) {
				t.Errorf("cairn admin status after the rebalance:\n%s", status)
			}
			checkAll(t, c, "bal", files)
		})
	}
}
