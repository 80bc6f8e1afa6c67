package fusefs_test

import (
	"bytes"
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
