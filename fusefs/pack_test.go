package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	cerrors "cairn/errors"
	"cairn/fusefs"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
)

// TestPackedSmallFiles: small files created at the same time are
// committed in groups that share a needle. Every file reads back whole
// through the store's own client, and removing some of them leaves the
// others' bytes in place after the garbage collector has run.
func TestPackedSmallFiles(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	// A file committed alone, removed below with the even ones: its
	// needle surely becomes garbage.
	must(t, os.WriteFile(filepath.Join(dir, "solo"), []byte("alone"), 0o644))
	m.Sync()
	content := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("file %d;", i)), i%50) // 0 to ~400 bytes, some empty
	}
	const files, writers = 400, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += writers {
				if err := os.WriteFile(filepath.Join(dir, "d", fmt.Sprint(i)), content(i), 0o640); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	m.Sync()

	// Files share needles. owners: needle -> the files pointing into it.
	cl := srv.Client()
	type needle struct {
		vol uint32
		key uint64
	}
	owners := map[needle][]string{}
	resolve := func(p string) *metapb.ResolveResponse {
		r, err := cl.Meta().Resolve(t.Context(), &metapb.ResolveRequest{Ns: "data", Path: p, WantExtents: true})
		must(t, err)
		for _, e := range r.Extents {
			nd := needle{e.Volume, e.Key}
			owners[nd] = append(owners[nd], p)
		}
		return r
	}
	resolve("solo")
	for i := range files {
		r := resolve(fmt.Sprintf("d/%d", i))
		if r.Inode.Size != uint64(len(content(i))) || r.Inode.Mode != 0o640 {
			t.Fatalf("file %d: size %d mode %o, want %d and 640", i, r.Inode.Size, r.Inode.Mode, len(content(i)))
		}
	}
	shared := 0
	for _, o := range owners {
		if len(o) > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatalf("no needle holds more than one file (%d needles)", len(owners))
	}
	t.Logf("%d needles for %d files, %d of them shared", len(owners), files, shared)

	check := func(i int) {
		t.Helper()
		f, err := cl.StatFresh(t.Context(), "data", fmt.Sprintf("d/%d", i))
		must(t, err)
		got, err := cl.ReadAll(t.Context(), f)
		must(t, err)
		if !bytes.Equal(got, content(i)) {
			t.Fatalf("file %d reads %q", i, got)
		}
	}
	for i := range files {
		check(i)
	}
	// Remove solo and the even files. The needles only they pointed into
	// become garbage; the others must keep every byte.
	removed := map[string]bool{"solo": true}
	for i := 0; i < files; i += 2 {
		removed[fmt.Sprintf("d/%d", i)] = true
	}
	for p := range removed {
		must(t, os.Remove(filepath.Join(dir, p)))
	}
	exists := func(nd needle) bool {
		_, err := cl.ReadNeedle(t.Context(), nd.vol, nd.key, 0, 1, io.Discard)
		if err != nil && !cerrors.Is(cerrors.NotExist, err) {
			t.Fatal(err)
		}
		return err == nil
	}
	var doomed, kept []needle
	for nd, o := range owners {
		all := true
		for _, p := range o {
			all = all && removed[p]
		}
		if all {
			doomed = append(doomed, nd)
		} else {
			kept = append(kept, nd)
		}
	}
	for _, nd := range doomed {
		await.Until(t, 20*time.Second, fmt.Sprintf("the collection of needle %v of removed files only", nd),
			func() bool { return !exists(nd) })
	}
	for _, nd := range kept {
		if !exists(nd) {
			t.Fatalf("needle %v was deleted while %d files still point into it", nd, len(owners[nd]))
		}
	}
	for i := 1; i < files; i += 2 {
		check(i)
	}
}

// heldBatches is a meta whose CommitBatch calls wait until release is
// closed (arrived is closed at the first); it counts the commits made
// alone behind (Commit with meta.DrainHeader).
type heldBatches struct {
	metapb.MetaClient
	once    sync.Once
	arrived chan struct{}
	release chan struct{}
	alone   atomic.Int64
}

func newHeldBatches() *heldBatches {
	return &heldBatches{arrived: make(chan struct{}), release: make(chan struct{})}
}

