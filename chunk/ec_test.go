package chunk

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/ec"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/volume"
)

// ecSetup is six data servers on loopback; server 0 holds volume 1 (n
// needles of size bytes) and encodes it 4+2 in cells of cell bytes onto
// all six. It returns the stores, their clients, the keys and each key's
// home data shard.
func ecSetup(t testing.TB, n, size int, cell int64) ([]*Store, []*Remote, []uint64, map[uint64]int) {
	ctx := context.Background()
	var stores []*Store
	var rs []*Remote
	var addrs []string
	for range 6 {
		cfg := testConfig(t.TempDir())
		cfg.MaxVolumeSize = 1 << 30
		s := openStore(t, cfg)
		stores = append(stores, s)
		r := serveTuned(t, s)
		rs = append(rs, r)
		addrs = append(addrs, r.Addr())
	}
	if err := stores[0].CreateVolume(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	var keys []uint64
	for i := range n {
		k, err := stores[0].Put(ctx, 1, 1, chunktest.Data(uint64(i), size))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if _, err := rs[0].EncodeVolume(ctx, 1, 1, 4, 2, cell, addrs); err != nil {
		t.Fatal(err)
	}
	rec := []*metapb.Volume{{Id: 1, Ec: &metapb.EcVolume{K: 4, M: 2, ShardServers: addrs}}}
	home := map[uint64]int{}
	for _, s := range stores {
		s.ecHeartbeat(rec)
	}
	ev := stores[1].ecVolume(1)
	for _, k := range keys {
		nd, ok := ec.Find(ev.idx, k)
		if !ok {
			t.Fatalf("needle %d not in the index", k)
		}
		home[k] = ev.layout.Home(nd)
	}
	return stores, rs, keys, home
}

// serveTuned serves s over loopback HTTP with the connection settings the
// data server has in production (gateway.Server, which this package cannot
// import): no Nagle, and a 1 MiB send buffer, so that a 155 KiB answer goes
// into the socket in one write. Read benchmarks compare paths that differ
// in how many such answers they wait for.
func serveTuned(t testing.TB, s *Store) *Remote {
	t.Helper()
	return serveTunedOn(t, s, listen(t))
}

// listen is a loopback listener, closed with the test.
func listen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis
}

// serveTunedOn is serveTuned on lis (a store told its address first).
func serveTunedOn(t testing.TB, s *Store, lis net.Listener) *Remote {
	t.Helper()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			if tc, ok := c.(*net.TCPConn); ok && st == http.StateNew {
				tc.SetNoDelay(true)
				tc.SetWriteBuffer(1 << 20)
			}
		}}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return signed(lis.Addr().String())
}

// TestECReads: every needle of an encoded volume reads back byte-exact
// from any shard server, with its data shard gone, and with its data
// shard corrupt (the CRCs catch it and the range is rebuilt).
func TestECReads(t *testing.T) {
	const size = 155 << 10
	// 1 MiB cells: 40 needles fill every data shard, and some cross cells.
	stores, rs, keys, home := ecSetup(t, 40, size, 1<<20)
	ctx := context.Background()
	check := func(what string, r *Remote, i int, k uint64) {
		t.Helper()
		var b bytes.Buffer
		if _, err := r.ReadTo(ctx, 1, k, 0, size, &b); err != nil {
			t.Fatalf("%s: needle %d: %v", what, k, err)
		}
		if !bytes.Equal(b.Bytes(), chunktest.Data(uint64(i), size)) {
			t.Fatalf("%s: needle %d: wrong bytes", what, k)
		}
	}
	for i, k := range keys {
		check("home shard", rs[home[k]], i, k)
		check("another shard", rs[5], i, k)
	}
	// Corrupt shard 1's first cell on its server: reads of needles there
	// still return the right bytes.
	ls := stores[1].ecVolume(1).shards[1]
	junk := bytes.Repeat([]byte{0x5A}, 8192)
	if _, err := writeAt(ls.f.Name(), junk, 32+300_000); err != nil {
		t.Fatal(err)
	}
	// First from a server without the shard: the record fetched whole
	// from the damaged shard fails its checksums and is rebuilt. (A read
	// on the shard's own server then has the shard scrubbed and dropped.)
	for i, k := range keys {
		check("corrupt shard, asked of another server", rs[4], i, k)
	}
	for i, k := range keys {
		check("corrupt shard", rs[1], i, k)
	}
	// Shard 2 lost: its needles are rebuilt from the others.
	ev := stores[2].ecVolume(1)
	stores[2].ec.mu.Lock()
	delete(ev.shards, 2)
	stores[2].ec.mu.Unlock()
	for i, k := range keys {
		check("lost shard", rs[3], i, k)
	}
}

