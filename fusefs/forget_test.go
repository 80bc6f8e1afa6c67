package fusefs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cairn/fusefs"
	"cairn/internal/await"
)

// TestForgottenWithWorkQueued: the kernel may drop a closed file's dentry
// and inode at once (an expired entry, memory pressure, drop_caches) while
// the close's commit is still queued here. The next lookup must find this
// mount's newer state, not build the file anew from meta's older record:
// that showed the old size (the kernel then cut the file to it) and the
// old content on the very mount that had written the new one.
func TestForgottenWithWorkQueued(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	p := filepath.Join(dir, "f")
	must(t, os.WriteFile(p, []byte("old"), 0o644))
	m.Sync()

	release := fusefs.HoldWriteBehind(m)
	var once sync.Once
	defer once.Do(release)
	want := bytes.Repeat([]byte("newer content "), 1000)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(want, 0)
	must(t, err)
	must(t, f.Close()) // its commit waits in the queue

	// Drop unused dentries and inodes: the kernel forgets f.
	await.Until(t, 10*time.Second, "the kernel to forget the file", func() bool {
		must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2\n"), 0))
		return fusefs.Kept(m) > 0
	})
	st, err := os.Stat(p)
	must(t, err)
	if st.Size() != int64(len(want)) {
		t.Fatalf("size %d after the kernel forgot the file, want %d", st.Size(), len(want))
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
	once.Do(release)
	m.Sync()
	if fusefs.Kept(m) != 0 {
		t.Fatalf("%d nodes still kept after their work was committed", fusefs.Kept(m))
	}
	if got := readFile(t, p); got != string(want) {
		t.Fatalf("after the commit: %d bytes", len(got))
	}
}

// TestKernelForgetsPastMaxFiles: a mount that creates and reads a stream
// of files keeps at most about Config.MaxFiles of them known to the
// kernel (and a node each), open ones aside; the ones dropped read back
// after a new lookup. The kernel kept every file looked up, and the mount
// a node for each, for as long as there was no memory pressure.
func TestKernelForgetsPastMaxFiles(t *testing.T) {
	srv := store(t)
	const max = 40
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.MaxFiles = max })
	held, err := os.Create(filepath.Join(dir, "held"))
	must(t, err)
	defer held.Close()
	const n = 6 * max
	for i := range n {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte(fmt.Sprint("content ", i)), 0o644))
	}
	await.Until(t, 30*time.Second, "the kernel to forget the least recently used files", func() bool {
		return fusefs.LiveFiles(m) <= max
	})
	if c := fusefs.Children(m); c > max+1 {
		t.Errorf("go-fuse still holds %d inodes under the root", c)
	}
	if _, err := held.Write([]byte("still open")); err != nil {
		t.Fatalf("the open file: %v", err)
	}
	must(t, held.Close())
	for i := range n {
		if got := readFile(t, filepath.Join(dir, fmt.Sprint(i))); got != fmt.Sprint("content ", i) {
			t.Fatalf("file %d reads %q", i, got)
		}
	}
	if got := readFile(t, filepath.Join(dir, "held")); got != "still open" {
		t.Fatalf("the file held open reads %q", got)
	}
	await.Until(t, 30*time.Second, "the kernel to forget again", func() bool {
		return fusefs.LiveFiles(m) <= max
	})
}

// TestListingBounded: a directory's listing (the records of its entries,
// which answer lookups and readdir here) is kept only up to
// Config.MaxListing entries; past it the directory is listed by meta, and
// shows every entry. A directory made here kept every file created in it.
func TestListingBounded(t *testing.T) {
	srv := store(t)
	const max = 20
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.MaxListing = max })
	sub := filepath.Join(dir, "made-here")
	must(t, os.Mkdir(sub, 0o755))
	const n = 3 * max
	for i := range n {
		must(t, os.WriteFile(filepath.Join(sub, fmt.Sprint(i)), []byte("x"), 0o644))
	}
	if l := fusefs.Listed(m); l > max {
		t.Errorf("the listings hold %d entries, bound %d", l, max)
	}
	ents, err := os.ReadDir(sub)
	must(t, err)
	if len(ents) != n {
		t.Errorf("readdir shows %d entries, want %d", len(ents), n)
	}
	if l := fusefs.Listed(m); l > max {
		t.Errorf("after readdir the listings hold %d entries, bound %d", l, max)
	}
}
