package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"cairn/fusefs"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// peeker reads meta's record of a file without recalling the mounts
// (as a mount's own write-behind commits do): what meta has now, not
// what a reader would get after the recall.
func peeker(t *testing.T, srv *server.Server) func(name string) *metapb.Inode {
	t.Helper()
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(name string) *metapb.Inode {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(t.Context(), meta.DrainHeader, "1")
		r, err := mc.Resolve(ctx, &metapb.ResolveRequest{Ns: "data", Path: name})
		if err != nil {
			t.Fatalf("resolve %s: %v", name, err)
		}
		return r.Inode
	}
}

// checkContent reads each name through the native client (which recalls
// the mount first) and compares it with want(i).
func checkContent(t *testing.T, srv *server.Server, names []string, want func(i int) []byte) {
	t.Helper()
	for i, name := range names {
		f, err := srv.Client().StatFresh(t.Context(), "data", name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := srv.Client().ReadAll(t.Context(), f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want(i)) {
			t.Fatalf("%s: %d bytes %.16q, want %d bytes %.16q", name, len(got), got, len(want(i)), want(i))
		}
	}
}

// settled drains m's queue and waits until its chains have ended (a
// drain returns once their commits are done, a moment before).
func settled(t *testing.T, m *fusefs.Mount) {
	t.Helper()
	m.Sync()
	await.Until(t, time.Minute, "the write-behind queue to empty", func() bool { return fusefs.Queued(m) == 0 })
}

// rewrite writes body over the start of an existing file, without
// truncating it (a truncate is a synchronous setattr), and closes it.
func rewrite(t *testing.T, p string, body []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(body, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteBehindBound: with meta's commits of the queue held, a writer
// closing file after file gets the first closes answered behind, up to
// the queue's bound (in entries, or in bytes), and every later close
// committed before it returns: meta has those files' new content while
// the queue is still held. Unbounded, every close was answered behind.
func TestWriteBehindBound(t *testing.T) {
	const n = 40
	for _, tc := range []struct {
		name    string
		entries int
		bytes   int64
		size    int
		behind  int // at most this many closes answered behind
	}{
		{"entries", 8, 0, 4 << 10, 8},
		{"bytes", 0, 64 << 10, 16 << 10, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := store(t)
			dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
				c.WritebackMaxEntries, c.WritebackMaxBytes = tc.entries, tc.bytes
			})
			peek := peeker(t, srv)
			body := func(round, i int) []byte {
				return bytes.Repeat([]byte{byte('a' + round), byte(i)}, tc.size/2)
			}
			names := make([]string, n)
			for i := range n {
				names[i] = fmt.Sprint("f", i)
				must(t, os.WriteFile(filepath.Join(dir, names[i]), body(0, i), 0o644))
			}
			settled(t, m)
			before := make([]uint64, n)
			for i, name := range names {
				before[i] = peek(name).Version
			}

			release := fusefs.HoldWriteBehind(m)
			var once sync.Once
			defer once.Do(release)
			stop := watchdog(t, 2*time.Minute, dir)
			for i, name := range names {
				rewrite(t, filepath.Join(dir, name), body(1, i))
			}
			stop()
			behind := 0
			for i, name := range names {
				if peek(name).Version == before[i] {
					behind++
				}
			}
			if behind == 0 || behind > tc.behind {
				t.Errorf("%d of %d closes answered behind with the queue held, want 1 to %d (the bound)", behind, n, tc.behind)
			}
			if full := m.Stats().Op("writeback-full").Calls.Load(); full < int64(n-tc.behind) {
				t.Errorf("writeback-full counted %d, want at least %d", full, n-tc.behind)
			}
			once.Do(release)
			checkContent(t, srv, names, func(i int) []byte { return body(1, i) })
		})
	}
}

