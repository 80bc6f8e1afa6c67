package fusefs_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn/client"
	"cairn/fusefs"
)

// TestDiskCache: with a memory tier far smaller than a file, reading the
// file again is served by the disk tier (no fetch from the data servers)
// and reads the same bytes.
func TestDiskCache(t *testing.T) {
	srv := remoteStore(t)
	cacheDir := t.TempDir()
	// A leftover of an earlier mount (another cluster, maybe): emptied.
	stale := filepath.Join(cacheDir, "cairn-blocks", "1-1-0")
	must(t, os.MkdirAll(filepath.Dir(stale), 0o700))
	must(t, os.WriteFile(stale, []byte("not this cluster's"), 0o600))
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		c.BlockSize, c.CacheSize = 64<<10, 512<<10
		c.DiskCache, c.DiskCacheSize = cacheDir, 64<<20
	})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a block file of an earlier mount survived: %v", err)
	}
	const size = 8 << 20
	want := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(want)
	// Stored through the client, not the mount: nothing is cached yet.
	_, err := srv.Client().Put(context.Background(), "data", "big", bytes.NewReader(want), client.PutOptions{SizeHint: size})
	must(t, err)
	p := filepath.Join(dir, "big")
	read := func() []byte {
		t.Helper()
		f, err := os.Open(p)
		must(t, err)
		defer f.Close()
		// Not from the kernel's page cache: the mount must answer.
		must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		got, err := io.ReadAll(f)
		must(t, err)
		return got
	}
	if !bytes.Equal(read(), want) {
		t.Fatal("first read differs")
	}
	// Everything but what the memory tier still holds went to disk.
	for deadline := time.Now().Add(10 * time.Second); fusefs.DiskCached(m) < (size-(512<<10))/(64<<10); {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks on disk, want %d", fusefs.DiskCached(m), (size-(512<<10))/(64<<10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _, before := m.Stats().Totals()
	if !bytes.Equal(read(), want) {
		t.Fatal("second read differs")
	}
	_, _, after := m.Stats().Totals()
	hits := m.Stats().Op("disk-cache-hit").Calls.Load()
	if after != before || hits == 0 {
		t.Fatalf("second read: %d fetches from the data servers, %d disk hits", after-before, hits)
	}
	t.Logf("second read: %d blocks from the disk tier, 0 fetches", hits)
}
