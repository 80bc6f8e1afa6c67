package fusefs_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn/server"
)

// TestFragmentedFileCompacts writes a file as hundreds of small fsynced
// writes at random offsets, each its own needle, with holes left between
// some. The mount keeps the file's extent list short (compaction rewrites
// runs of small extents into one needle at a flush), and the file reads
// back byte-exact: through the mount, through the store's client after the
// garbage collector took the needles compaction replaced, and through a
// new mount after the whole store restarted.
func TestFragmentedFileCompacts(t *testing.T) {
	cfg, srv := restartableStore(t)
	t.Cleanup(func() { srv.Close() }) // after the mounts' cleanup (LIFO)
	ctx := context.Background()
	dir, m := mount(t, srv, "data", nil)
	p := filepath.Join(dir, "frag")

	rng := rand.New(rand.NewPCG(7, 8))
	const span = 512 << 10
	model := make([]byte, span+8192) // the last 8 KiB stay a hole past the writes
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	must(t, f.Truncate(int64(len(model))))
	fill := func(off, n int) {
		buf := make([]byte, n)
		for j := range buf {
			buf[j] = byte(rng.Uint32()) | 1
		}
		_, err := f.WriteAt(buf, int64(off))
		must(t, err)
		copy(model[off:], buf)
	}
	for off := 0; off < span; off += 64 << 10 {
		fill(off+4096, 60<<10) // 4 KiB at every 64 KiB stay holes: runs must stop there
	}
	most := 0
	for i := 0; i < 400; i++ {
		off := rng.IntN(span - 4096)
		if off%(64<<10) < 4096 {
			continue
		}
		fill(off, 1+rng.IntN(4096))
		must(t, f.Sync()) // one flush, one needle
		if i%50 == 49 {
			st, err := srv.Client().StatFresh(ctx, "data", "frag")
			must(t, err)
			most = max(most, len(st.Extents))
			t.Logf("%d writes: %d extents", i+1, len(st.Extents))
		}
	}
	must(t, f.Close())
	// Without compaction 400 writes of at most 4 KiB leave some 300
	// extents; with it a list never passes the threshold by more than the
	// pieces one flush adds (and a few runs the holes cut off).
	if most > 64+16 {
		t.Fatalf("the file reached %d extents", most)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read through the mount: %d bytes, %v, equal %v", len(got), err, bytes.Equal(got, model))
	}
	readStore := func(srv *server.Server) {
		t.Helper()
		st, err := srv.Client().StatFresh(ctx, "data", "frag")
		must(t, err)
		var got bytes.Buffer
		if _, err := srv.Client().ReadTo(ctx, st, 0, st.Size(), &got); err != nil || !bytes.Equal(got.Bytes(), model) {
			t.Fatalf("read through the store: %d bytes, %v", got.Len(), err)
		}
		var stored uint64
		for _, e := range st.Extents {
			stored += e.Length
		}
		if stored >= uint64(len(model)) {
			t.Fatalf("the holes are stored: %d bytes in extents", stored)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(t, srv.Meta().WaitCollected(wctx))
	readStore(srv)

	must(t, m.Unmount())
	m.Wait()
	must(t, srv.Close())
	srv, err = server.Start(cfg)
	must(t, err)
	readStore(srv)
	dir, _ = mount(t, srv, "data", nil)
	if got, err := os.ReadFile(filepath.Join(dir, "frag")); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read through a new mount after the restart: %d bytes, %v", len(got), err)
	}
}