// TestWriteBehindFullOfOpenCreates: files created here and still open
// hold their queue entries (a parked create commits with the file's
// first flush), and cannot free them until they are closed. A queue full
// of them must neither block the mount's other creates and closes (they
// commit synchronously) nor refuse the open files' own closes.
func TestWriteBehindFullOfOpenCreates(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.WritebackMaxEntries = 4 })
	stop := watchdog(t, 2*time.Minute, dir)
	defer stop()
	var names []string
	var open []*os.File
	for i := range 6 { // the last two find the queue full
		name := fmt.Sprint("open", i)
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(name); err != nil {
			t.Fatal(err)
		}
		names, open = append(names, name), append(open, f)
	}
	for i := range 20 {
		name := fmt.Sprint("closed", i)
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644))
		names = append(names, name)
	}
	if m.Stats().Op("writeback-full").Calls.Load() == 0 {
		t.Fatal("the queue never was full")
	}
	for _, f := range open {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	checkContent(t, srv, names, func(i int) []byte { return []byte(names[i]) })
}

// TestWriteBehindDirTimesWhenFull: a directory's mtime set while the
// queue is full is committed synchronously, and still after the creates
// queued in the directory before it (each moves the mtime), here a file
// created and still open, whose create is parked.
func TestWriteBehindDirTimesWhenFull(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.WritebackMaxEntries = 1 })
	d := filepath.Join(dir, "d")
	must(t, os.Mkdir(d, 0o755))
	settled(t, m)
	f, err := os.Create(filepath.Join(d, "kid")) // parked, and the queue (one entry) is full
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("kid"); err != nil {
		t.Fatal(err)
	}
	full := m.Stats().Op("writeback-full").Calls.Load()
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(t, os.Chtimes(d, mtime, mtime))
	if m.Stats().Op("writeback-full").Calls.Load() == full {
		t.Fatal("the directory's times went behind: the queue was not full")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m.Sync()
	st, err := srv.Client().StatFresh(t.Context(), "data", "d")
	if err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(0, st.Inode.MtimeNs).UTC(); !got.Equal(mtime) {
		t.Fatalf("d's mtime in meta %v, want %v (set after its create)", got, mtime)
	}
	checkContent(t, srv, []string{"d/kid"}, func(int) []byte { return []byte("kid") })
}

// slowDrain is a meta whose commits of work left behind (the calls that
// carry meta.DrainHeader) each take delay once on is set: a meta slowed
// by load, as the mount's queue sees it. Synchronous calls are not slowed.
type slowDrain struct {
	metapb.MetaClient
	delay time.Duration
	on    atomic.Bool
}

func (s *slowDrain) wait(ctx context.Context) {
	if !s.on.Load() {
		return
	}
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(meta.DrainHeader)) == 0 {
		return
	}
	select { // the fake's latency, not a test's wait
	case <-time.After(s.delay):
	case <-ctx.Done():
	}
}

func (s *slowDrain) Commit(ctx context.Context, in *metapb.CommitRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	s.wait(ctx)
	return s.MetaClient.Commit(ctx, in, opts...)
}

func (s *slowDrain) CommitBatch(ctx context.Context, in *metapb.CommitBatchRequest, opts ...grpc.CallOption) (*metapb.CommitBatchResponse, error) {
	s.wait(ctx)
	return s.MetaClient.CommitBatch(ctx, in, opts...)
}

func (s *slowDrain) SetAttr(ctx context.Context, in *metapb.SetAttrRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	s.wait(ctx)
	return s.MetaClient.SetAttr(ctx, in, opts...)
}

// TestRecallOfFullQueue: another client's read recalls a mount whose
// queue is as full as it gets while meta takes a second per commit left
// behind. The recall must end within meta.RecallTimeout (past it meta
// cuts the mount's session off and the reader goes on without the
// mount's closes): the bound keeps the queue at what the mount's parallel
// commits finish in a few seconds. Unbounded, the writer's 640 closes were
// all left behind, 20 seconds of commits: the session was cut and the
// reader saw old content.
func TestRecallOfFullQueue(t *testing.T) {
	const n, size = 640, 4 << 10
	srv := store(t)
	slow := &slowDrain{delay: time.Second}
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		slow.MetaClient = c.Meta
		c.Meta = slow
		c.WritebackMaxEntries = 64 // two rounds of the mount's 32 parallel commits
	})
	body := func(round, i int) []byte { return bytes.Repeat([]byte{byte('a' + round), byte(i)}, size/2) }
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprint("f", i)
		must(t, os.WriteFile(filepath.Join(dir, names[i]), body(0, i), 0o644))
	}
	m.Sync()
	resets := m.Stats().Op("session-reset").Calls.Load()
	slow.on.Store(true)
	for i, name := range names {
		rewrite(t, filepath.Join(dir, name), body(1, i))
	}
	checkContent(t, srv, names, func(i int) []byte { return body(1, i) })
	if r := m.Stats().Op("session-reset").Calls.Load(); r != resets {
		t.Errorf("the mount's session was reset %d times during the recall (cut off by meta)", r-resets)
	}
	t.Log(m.Stats().String())
}