func writeAt(path string, b []byte, off int64) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.WriteAt(b, off)
}

// BenchmarkECRead155K: a 155 KiB needle read over HTTP from a replicated
// volume (the baseline), from the encoded volume's data shard that holds
// it (healthy), and with that shard lost (degraded: asked of another shard
// server, which rebuilds the range from 4 others, 3 of them remote, read
// in parallel). The sub-benchmarks time one path each (for pprof); the
// "interleaved" one reads all three in turn in every iteration and
// reports each path's mean and the ratios (healthy-x: replicated
// time / healthy time, target >= 0.9; degraded-x: replicated time /
// degraded time, target >= 0.3), so that a machine whose load changes
// during the run weighs on all three alike:
//
//	go test -run XXX -bench 'BenchmarkECRead155K/interleaved' -benchtime 3000x ./chunk/
func BenchmarkECRead155K(b *testing.B) {
	const size = 155 << 10
	// Cells of the default size, and needles enough to fill a row (every
	// data shard holds some).
	stores, rs, keys, home := ecSetup(b, int(4*ec.DefaultCell/size)+8, size, ec.DefaultCell)
	// Server 0 keeps the replica it encoded (read-only): the baseline
	// reads the same needles from it. Needles of data shard 1 are read
	// healthy from server 1; those of data shard 3, whose file server 3
	// loses, degraded from server 2.
	var healthy, lost []uint64
	for _, k := range keys {
		switch home[k] {
		case 1:
			healthy = append(healthy, k)
		case 3:
			lost = append(lost, k)
		}
	}
	ev := stores[3].ecVolume(1)
	stores[3].ec.mu.Lock()
	delete(ev.shards, 3)
	stores[3].ec.mu.Unlock()
	read := func(b *testing.B, r *Remote, k uint64) {
		if _, err := r.ReadTo(context.Background(), 1, k, 0, size, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	paths := []ecPath{
		{"replicated", rs[0], healthy},
		{"ec-healthy", rs[1], healthy},
		{"ec-shard-lost", rs[2], lost},
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				read(b, p.r, p.keys[i%len(p.keys)])
				i++
			}
		})
	}
	b.Run("interleaved", func(b *testing.B) { interleave(b, paths, read) })
	// The same with the client on the servers' host: the replica and the
	// healthy needle's shard are read through the local path (local.go,
	// ec_local.go), the degraded read over HTTP as before.
	var running sync.Once
	parent := b
	b.Run("interleaved-local", func(b *testing.B) {
		running.Do(func() {
			for _, s := range stores {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { s.Run(ctx); close(done) }()
				parent.Cleanup(func() { cancel(); <-done })
				await.Until(b, 5*time.Second, "the local-read socket", func() bool { return s.localOn.Load() })
			}
		})
		local := slices.Clone(paths)
		for i := range local {
			local[i].r = signed(local[i].r.Addr())
		}
		interleave(b, local, read)
	})
}

