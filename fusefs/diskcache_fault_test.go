package fusefs

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/vfs"
	"cairn/vfs/errorfs"
)

// faultyTier opens a disk tier over a failing disk with room for max bytes.
func faultyTier(t *testing.T, max int64) (*diskCache, *errorfs.FS) {
	t.Helper()
	efs := errorfs.New(vfs.Default)
	d, err := openDiskCacheAt(efs, t.TempDir(), "c1", max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d, efs
}

// block is the bytes of block i of a test needle: 4 KiB, each its own.
func testBlock(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0x5a}, 4<<10/3) }

// storeAll stores blocks [0, n) of needle 1 and waits for the writes.
func storeAll(t *testing.T, d *diskCache, n int) {
	t.Helper()
	for i := range n {
		d.store(blockKey{vol: 1, key: 1, idx: int64(i)}, 0, testBlock(i))
	}
	// Every write has ended when all its slots are free again.
	for range cap(d.sem) {
		d.sem <- struct{}{}
	}
	for range cap(d.sem) {
		<-d.sem
	}
}

// loadOK reads block i back and checks it is the block stored.
func loadOK(t *testing.T, d *diskCache, i int) bool {
	t.Helper()
	b := testBlock(i)
	data, lo, ok := d.load(blockKey{vol: 1, key: 1, idx: int64(i)}, 0, int64(len(b)))
	if ok && (lo != 0 || !bytes.Equal(data, b)) {
		t.Fatalf("block %d: the tier served other bytes", i)
	}
	return ok
}

// leftovers lists the files of the tier's directory that no entry names
// (temporary files of failed writes, files of dropped entries).
func leftovers(t *testing.T, d *diskCache) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(d.dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	named := map[string]bool{}
	for _, e := range d.ents {
		named[d.path(e)] = true
	}
	var out []string
	for _, n := range names {
		if !named[n] {
			out = append(out, filepath.Base(n))
		}
	}
	return out
}

// TestDiskCacheFailingDisk: the disk tier over a disk that fails. It only
// ever holds copies of acknowledged needles, so each failure must cost a
// fetch, never a wrong byte: a write that fails (EIO, ENOSPC, torn) keeps
// nothing, a block that cannot be read is dropped and missed, and a disk
// that keeps failing turns the tier off.
func TestDiskCacheFailingDisk(t *testing.T) {
	t.Run("write fails", func(t *testing.T) {
		d, efs := faultyTier(t, 1<<20)
		efs.SetRule(errorfs.Nth(errorfs.Write, "", 2, syscall.EIO))
		storeAll(t, d, 4)
		blocks, _ := d.stats()
		if errs, off := d.failures(); blocks != 3 || errs != 1 || off {
			t.Fatalf("%d blocks kept, %d errors, off %v; want 3, 1, false", blocks, errs, off)
		}
		hits := 0
		for i := range 4 {
			if loadOK(t, d, i) {
				hits++
			}
		}
		if hits != 3 {
			t.Fatalf("%d hits, want 3 (the failed write is a miss)", hits)
		}
		if l := leftovers(t, d); len(l) != 0 {
			t.Fatalf("files left by the failed write: %v", l)
		}
	})
	t.Run("disk full", func(t *testing.T) {
		d, efs := faultyTier(t, 1<<20)
		full := errorfs.NewFull(10 << 10) // two blocks and a half
		efs.SetRule(full.Rule)
		storeAll(t, d, 4)
		blocks, _ := d.stats()
		if blocks != 2 {
			t.Fatalf("%d blocks kept on a disk with room for 2", blocks)
		}
		for i := range 4 {
			loadOK(t, d, i) // a torn block is never served
		}
		if l := leftovers(t, d); len(l) != 0 {
			t.Fatalf("files left by the writes that found the disk full: %v", l)
		}
		full.Free(1 << 20) // space returns: the tier takes blocks again
		storeAll(t, d, 6)
		if blocks, _ := d.stats(); blocks != 6 {
			t.Fatalf("%d blocks once space returned, want 6", blocks)
		}
	})
	t.Run("read fails", func(t *testing.T) {
		d, efs := faultyTier(t, 1<<20)
		storeAll(t, d, 3)
		efs.SetRule(errorfs.Nth(errorfs.Read, "", 1, syscall.EIO))
		if loadOK(t, d, 1) {
			t.Fatal("a block whose read failed was served")
		}
		if blocks, _ := d.stats(); blocks != 2 {
			t.Fatalf("%d blocks after a failed read, want 2 (the unreadable one dropped)", blocks)
		}
		if !loadOK(t, d, 0) || !loadOK(t, d, 2) {
			t.Fatal("the readable blocks missed")
		}
	})
	t.Run("failing disk turns the tier off", func(t *testing.T) {
		d, efs := faultyTier(t, 1<<20)
		storeAll(t, d, 2*diskFailLimit)
		efs.SetRule(errorfs.From(errorfs.Read, "", 1, syscall.EIO))
		for i := range diskFailLimit {
			if loadOK(t, d, i) {
				t.Fatalf("block %d served from a disk that fails every read", i)
			}
		}
		errs, off := d.failures()
		if errs != diskFailLimit || !off {
			t.Fatalf("%d errors, off %v: want %d, true", errs, off, diskFailLimit)
		}
		// Off: no block is offered, none is written, and the files of
		// the forgotten blocks are removed.
		efs.SetRule(nil)
		if loadOK(t, d, diskFailLimit) {
			t.Fatal("the tier served a block after it turned off")
		}
		storeAll(t, d, 1)
		if blocks, _ := d.stats(); blocks != 0 {
			t.Fatalf("%d blocks in a tier that is off", blocks)
		}
		await.Until(t, 5*time.Second, "the tier's files removed", func() bool {
			names, _ := filepath.Glob(filepath.Join(d.dir, "*"))
			return len(names) == 0
		})
	})
	t.Run("crash tears files", func(t *testing.T) {
		dir := t.TempDir()
		efs := errorfs.New(vfs.Default)
		d, err := openDiskCacheAt(efs, dir, "c1", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		efs.SetRule(errorfs.TearNth("", 3, 100)) // the second block's checksum is never written
		storeAll(t, d, 3)
		d.close()
		if err := efs.Crash(nil); err != nil { // nothing was synced: every write is lost
			t.Fatal(err)
		}
		d2, err := openDiskCacheAt(efs, dir, "c1", 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer d2.close()
		if blocks, _ := d2.stats(); blocks != 0 {
			t.Fatalf("the next mount adopted %d blocks that the crash emptied", blocks)
		}
		for i := range 3 {
			if loadOK(t, d2, i) {
				t.Fatalf("block %d served after the crash", i)
			}
		}
		if names, _ := os.ReadDir(d2.dir); len(names) != 0 {
			t.Fatalf("%d files left after adopting a crashed tier", len(names))
		}
	})
}
