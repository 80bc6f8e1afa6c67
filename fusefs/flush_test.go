package fusefs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn/fusefs"
	"cairn/proto/metapb"
)

// heldCommit holds the next Commit once armed until hold is closed, so a
// test can act while a flush is in flight.
type heldCommit struct {
	metapb.MetaClient
	armed   atomic.Bool
	entered chan struct{}
	hold    chan struct{}
}

func (h *heldCommit) Commit(ctx context.Context, r *metapb.CommitRequest, o ...grpc.CallOption) (*metapb.Inode, error) {
	if h.armed.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.hold
	}
	return h.MetaClient.Commit(ctx, r, o...)
}

// TestFlushInFlight: while a flush waits for meta, stat, reads and writes
// of the file are answered (a flush used to hold the inode's lock across
// the upload and the commit), reads see the writes in flight and the newer
// ones on top, and the newer ones win once the flush is done.
func TestFlushInFlight(t *testing.T) {
	srv := store(t)
	hc := &heldCommit{entered: make(chan struct{}), hold: make(chan struct{})}
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		hc.MetaClient = c.Meta
		c.Meta = hc
	})
	stop := watchdog(t, 2*time.Minute, dir)
	defer stop()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, bytes.Repeat([]byte("o"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Sync()
	// O_DIRECT: reads and writes reach the mount, not the page cache.
	open := func() *os.File {
		f, err := os.OpenFile(p, os.O_RDWR|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f, w := open(), open()
	want := bytes.Repeat([]byte("a"), 8192)
	if _, err := w.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	// The close's flush is left behind (fsync would hold the kernel's
	// inode lock, and the writes below would wait for it in the kernel).
	hc.armed.Store(true)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hc.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the close's commit never reached meta")
	}

	// The flush is in flight: everything below must be answered now.
	var expired atomic.Bool
	release := sync.OnceFunc(func() { close(hc.hold) })
	deadline := time.AfterFunc(20*time.Second, func() {
		expired.Store(true)
		release()
	})
	check := func(what string) {
		t.Helper()
		if expired.Load() {
			t.Fatalf("%s waited for the flush in flight", what)
		}
	}
	if st, err := f.Stat(); err != nil || st.Size() != 8192 {
		t.Fatalf("stat in flight: %v, %v", st, err)
	}
	check("stat")
	got := make([]byte, 8192)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read in flight: %v, %q...", err, got[:16])
	}
	check("read")
	newer := bytes.Repeat([]byte("b"), 4096)
	if _, err := f.WriteAt(newer, 4096); err != nil { // over the flight's span
		t.Fatal(err)
	}
	copy(want[4096:], newer)
	tail := bytes.Repeat([]byte("c"), 4096)
	if _, err := f.WriteAt(tail, 8192); err != nil { // beyond it: grows the file
		t.Fatal(err)
	}
	want = append(want, tail...)
	check("write")
	got = make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of newer writes in flight: %v", err)
	}
	if st, err := f.Stat(); err != nil || st.Size() != int64(len(want)) {
		t.Fatalf("stat after growing in flight: %v, %v", st, err)
	}
	check("second stat")
	deadline.Stop()
	release()
	m.Sync()
	// The flight is installed; the newer writes are still to be flushed.
	got = make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after the flush: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.Sync()
	// A second mount sees what meta holds.
	dir2, _ := mount(t, srv, "data", nil)
	got, err := os.ReadFile(filepath.Join(dir2, "f"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("second mount: %d bytes, %v", len(got), err)
	}
}
