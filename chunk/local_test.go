package chunk

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"cairn"
	"cairn/chunk/chunktest"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/volume"
)

// serveLocal is serve with the store running, so that its local-read
// socket (unless turned off) is up: a Remote on this host reads the
// volume files in place.
func serveLocal(t testing.TB, s *Store) *Remote {
	t.Helper()
	r := serve(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	await.Until(t, 5*time.Second, "the local-read socket", func() bool { return s.cfg.NoLocalReads || s.localOn.Load() })
	return r
}

func localConfig(dir string) Config {
	cfg := testConfig(dir)
	cfg.CompactRatio, cfg.ScrubRate = -1, -1 // no background work under the test
	return cfg
}

// TestRemoteLocal runs the shared suite through the local-read path.
func TestRemoteLocal(t *testing.T) {
	chunktest.Run(t, func(t *testing.T) cairn.Chunks {
		return serveLocal(t, openStore(t, localConfig(t.TempDir())))
	})
}

// TestLocalReads reads needles of every shape through the local path, both
// ways (ReadTo, ReadLocal into a buffer), across a compaction, and checks
// that it is the path taken.
func TestLocalReads(t *testing.T) {
	s := openStore(t, localConfig(t.TempDir()))
	r := serveLocal(t, s)
	ctx := context.Background()
	must(t, s.CreateVolume(ctx, 1, 1))
	sizes := []int{1, 4096, 65535, 65536, 65537, 200<<10 + 3, 1 << 20}
	keys := make([]uint64, len(sizes))
	data := make([][]byte, len(sizes))
	for i, n := range sizes {
		data[i] = chunktest.Data(uint64(i+1), n)
		k, err := s.Put(ctx, 1, 1, data[i])
		must(t, err)
		keys[i] = k
	}
	check := func(t *testing.T) {
		t.Helper()
		for i, d := range data {
			if d == nil {
				continue
			}
			n := int64(len(d))
			for _, rg := range [][2]int64{{0, n}, {0, 1}, {n - 1, 1}, {n / 3, n / 2}, {65535, 2}, {65536, 65536}, {100, 140000}} {
				off, length := rg[0], min(rg[1], n-rg[0])
				if off >= n || length < 0 {
					continue
				}
				var buf bytes.Buffer
				if _, err := r.ReadTo(ctx, 1, keys[i], off, length, &buf); err != nil || !bytes.Equal(buf.Bytes(), d[off:off+length]) {
					t.Fatalf("ReadTo of %d-byte needle [%d,+%d): err %v, equal %v", n, off, length, err, bytes.Equal(buf.Bytes(), d[off:off+length]))
				}
				p := make([]byte, length)
				got, local, err := r.ReadLocal(ctx, 1, keys[i], p, off)
				if err != nil || !local || got != int(length) || !bytes.Equal(p, d[off:off+length]) {
					t.Fatalf("ReadLocal of %d-byte needle [%d,+%d): n %d, local %v, err %v", n, off, length, got, local, err)
				}
			}
		}
	}
	check(t)
	if !r.Local() {
		t.Fatal("reads did not take the local path")
	}
	asked := locates(s)
	if asked == 0 {
		t.Fatal("the server answered no locate")
	}
	check(t)
	if n := locates(s); n != asked {
		t.Errorf("needles located a moment ago were located again (%d locates, then %d)", asked, n)
	}
	// Errors come from the server's answer, as over HTTP.
	if _, err := r.ReadTo(ctx, 1, 9999, 0, 1, &bytes.Buffer{}); !errors.Is(errors.NotExist, err) {
		t.Errorf("missing needle: %v", err)
	}
	if _, err := r.ReadTo(ctx, 7, keys[0], 0, 1, &bytes.Buffer{}); !errors.Is(errors.NotExist, err) {
		t.Errorf("missing volume: %v", err)
	}
	if _, err := r.ReadTo(ctx, 1, keys[1], 4000, 97, &bytes.Buffer{}); !errors.Is(errors.Range, err) {
		t.Errorf("range past the end: %v", err)
	}
	if _, _, err := r.ReadLocal(ctx, 1, keys[1], make([]byte, 97), 4000); !errors.Is(errors.Range, err) {
		t.Errorf("ReadLocal past the end: %v", err)
	}

	// Compaction writes a new file: the reader moves to it, and the old
	// one is let go.
	r.local.mu.Lock()
	old := r.local.files[1]
	r.local.mu.Unlock()
	for _, i := range []int{0, 2, 4} {
		must(t, s.Delete(ctx, 1, 1, keys[i]))
		data[i] = nil
	}
	must(t, s.Compact(1))
	check(t) // locations still trusted: the old file, same bytes
	r.local.mu.Lock()
	old.confirmed = time.Time{} // as localTrust later
	r.local.mu.Unlock()
	check(t)
	r.local.mu.Lock()
	cur := r.local.files[1]
	r.local.mu.Unlock()
	if cur == nil || cur.instance == old.instance || !old.gone || old.refs != 0 {
		t.Fatalf("after compaction: file %+v, old %+v", cur, old)
	}
	if _, err := old.f.Stat(); err == nil {
		t.Error("the compacted-away file is still open in the reader")
	}
}

// TestLocalCorrupt: a block damaged on disk is errors.Corrupt through the
// local path, with no byte of it delivered, as over HTTP.
func TestLocalCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, localConfig(dir))
	r := serveLocal(t, s)
	ctx := context.Background()
	must(t, s.CreateVolume(ctx, 1, 1))
	d := chunktest.Data(1, 200<<10)
	k, err := s.Put(ctx, 1, 1, d)
	must(t, err)
	dat, _ := volume.FileNames(dir, 1)
	f, err := os.OpenFile(dat, os.O_RDWR, 0)
	must(t, err)
	// Block 2 of the needle (data after the superblock and the header).
	_, err = f.WriteAt([]byte{^d[140000]}, 64+24+140000)
	f.Close()
	must(t, err)
	var buf bytes.Buffer
	n, err := r.ReadTo(ctx, 1, k, 0, int64(len(d)), &buf)
	if !errors.Is(errors.Corrupt, err) || n >= 3*volume.BlockSize || !bytes.Equal(buf.Bytes(), d[:n]) {
		t.Errorf("ReadTo: n %d, err %v", n, err)
	}
	p := make([]byte, len(d))
	m, local, err := r.ReadLocal(ctx, 1, k, p, 0)
	if !local || !errors.Is(errors.Corrupt, err) || m != 2*volume.BlockSize || !bytes.Equal(p[:m], d[:m]) {
		t.Errorf("ReadLocal: n %d, local %v, err %v", m, local, err)
	}
	if !bytes.Equal(p[m:], make([]byte, len(p)-m)) {
		t.Error("ReadLocal left unverified bytes in the buffer")
	}
	// A range that avoids the damaged block reads fine.
	if _, _, err := r.ReadLocal(ctx, 1, k, p[:1000], 0); err != nil {
		t.Errorf("a read of good blocks: %v", err)
	}
}