// BenchmarkDrainFullQueue is what the default bounds (Config.WritebackMax*)
// are sized by: how long committing a full queue takes, per kind of entry,
// which a recall must do within meta.RecallTimeout. Rewrites and chmods of
// files in meta are held until the queue is full (1,024 entries; "bytes":
// 64 rewrites of 1 MiB, the default 64 MiB), then drained (m.Sync);
// creates (packed) and mkdirs (one at a time, in order) cannot be held, so
// theirs is the time to make a queue's worth and drain it, an upper bound.
func BenchmarkDrainFullQueue(b *testing.B) {
	srv := store(b)
	dir, m := mount(b, srv, "data", nil)
	var round int
	for _, kind := range []string{"rewrite", "bytes", "chmod", "create", "mkdir"} {
		n, body := 1024, bytes.Repeat([]byte("x"), 4<<10) // the default bound
		if kind == "bytes" {
			n, body = 64, bytes.Repeat([]byte("x"), 1<<20)
		}
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				round++
				d := filepath.Join(dir, fmt.Sprint(kind, round))
				if err := os.Mkdir(d, 0o755); err != nil {
					b.Fatal(err)
				}
				p := func(i int) string { return filepath.Join(d, fmt.Sprint(i)) }
				var start time.Time
				switch kind {
				case "rewrite", "bytes", "chmod":
					for i := range n {
						if err := os.WriteFile(p(i), body, 0o644); err != nil {
							b.Fatal(err)
						}
					}
					m.Sync()
					release := fusefs.HoldWriteBehind(m)
					for i := range n {
						var err error
						if kind != "chmod" {
							var f *os.File
							if f, err = os.OpenFile(p(i), os.O_WRONLY, 0); err == nil {
								if _, err = f.WriteAt(body, 0); err == nil {
									err = f.Close()
								}
							}
						} else {
							err = os.Chmod(p(i), 0o600)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					start = time.Now()
					release()
				case "create":
					start = time.Now()
					for i := range n {
						if err := os.WriteFile(p(i), body, 0o644); err != nil {
							b.Fatal(err)
						}
					}
				case "mkdir":
					start = time.Now()
					for i := range n {
						if err := os.Mkdir(p(i), 0o755); err != nil {
							b.Fatal(err)
						}
					}
				}
				m.Sync()
				b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/drain")
			}
			if full := m.Stats().Op("writeback-full").Calls.Load(); full > 0 {
				b.Logf("%d operations found the queue full", full)
			}
		})
	}
	b.Log("\n" + m.Stats().String())
}