// interleave reads each path's keys in turn and reports the paths' cost
// and the ratios (BenchmarkECRead155K).
func interleave(b *testing.B, paths []ecPath, read func(*testing.B, *Remote, uint64)) {
	var took [3][]time.Duration
	var cpu [3]time.Duration
	i := 0
	for b.Loop() {
		for j := range paths {
			p := (i + j) % len(paths) // each path first in turn
			c0 := cpuTime()
			start := time.Now()
			read(b, paths[p].r, paths[p].keys[i%len(paths[p].keys)])
			took[p] = append(took[p], time.Since(start))
			cpu[p] += cpuTime() - c0
		}
		i++
	}
	// CPU time of the process (client and servers alike) per read:
	// what the paths cost on a busy machine, where a read's wall time
	// is mostly waiting for a CPU. The ratios as above.
	// CPU time per read of each path (µs), for comparing builds.
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(len(took[0])), "replicated-cpu-µs")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(len(took[1])), "healthy-cpu-µs")
	b.ReportMetric(float64(cpu[2].Microseconds())/float64(len(took[2])), "degraded-cpu-µs")
	b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "healthy-cpu-x")
	b.ReportMetric(float64(cpu[0])/float64(cpu[2]), "degraded-cpu-x")
	// Means and medians: on a loaded machine a read now and then
	// waits tens of milliseconds for a CPU, which moves a mean more
	// than the path's own cost does.
	var mean, med [3]float64
	for p, ds := range took {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		mean[p] = float64(sum.Microseconds()) / float64(len(ds))
		slices.Sort(ds)
		med[p] = float64(ds[len(ds)/2].Microseconds())
	}
	b.ReportMetric(mean[0], "replicated-µs")
	b.ReportMetric(mean[1], "healthy-µs")
	b.ReportMetric(mean[2], "degraded-µs")
	b.ReportMetric(mean[0]/mean[1], "healthy-x")
	b.ReportMetric(mean[0]/mean[2], "degraded-x")
	b.ReportMetric(med[0]/med[1], "healthy-x-p50")
	b.ReportMetric(med[0]/med[2], "degraded-x-p50")
}

// ecPath is one way of reading: from a server, some keys.
type ecPath struct {
	name string
	r    *Remote
	keys []uint64
}

