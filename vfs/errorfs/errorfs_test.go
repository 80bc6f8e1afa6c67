package errorfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"cairn/vfs"
)

func TestCrashKeepsSynced(t *testing.T) {
	fs := New(vfs.Default)
	name := filepath.Join(t.TempDir(), "f")
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("synced"), 0)
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("SY"), 0)         // overwrite, not synced
	f.WriteAt([]byte(" and lost"), 6)  // extension, not synced
	f.Truncate(3)                      // then cut, not synced
	f.WriteAt([]byte("more lost"), 20) // past a hole
	if err := fs.Crash(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write on a handle from before the crash: %v", err)
	}
	got, err := vfs.ReadFile(fs, name)
	if err != nil || !bytes.Equal(got, []byte("synced")) {
		t.Fatalf("after the crash: %q, %v", got, err)
	}
}

func TestRules(t *testing.T) {
	fs := New(vfs.Default)
	name := filepath.Join(t.TempDir(), "f.dat")
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	disk := NewFull(10)
	fs.SetRule(Any(Nth(Sync, ".dat", 2, syscall.EIO), disk.Rule))
	if n, err := f.WriteAt([]byte("0123456789abc"), 0); n != 10 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past the budget: %d, %v (want 10 bytes, ENOSPC)", n, err)
	}
	if err := f.Datasync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Datasync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second sync: %v, want EIO", err)
	}
	disk.Free(3)
	if _, err := f.WriteAt([]byte("abc"), 10); err != nil {
		t.Fatal(err)
	}
	fs.SetRule(TearNth("", 1, 2))
	if n, err := f.WriteAt([]byte("xyz"), 13); n != 2 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("torn write: %d, %v", n, err)
	}
	got, _ := vfs.ReadFile(fs, name)
	if string(got) != "0123456789abcxy" {
		t.Fatalf("file %q", got)
	}
}