// mountHeldBatches is a store and a mount of it whose group commits are
// held (heldBatches), watched for a deadlock for two minutes.
func mountHeldBatches(t *testing.T) (*server.Server, *heldBatches, string, *fusefs.Mount) {
	t.Helper()
	srv := store(t)
	held := newHeldBatches()
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		held.MetaClient = c.Meta
		c.Meta = held
	})
	t.Cleanup(watchdog(t, 2*time.Minute, dir))
	return srv, held, dir, m
}

// awaitFirst waits for the first group commit to be held.
func (h *heldBatches) awaitFirst(t *testing.T) {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(time.Minute):
		t.Fatal("the first group's commit never came")
	}
}

func (h *heldBatches) CommitBatch(ctx context.Context, in *metapb.CommitBatchRequest, opts ...grpc.CallOption) (*metapb.CommitBatchResponse, error) {
	h.once.Do(func() { close(h.arrived) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.MetaClient.CommitBatch(ctx, in, opts...)
}

func (h *heldBatches) Commit(ctx context.Context, in *metapb.CommitRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(meta.DrainHeader)) > 0 {
		h.alone.Add(1)
	}
	return h.MetaClient.Commit(ctx, in, opts...)
}

// within runs f and fails t unless it returns within d; then it lets the
// held calls go (h.free) and waits for f, for the test's cleanup.
func (h *heldBatches) within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		h.free()
		<-done
		t.Fatalf("%s waited more than %v (for the held group commit?)", what, d)
	}
}

// free lets the held calls go.
func (h *heldBatches) free() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// TestPackedFileReadWhileCommitting: a file whose group commit is on its
// way (its CommitBatch held) opens, reads and stats at once, and takes a
// new write, which is committed after the group's: the group held each
// file's lock across its upload and CommitBatch, and reading back files
// just written waited for the groups still committing.
func TestPackedFileReadWhileCommitting(t *testing.T) {
	srv, held, dir, m := mountHeldBatches(t)
	p := filepath.Join(dir, "f")
	must(t, os.WriteFile(p, []byte("first"), 0o644))
	held.awaitFirst(t)
	// (Not t.Fatal in these: they run on another goroutine.)
	held.within(t, 10*time.Second, "a read of a file whose group commit is held", func() {
		if got, err := os.ReadFile(p); err != nil || string(got) != "first" {
			t.Errorf("read %q, %v; want %q", got, err, "first")
		}
	})
	held.within(t, 10*time.Second, "a stat of a file whose group commit is held", func() {
		if st, err := os.Lstat(p); err != nil || st.Size() != 5 {
			t.Errorf("stat: %v, %v; want size 5", st, err)
		}
	})
	held.within(t, 10*time.Second, "a write of a file whose group commit is held", func() {
		// Over the whole file, not truncated (a truncate is a
		// synchronous setattr, after the group's commit).
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := f.WriteAt([]byte("second, longer"), 0); err != nil {
			t.Error(err)
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	held.free()
	m.Sync()
	checkContent(t, srv, []string{"f"}, func(int) []byte { return []byte("second, longer") })
	if got := readFile(t, p); got != "second, longer" {
		t.Fatalf("the mount reads %q after the commits", got)
	}
}

// TestPackBacklogGoesInGroups: files queued for the packer beyond what
// one group's needle holds (4 MiB) go with the next group, not one by
// one: a backlog of 64 KB files was committed alone past each group's
// first 64, which made the backlog last.
func TestPackBacklogGoesInGroups(t *testing.T) {
	srv, held, dir, m := mountHeldBatches(t)
	body := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 64<<10) }
	must(t, os.WriteFile(filepath.Join(dir, "first"), body(0), 0o644))
	held.awaitFirst(t)
	const n = 150 // over two groups' needles of 64 KB files
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprint("f", i)
		must(t, os.WriteFile(filepath.Join(dir, names[i]), body(i), 0o644))
	}
	held.free()
	m.Sync()
	checkContent(t, srv, names, body)
	// A file whose lock was busy when its group formed goes alone: a few.
	if alone := held.alone.Load(); alone > n/10 {
		t.Fatalf("%d of %d files queued behind a group were committed alone", alone, n)
	}
}