// TestECCompact: two thirds of an encoded volume's needles are deleted;
// a compaction packs the rest into a staged generation (reads go on from
// the current shards meanwhile), every server switches, the shard files
// shrink, and every live needle reads back byte-exact from every server,
// also with a shard lost, while deleted ones stay gone.
func TestECCompact(t *testing.T) {
	const size = 155 << 10
	stores, rs, keys, _ := ecSetup(t, 48, size, 1<<20)
	ctx := context.Background()
	var addrs []string
	for _, r := range rs {
		addrs = append(addrs, r.Addr())
	}
	shardBytes := func() int64 {
		var n int64
		for _, s := range stores {
			names, _ := filepath.Glob(filepath.Join(s.cfg.Dir, "1.ec[0-9][0-9]"))
			for _, name := range names {
				fi, err := os.Stat(name)
				if err != nil {
					t.Fatal(err)
				}
				n += fi.Size()
			}
		}
		return n
	}
	check := func(what string) {
		t.Helper()
		for i, k := range keys {
			for j, r := range rs {
				var b bytes.Buffer
				_, err := r.ReadTo(ctx, 1, k, 0, size, &b)
				switch {
				case i%3 != 0 && !errors.Is(errors.NotExist, err):
					t.Fatalf("%s: deleted needle %d from server %d: %v, want NotExist", what, k, j, err)
				case i%3 == 0 && err != nil:
					t.Fatalf("%s: needle %d from server %d: %v", what, k, j, err)
				case i%3 == 0 && !bytes.Equal(b.Bytes(), chunktest.Data(uint64(i), size)):
					t.Fatalf("%s: needle %d from server %d: wrong bytes", what, k, j)
				}
			}
		}
	}
	for i, k := range keys {
		if i%3 == 0 {
			continue
		}
		for _, s := range stores { // meta's collector deletes on every shard server
			if err := s.Delete(ctx, 1, 1, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, oldSize := shardBytes(), stores[0].ecVolume(1).layout.Size
	newSize, err := rs[2].CompactEC(ctx, 1, 2, addrs)
	if err != nil {
		t.Fatal(err)
	}
	check("staged")
	if got := shardBytes(); got != before {
		t.Fatalf("shard files changed before the switch: %d bytes, were %d", got, before)
	}
	for _, r := range rs {
		if err := r.SwitchEC(ctx, 1, 2); err != nil {
			t.Fatal(err)
		}
		if err := r.SwitchEC(ctx, 1, 2); err != nil { // again: nothing staged, nothing done
			t.Fatal(err)
		}
	}
	after := shardBytes()
	t.Logf("shards: %d bytes before, %d after compaction; encoded size %d before, %d after", before, after, oldSize, newSize)
	// Shard files hold whole rows of K cells, so they shrink by rows: the
	// encoded size says what the live needles take.
	if after >= before || newSize > oldSize*2/5 {
		t.Fatalf("compaction of a volume with 2/3 deleted: shard bytes %d -> %d, encoded size %d -> %d", before, after, oldSize, newSize)
	}
	for _, s := range stores {
		if l := s.ecVolume(1).layout; l.Size != newSize {
			t.Fatalf("server %s: layout size %d after the switch, want %d", s.cfg.Dir, l.Size, newSize)
		}
	}
	check("compacted")
	ev := stores[0].ecVolume(1)
	stores[0].ec.mu.Lock()
	delete(ev.shards, 0)
	stores[0].ec.mu.Unlock()
	check("compacted, shard 0 lost")
}

// TestPackRecords: the layout an encode writes keeps a record within one
// cell when moving it costs at most cell/alignSlack bytes of padding, and
// only then; every record reads back whole at its new place through
// ec.Packed; the index is by key.
func TestPackRecords(t *testing.T) {
	for _, c := range []struct {
		name      string
		cell      int64
		sizes     func(i int) int64
		n         int
		noneCross bool
	}{
		{"155 KiB", 1 << 20, func(int) int64 { return 155 << 10 }, 60, false},
		// The read: 26 records and a gap of 65 KiB per 4 MiB cell.
		{"155 KiB, default cell", ec.DefaultCell, func(int) int64 { return 155 << 10 }, 120, true},
		{"mixed", 1 << 20, func(i int) int64 { return int64(1 + (i*7919)%(300<<10)) }, 80, false},
		{"larger than a cell", 1 << 20, func(i int) int64 { return int64(1<<20 + 4321*i) }, 5, false},
	} {
		cell := c.cell
		t.Run(c.name, func(t *testing.T) {
			// A source file: superblock, then the records end to end, each
			// filled with its own byte.
			s0, _ := volume.RecordSpan(1<<20, 1)
			hdr := 1<<20 - s0 // a record's header, before its data
			var live []ec.Needle
			pos := int64(volume.SuperSize)
			for i := range c.n {
				_, end := volume.RecordSpan(pos+hdr, c.sizes(i))
				live = append(live, ec.Needle{Key: uint64(1000 - i), Data: pos + hdr, Size: c.sizes(i)})
				pos = end
			}
			src := make([]byte, pos)
			for i, n := range live {
				start, end := volume.RecordSpan(n.Data, n.Size)
				for j := start; j < end; j++ {
					src[j] = byte(i + 1)
				}
			}
			segs, index, size := packRecords(live, cell)
			packed, err := ec.NewPacked(bytes.NewReader(src), segs, size)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(index, func(a, b ec.Needle) int { return cmp.Compare(a.Key, b.Key) }) || len(index) != len(live) {
				t.Fatalf("index of %d needles not by key (or not %d)", len(index), len(live))
			}
			var crossed int
			var payload int64
			for _, n := range index {
				i := int(1000 - n.Key)
				start, end := volume.RecordSpan(n.Data, n.Size)
				payload += end - start
				got := make([]byte, end-start)
				if _, err := packed.ReadAt(got, start); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, bytes.Repeat([]byte{byte(i + 1)}, len(got))) {
					t.Fatalf("needle %d does not read back whole at %d", n.Key, n.Data)
				}
				if start/cell != (end-1)/cell {
					crossed++
					// It crossed: it is larger than a cell, or the gap it
					// would have left was too large to pad.
					if gap := cell - start%cell; end-start <= cell && gap <= cell/alignSlack {
						t.Errorf("needle %d crosses a cell with a gap of only %d bytes before it", n.Key, gap)
					}
				}
			}
			if pad := size - int64(volume.SuperSize) - payload; pad > (size/cell+1)*cell/alignSlack {
				t.Errorf("%d bytes of padding in %d bytes", pad, size)
			}
			if c.noneCross && crossed > 0 {
				t.Errorf("%d records cross a cell", crossed)
			}
			t.Logf("%d of %d records cross a cell; %d bytes packed from %d", crossed, len(live), size, pos)
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestECDropStaged: the staged files of a compaction are dropped once
// the attempt is over without a switch on this server (meta places no
// shard of the volume here any more, or records the volume at a later
// generation), and kept while it may be in progress (a generation past
// the volume's); the heartbeat does it, now and then.
func TestECDropStaged(t *testing.T) {
	const size = 155 << 10
	stores, rs, keys, _ := ecSetup(t, 30, size, 1<<20)
	ctx := context.Background()
	var addrs []string
	for _, r := range rs {
		addrs = append(addrs, r.Addr())
	}
	for _, k := range keys[:20] {
		for _, s := range stores {
			must(t, s.Delete(ctx, 1, 1, k))
		}
	}
	if _, err := rs[2].CompactEC(ctx, 1, 2, addrs); err != nil {
		t.Fatal(err)
	}
	staged := func(s *Store) int {
		names, _ := filepath.Glob(filepath.Join(s.cfg.Dir, "1.ec*.g2"))
		return len(names)
	}
	for i, s := range stores {
		if staged(s) != 2 { // its shard and the index
			t.Fatalf("server %d: %d staged files, want 2", i, staged(s))
		}
	}
	at := func(gen uint64) map[uint32]*metapb.Volume {
		return map[uint32]*metapb.Volume{1: {Id: 1, Generation: gen, Ec: &metapb.EcVolume{K: 4, M: 2, ShardServers: addrs}}}
	}
	stores[0].ecDropStaged(at(1)) // the volume at 1, staged 2: perhaps in progress
	stores[1].ecDropStaged(nil)   // no shard of it placed here any more
	stores[2].ecDropStaged(at(3)) // recorded at 3: the attempt at 2 is over
	for i, want := range []int{2, 0, 0} {
		if got := staged(stores[i]); got != want {
			t.Errorf("server %d: %d staged files left, want %d", i, got, want)
		}
	}
	for i, s := range stores[:3] {
		if _, err := os.Stat(ecShardPath(s.cfg.Dir, 1, i)); err != nil {
			t.Errorf("server %d: its current shard went with the staged files: %v", i, err)
		}
	}
	// Through the heartbeat, once its sweep is due.
	stores[3].ec.stagedSwept.Store(0)
	stores[3].ecHeartbeat([]*metapb.Volume{at(3)[1]})
	if got := staged(stores[3]); got != 0 {
		t.Errorf("server 3: %d staged files left after a heartbeat naming the volume at 3", got)
	}
	stores[4].ecHeartbeat([]*metapb.Volume{at(3)[1]}) // swept at setup: not due yet
	if got := staged(stores[4]); got != 2 {
		t.Errorf("server 4: %d staged files, want 2 until the sweep is due", got)
	}
}

func FuzzParseStagedName(f *testing.F) {
	for _, s := range []string{"1.ecx.g2", "12.ec03.g4", "1.ec3.g2", "x.ecx.g1", "1.ecx.g", "01.ecx.g2", "1.dat", "1.ec00.g2.tmp123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		vid, gen, ok := parseStagedName(name)
		if !ok {
			return
		}
		prefix, suffix := fmt.Sprintf("%d.ec", vid), fmt.Sprintf(".g%d", gen)
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) < len(prefix)+len(suffix)+1 {
			t.Fatalf("%q parsed as volume %d generation %d", name, vid, gen)
		}
	})
}
