package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn/client"
	"cairn/fusefs"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/server/servertest"
	"cairn/vfs"
	"cairn/vfs/errorfs"
)

// TestDiskCache: with a memory tier far smaller than a file, reading the
// file again is served by the disk tier (no fetch from the data servers)
// and reads the same bytes; the next mount of the same cluster adopts the
// tier, and a damaged block file is fetched again, never served.
func TestDiskCache(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	srv := remoteStore(t)
	cacheDir := t.TempDir()
	// Leftovers of another cluster and of the earlier flat layout: removed.
	stale := []string{
		filepath.Join(cacheDir, "cairn-blocks", "1-1-0"),
		filepath.Join(cacheDir, "cairn-blocks", "0123456789abcdef0123456789abcdef", "1-1-0-0-5"),
	}
	for _, p := range stale {
		must(t, os.MkdirAll(filepath.Dir(p), 0o700))
		must(t, os.WriteFile(p, []byte("not this cluster's"), 0o600))
	}
	cfg := func(c *fusefs.Config) {
		c.BlockSize, c.CacheSize = 64<<10, 512<<10
		c.DiskCache, c.DiskCacheSize = cacheDir, 64<<20
	}
	dir, m := mount(t, srv, "data", cfg)
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s survived: %v", p, err)
		}
	}
	const size = 8 << 20
	want := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(want)
	// Stored through the client, not the mount: nothing is cached yet.
	_, err := srv.Client().Put(context.Background(), "data", "big", bytes.NewReader(want), client.PutOptions{SizeHint: size})
	must(t, err)
	read := func(dir string) []byte {
		t.Helper()
		f, err := os.Open(filepath.Join(dir, "big"))
		must(t, err)
		defer f.Close()
		// Not from the kernel's page cache: the mount must answer.
		must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		got, err := io.ReadAll(f)
		must(t, err)
		return got
	}
	if !bytes.Equal(read(dir), want) {
		t.Fatal("first read differs")
	}
	// Everything but what the memory tier still holds went to disk.
	const spilled = (size - (512 << 10)) / (64 << 10)
	await.Until(t, 10*time.Second, fmt.Sprintf("%d blocks on disk", spilled), func() bool { return fusefs.DiskCached(m) >= spilled })
	_, _, before := m.Stats().Totals()
	if !bytes.Equal(read(dir), want) {
		t.Fatal("second read differs")
	}
	_, _, after := m.Stats().Totals()
	hits := m.Stats().Op("disk-cache-hit").Calls.Load()
	if after != before || hits == 0 {
		t.Fatalf("second read: %d fetches from the data servers, %d disk hits", after-before, hits)
	}
	t.Logf("second read: %d blocks from the disk tier, 0 fetches", hits)

	// One mount process per directory.
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	must(t, err)
	defer conn.Close()
	if _, err := fusefs.New(fusefs.Config{Meta: mc, Client: srv.Client(), Namespace: "data",
		Mountpoint: t.TempDir(), DiskCache: cacheDir}); err == nil || !strings.Contains(err.Error(), "in use by another mount") {
		t.Fatalf("a second mount on the same disk cache: %v", err)
	}

	// The next mount adopts the tier; one damaged block file is fetched
	// again and the rest come from disk.
	must(t, m.Unmount())
	m.Wait()
	files, err := filepath.Glob(filepath.Join(cacheDir, "cairn-blocks", "*", "*-*-*-*-*"))
	must(t, err)
	if len(files) < spilled {
		t.Fatalf("%d block files left after unmount, want %d", len(files), spilled)
	}
	damaged := files[len(files)/2]
	b, err := os.ReadFile(damaged)
	must(t, err)
	b[len(b)/2] ^= 1
	must(t, os.WriteFile(damaged, b, 0o600))
	dir2, m2 := mount(t, srv, "data", cfg)
	if n := fusefs.DiskCached(m2); n != len(files) {
		t.Fatalf("the next mount adopted %d blocks, want %d", n, len(files))
	}
	_, _, before = m2.Stats().Totals()
	if !bytes.Equal(read(dir2), want) {
		t.Fatal("read after remount differs")
	}
	_, _, after = m2.Stats().Totals()
	hits = m2.Stats().Op("disk-cache-hit").Calls.Load()
	// The blocks not on disk (the first mount's memory tier held them)
	// and the damaged one are fetched.
	if fetched := after - before; fetched != int64(size/(64<<10)-len(files)+1) || hits < int64(len(files)-1) {
		t.Fatalf("after remount: %d fetches, %d disk hits; %d files, one damaged", fetched, hits, len(files))
	}
	// Dropped (or written again, right, when memory evicted its block).
	if now, err := os.ReadFile(damaged); err == nil && bytes.Equal(now, b) {
		t.Fatal("the damaged block file was kept")
	}
}

// TestDiskCacheDiskFails: a mount whose cache disk fails every read and
// then fills up reads every byte right: the tier's failures cost fetches
// from the data servers, and the tier turns itself off.
func TestDiskCacheDiskFails(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	srv := remoteStore(t)
	efs := errorfs.New(vfs.Default)
	efs.SetRule(errorfs.Any(errorfs.From(errorfs.Read, "", 1, syscall.EIO), errorfs.NewFull(1<<20).Rule))
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		c.BlockSize, c.CacheSize = 64<<10, 512<<10
		c.DiskCache, c.DiskCacheSize, c.DiskCacheFS = t.TempDir(), 64<<20, efs
	})
	const size = 4 << 20
	want := make([]byte, size)
	rand.NewChaCha8([32]byte{9}).Read(want)
	_, err := srv.Client().Put(context.Background(), "data", "big", bytes.NewReader(want), client.PutOptions{SizeHint: size})
	must(t, err)
	for pass := range 3 {
		f, err := os.Open(filepath.Join(dir, "big"))
		must(t, err)
		must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		got, err := io.ReadAll(f)
		f.Close()
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Fatalf("read %d over a failing cache disk differs", pass)
		}
	}
	errs, off := fusefs.DiskCacheFailures(m)
	if !off {
		t.Fatalf("the tier is still on after %d I/O errors", errs)
	}
	if hits := m.Stats().Op("disk-cache-hit").Calls.Load(); hits != 0 {
		t.Fatalf("%d blocks served by a disk that fails every read", hits)
	}
	t.Logf("%d cache disk errors; the tier turned off and reads went to the data servers", errs)
}