// TestAtimeStoredWhenFull: a read that moves a file's atime (relatime)
// while the queue is full stores it before answering, as every attribute
// change past the bound is stored: the atime the mount shows is meta's.
// It was kept on the mount alone, so other mounts, and this one after
// the kernel forgot the file, saw the old atime.
func TestAtimeStoredWhenFull(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.WritebackMaxEntries = 1 })
	peek := peeker(t, srv)
	p, q := filepath.Join(dir, "f"), filepath.Join(dir, "g")
	must(t, os.WriteFile(p, []byte("hello"), 0o644))
	must(t, os.WriteFile(q, []byte("other"), 0o644))
	old := time.Now().Add(-48 * time.Hour)
	must(t, os.Chtimes(p, old, old))
	settled(t, m)
	if got := peek("f").AtimeNs; got != old.UnixNano() {
		t.Fatalf("meta's atime of f %d, want %d", got, old.UnixNano())
	}

	release := fusefs.HoldWriteBehind(m)
	var once sync.Once
	defer once.Do(release)
	stop := watchdog(t, 2*time.Minute, dir)
	defer stop()
	must(t, os.Chmod(q, 0o600)) // queued and held: the queue (one entry) is full
	full := m.Stats().Op("writeback-full").Calls.Load()
	readFile(t, p)
	shown := atime(t, p)
	if shown == old.UnixNano() {
		t.Fatal("a read of a file with an old atime did not move it")
	}
	if m.Stats().Op("writeback-full").Calls.Load() == full {
		t.Fatal("the atime went behind: the queue was not full")
	}
	if got := peek("f").AtimeNs; got != shown {
		t.Fatalf("meta's atime of f %d, the mount shows %d (kept on the mount only)", got, shown)
	}
	once.Do(release)
	settled(t, m)
	if got := peek("f").AtimeNs; got != shown {
		t.Fatalf("after the queue drained, meta's atime of f %d, the mount showed %d", got, shown)
	}
}

// TestCreateBehindKeepsCtime: a file created here is answered before meta
// has it; its commit must store the ctime stat showed (the create's, or
// its last write's), not the time the commit landed, which moved ctime
// under stat (pjdfstest truncate/00.t: a ctime that changed across a
// truncate refused with EACCES, at load, once the commit landed a second
// later). Empty files commit alone, small ones packed, large ones with
// their flush: each path carries it.
func TestCreateBehindKeepsCtime(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	peek := peeker(t, srv)
	sizes := map[string]int{"empty": 0, "small": 10, "large": 300 << 10}
	shown := map[string]int64{}
	for name, size := range sizes {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, bytes.Repeat([]byte("x"), size), 0o644))
		shown[name] = lstat(t, p).Ctim.Nano()
	}
	settled(t, m)
	for name := range sizes {
		if got := peek(name).CtimeNs; got != shown[name] {
			t.Errorf("%s: meta's ctime %d, the mount showed %d at the create (moved by %v when the commit landed)",
				name, got, shown[name], time.Duration(got-shown[name]))
		}
		if got := lstat(t, filepath.Join(dir, name)).Ctim.Nano(); got != shown[name] {
			t.Errorf("%s: ctime %d after the commit, %d before", name, got, shown[name])
		}
	}
}

// TestCloseChargesBytesOnce: a close's flush queues the file's bytes and
// starts their commit; the release that follows finds them still
// unflushed (their commit is on its way) and must not charge them to the
// queue's bound again: it did, and the queue counted every file in
// flight twice, so closes went synchronous at half the bytes.
func TestCloseChargesBytesOnce(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	p := filepath.Join(dir, "f")
	const size = 64 << 10
	must(t, os.WriteFile(p, bytes.Repeat([]byte("a"), size), 0o644))
	settled(t, m)
	release := fusefs.HoldWriteBehind(m)
	var once sync.Once
	defer once.Do(release)
	// A release is counted when it begins (Calls) and when it ends
	// (Nanos): the first write's may still be on its way.
	rel := m.Stats().Op("release")
	await.Until(t, time.Minute, "the first write's release to be served", func() bool { return rel.Calls.Load() >= 1 && rel.Nanos.Load() > 0 })
	c0, n0 := rel.Calls.Load(), rel.Nanos.Load()
	rewrite(t, p, bytes.Repeat([]byte("b"), size))
	await.Until(t, time.Minute, "the close's release to be served", func() bool { return rel.Calls.Load() > c0 && rel.Nanos.Load() != n0 })
	if got := fusefs.QueuedBytes(m); got != size {
		t.Fatalf("one file of %d bytes queued: the queue counts %d", size, got)
	}
	once.Do(release)
	settled(t, m)
	if got := fusefs.QueuedBytes(m); got != 0 {
		t.Fatalf("the queue counts %d bytes once empty", got)
	}
	checkContent(t, srv, []string{"f"}, func(int) []byte { return bytes.Repeat([]byte("b"), size) })
}