// TestLocalOff: with local reads off, or on a server that is not running
// them, a Remote reads over HTTP.
func TestLocalOff(t *testing.T) {
	cfg := localConfig(t.TempDir())
	cfg.NoLocalReads = true
	s := openStore(t, cfg)
	r := serveLocal(t, s)
	ctx := context.Background()
	must(t, s.CreateVolume(ctx, 1, 1))
	d := chunktest.Data(1, 5000)
	k, err := s.Put(ctx, 1, 1, d)
	must(t, err)
	var buf bytes.Buffer
	if _, err := r.ReadTo(ctx, 1, k, 0, 5000, &buf); err != nil || !bytes.Equal(buf.Bytes(), d) {
		t.Fatalf("read: %v", err)
	}
	if _, local, _ := r.ReadLocal(ctx, 1, k, make([]byte, 10), 0); local || r.Local() {
		t.Error("local path taken with local reads off")
	}
	if locates(s) != 0 {
		t.Error("a locate was answered with local reads off")
	}
}

// locates is how many locate requests s answered.
func locates(s *Store) uint64 {
	for _, o := range s.ops.Snapshot() {
		if o.Op == "locate" {
			return o.Calls
		}
	}
	return 0
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzLocalRequest(f *testing.F) {
	f.Add(localRequest{op: localLocate, vid: 1, key: 42}.encode())
	f.Add(localRequest{op: localOpen, vid: 7}.encode())
	f.Add(make([]byte, localReqSize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseLocalRequest(b)
		if err != nil {
			if !errors.Is(errors.Invalid, err) {
				t.Fatalf("error of kind %v: %v", errors.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(r.encode(), b) {
			t.Fatalf("%x parsed as %+v, which encodes as %x", b, r, r.encode())
		}
	})
}

func FuzzLocalAnswer(f *testing.F) {
	f.Add(localAnswer{loc: volume.Location{Instance: 9, Data: 88, Size: 100}}.encode())
	f.Add(localAnswer{err: errors.E(errors.NotExist, "no such needle").(*errors.Error)}.encode()[:localRespSize])
	f.Add(make([]byte, localRespSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		loc, failed, kind, msglen, err := parseLocalAnswer(b)
		if err != nil {
			return
		}
		if msglen > localMaxMsg || len(b) != localRespSize {
			t.Fatalf("accepted %x: message of %d bytes", b, msglen)
		}
		if !failed {
			if kind != 0 || msglen != 0 {
				t.Fatalf("success with kind %v, message %d", kind, msglen)
			}
			if got := (localAnswer{loc: loc}).encode(); !bytes.Equal(got, b) {
				t.Fatalf("%x parsed as %+v, which encodes as %x", b, loc, got)
			}
		}
	})
}

// TestLocalLocationsBounded: the needle locations a local reader keeps
// are bounded across all its volume files, not per file (a reader of many
// volumes kept localMaxLocs for each), and a dropped file's go with it.
func TestLocalLocationsBounded(t *testing.T) {
	l := &localReader{files: map[uint32]*sharedFile{}}
	for vid := uint32(1); vid <= 4; vid++ {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		l.files[vid] = &sharedFile{f: f, vid: vid}
	}
	total := func() (n int) {
		for _, sf := range l.files {
			n += len(sf.locs)
		}
		return n
	}
	for i := range 3 * localMaxLocs {
		vid := uint32(i%4 + 1)
		key := uint64(i)
		l.remember(l.files[vid], key, volume.Location{Data: int64(i)})
		if i%1000 == 0 && l.files[vid].locs[key].Data != int64(i) {
			t.Fatalf("location %d not kept just after it was located", i)
		}
		if n := total(); n > localMaxLocs || n != l.nlocs {
			t.Fatalf("after %d locations: %d kept (counted %d), bound %d", i+1, n, l.nlocs, localMaxLocs)
		}
	}
	// Locating a needle again adds nothing.
	sf := l.files[1]
	for k := range sf.locs {
		n := l.nlocs
		l.remember(sf, k, volume.Location{})
		if l.nlocs != n {
			t.Fatalf("a location remembered twice counted twice")
		}
		break
	}
	l.mu.Lock()
	l.dropLocked(sf)
	l.mu.Unlock()
	l.remember(sf, 1<<60, volume.Location{}) // a reader that had it still in hand
	if n := total(); n != l.nlocs || sf.locs != nil {
		t.Fatalf("after a drop: %d kept, counted %d, dropped file holds %d", n, l.nlocs, len(sf.locs))
	}
	l.close()
}
