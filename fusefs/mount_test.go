package fusefs_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/meta"
	"cairn/server/servertest"
)

// TestAppendAtomic appends records through O_APPEND descriptors on two
// mounts at once: every record lands whole, none is lost or overwritten
// (each append is placed by meta, not at a size one mount believed).
func TestAppendAtomic(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	must(t, os.WriteFile(filepath.Join(a, "log"), nil, 0o644))
	const writers, records, size = 4, 20, 100
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		root := a
		if w%2 == 1 {
			root = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.OpenFile(filepath.Join(root, "log"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			rec := append(bytes.Repeat([]byte{byte('a' + w)}, size-1), '\n')
			for range records {
				if _, err := f.Write(rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, root := range []string{a, b} {
		got := readFile(t, filepath.Join(root, "log"))
		if len(got) != writers*records*size {
			t.Fatalf("%s: %d bytes, want %d", root, len(got), writers*records*size)
		}
		count := map[byte]int{}
		for i := 0; i < len(got); i += size {
			r := got[i : i+size]
			if strings.Count(r, r[:1]) != size-1 || r[size-1] != '\n' {
				t.Fatalf("record at %d torn: %q", i, r)
			}
			count[r[0]]++
		}
		for w := range writers {
			if count[byte('a'+w)] != records {
				t.Fatalf("writer %d: %d records, want %d", w, count[byte('a'+w)], records)
			}
		}
	}
}

// TestTwoMountsMore continues TestTwoMounts with the changes it leaves
// out: an overwrite that keeps the size (only an invalidation of B's page
// cache shows it), truncate, chown and utimens, xattrs, symlinks, hard
// links, mkdir and rmdir.
func TestTwoMountsMore(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	pa := func(p string) string { return filepath.Join(a, p) }
	pb := func(p string) string { return filepath.Join(b, p) }
	stB := func(p string) *syscall.Stat_t {
		t.Helper()
		st, err := os.Lstat(pb(p))
		must(t, err)
		return st.Sys().(*syscall.Stat_t)
	}

	must(t, os.WriteFile(pa("f"), []byte("AAAAAAAA"), 0o644))
	if got := readFile(t, pb("f")); got != "AAAAAAAA" { // B's page cache holds it
		t.Fatalf("B reads %q", got)
	}
	stB("f")
	names(t, b)

	// Same size, new bytes, through a descriptor B keeps open too.
	fb, err := os.Open(pb("f"))
	must(t, err)
	defer fb.Close()
	f, err := os.OpenFile(pa("f"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("BBBB"), 2)
	must(t, err)
	must(t, f.Close())
	if got := readFile(t, pb("f")); got != "AABBBBAA" {
		t.Fatalf("B reads after a same-size overwrite: %q", got)
	}

	// truncate
	must(t, os.Truncate(pa("f"), 3))
	if st := stB("f"); st.Size != 3 {
		t.Fatalf("B size after truncate: %d", st.Size)
	}
	if got := readFile(t, pb("f")); got != "AAB" {
		t.Fatalf("B reads after truncate: %q", got)
	}

	// chown and utimens
	mt := time.Date(2011, 3, 4, 5, 6, 7, 0, time.UTC)
	must(t, os.Chown(pa("f"), 777, 888))
	must(t, os.Chtimes(pa("f"), mt, mt))
	if st := stB("f"); st.Uid != 777 || st.Gid != 888 || time.Unix(st.Mtim.Unix()).UTC() != mt {
		t.Fatalf("B after chown and utimens: uid %d gid %d mtime %v", st.Uid, st.Gid, time.Unix(st.Mtim.Unix()))
	}

	// xattrs (B read the list first, so it has it cached)
	buf := make([]byte, 64)
	if n, err := syscall.Listxattr(pb("f"), buf); err != nil || n != 0 {
		t.Fatalf("B lists xattrs: %d, %v", n, err)
	}
	must(t, syscall.Setxattr(pa("f"), "user.k", []byte("v"), 0))
	if n, err := syscall.Getxattr(pb("f"), "user.k", buf); err != nil || string(buf[:n]) != "v" {
		t.Fatalf("B getxattr: %q, %v", buf[:n], err)
	}
	must(t, syscall.Removexattr(pa("f"), "user.k"))
	if _, err := syscall.Getxattr(pb("f"), "user.k", buf); err != syscall.ENODATA {
		t.Fatalf("B getxattr after remove: %v", err)
	}

	// symlink and hard link
	must(t, os.Symlink("f", pa("sl")))
	if got, err := os.Readlink(pb("sl")); err != nil || got != "f" {
		t.Fatalf("B readlink: %q, %v", got, err)
	}
	must(t, os.Link(pa("f"), pa("hl")))
	if st := stB("f"); st.Nlink != 2 {
		t.Fatalf("B nlink of f after link: %d", st.Nlink)
	}
	if got := readFile(t, pb("hl")); got != "AAB" {
		t.Fatalf("B reads the hard link: %q", got)
	}
	must(t, os.Remove(pa("hl")))
	if st := stB("f"); st.Nlink != 1 {
		t.Fatalf("B nlink of f after unlink of the link: %d", st.Nlink)
	}

	// mkdir, and rmdir of a directory B has listed
	must(t, os.Mkdir(pa("d"), 0o700))
	if st := stB("d"); st.Mode&0o777 != 0o700 {
		t.Fatalf("B mode of new dir: %o", st.Mode)
	}
	if got := names(t, pb("d")); got != "" {
		t.Fatalf("B lists new dir: %q", got)
	}
	must(t, os.Remove(pa("d")))
	if _, err := os.Stat(pb("d")); !os.IsNotExist(err) {
		t.Fatalf("B stat of removed dir: %v", err)
	}
	if got := names(t, b); got != "f,sl" {
		t.Fatalf("B lists the root: %q", got)
	}
}

// TestReaddirPlus lists a directory another mount filled and stats every
// entry: the listing answers every lookup (readdirplus hands the kernel
// each entry's attributes), so the stats cost no meta call.
func TestReaddirPlus(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	b, mb := mount(t, srv, "data", nil)
	must(t, os.MkdirAll(filepath.Join(a, "dir", "sub"), 0o755))
	const n = 40
	for i := range n {
		must(t, os.WriteFile(filepath.Join(a, "dir", fmt.Sprintf("f%02d", i)), make([]byte, i), 0o644))
	}
	must(t, os.Symlink("f00", filepath.Join(a, "dir", "link")))
	ma.Sync() // A's commits (and B's acknowledgements of them) are done

	_, err := os.Stat(filepath.Join(b, "dir"))
	must(t, err)
	meta := func() int64 {
		return mb.Stats().Op("lookup").Meta.Load() + mb.Stats().Op("getattr").Meta.Load()
	}
	before, lists := meta(), mb.Stats().Op("readdir").Meta.Load()
	ents, err := os.ReadDir(filepath.Join(b, "dir"))
	must(t, err)
	if len(ents) != n+2 {
		t.Fatalf("B lists %d entries, want %d", len(ents), n+2)
	}
	for _, e := range ents {
		st, err := os.Lstat(filepath.Join(b, "dir", e.Name()))
		must(t, err)
		if st.Mode().Type() != e.Type() {
			t.Errorf("%s: readdir type %v, lstat %v", e.Name(), e.Type(), st.Mode().Type())
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "f")); err == nil && st.Size() != int64(i) {
			t.Errorf("%s: size %d", e.Name(), st.Size())
		}
	}
	if d := meta() - before; d != 0 {
		t.Errorf("stats after the listing cost %d meta calls", d)
	}
	if d := mb.Stats().Op("readdir").Meta.Load() - lists; d != 1 {
		t.Errorf("the listing cost %d meta calls, want 1", d)
	}
	// A name the listing lacks is known absent without meta.
	before = meta()
	if _, err := os.Stat(filepath.Join(b, "dir", "absent")); !os.IsNotExist(err) {
		t.Fatalf("stat of absent: %v", err)
	}
	if d := meta() - before; d != 0 {
		t.Errorf("negative lookup cost %d meta calls", d)
	}
}

// statsTable parses the .cairn-stats file: op -> [calls, meta, data].
func statsTable(t *testing.T, p string) map[string][3]int64 {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan()
	if h := strings.Fields(sc.Text()); len(h) < 4 || h[0] != "op" || h[1] != "calls" || h[2] != "meta" || h[3] != "data" {
		t.Fatalf("stats header %q", sc.Text())
	}
	out := map[string][3]int64{}
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue // the lines below the table
		}
		f := strings.Fields(sc.Text())
		var v [3]int64
		for i := range v {
			v[i], err = strconv.ParseInt(f[i+1], 10, 64)
			must(t, err)
		}
		out[f[0]] = v
	}
	return out
}

// TestStatsFile reads .cairn-stats, which shows per FUSE operation its
// calls and the meta and data-server operations they cost, and checks it
// against what the operations must have cost.
func TestStatsFile(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) { c.SyncClose = true })
	p := filepath.Join(dir, ".cairn-stats")
	st, err := os.Stat(p)
	must(t, err)
	if st.Mode().Perm() != 0o444 || !st.Mode().IsRegular() {
		t.Fatalf("stats file mode %v", st.Mode())
	}
	before := statsTable(t, p)
	writeSynced(t, filepath.Join(dir, "f"), []byte("counted"))
	after := statsTable(t, p)
	delta := func(op string, i int) int64 { return after[op][i] - before[op][i] }
	if delta("create", 0) != 1 || delta("create", 1) != 1 {
		t.Errorf("create: %d calls, %d meta (want 1, 1)", delta("create", 0), delta("create", 1))
	}
	if delta("fsync", 0) != 1 || delta("fsync", 1) < 1 || delta("fsync", 2) < 1 {
		t.Errorf("fsync: %v -> %v (want a call, a commit, an upload)", before["fsync"], after["fsync"])
	}
	if delta("write", 1) != 0 || delta("write", 2) != 0 {
		t.Errorf("buffered writes reached a server: %v -> %v", before["write"], after["write"])
	}
	// The file shows the mount's own counters.
	if got, want := after["fsync"][1], m.Stats().Op("fsync").Meta.Load(); got != want {
		t.Errorf("file shows fsync meta %d, counters %d", got, want)
	}
	_, err = os.OpenFile(p, os.O_WRONLY, 0)
	wantErrno(t, "open the stats file for writing", err, syscall.EACCES)
	if strings.Contains(names(t, dir), ".cairn") {
		t.Errorf("internal names listed: %s", names(t, dir))
	}
}

// TestUnmountExternal unmounts the way umount(8) or fusermount -u does,
// from outside: Wait returns, what close() left behind is committed, and
// the mount point is free again.
func TestUnmountExternal(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	srv := store(t)
	dir := t.TempDir()
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret), fusefs.CountCalls())
	must(t, err)
	defer conn.Close()
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, srv.UserTLS()) }, NoWatch: true, CacheEntries: -1})
	must(t, err)
	defer cl.Close()
	m, err := fusefs.New(fusefs.Config{Meta: mc, Client: cl, Namespace: "data", Mountpoint: dir})
	must(t, err)
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	const n = 20
	for i := range n {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), bytes.Repeat([]byte{'x'}, i+1), 0o644))
	}
	must(t, syscall.Unmount(dir, 0))
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after umount")
	}
	if mounted(dir) {
		t.Fatal("still mounted")
	}
	for i := range n {
		f, err := srv.Client().StatFresh(t.Context(), "data", fmt.Sprint("f", i))
		if err != nil || f.Size() != int64(i+1) {
			t.Fatalf("f%d after umount: %v, %v", i, f, err)
		}
	}
	// The session ended with the mount: meta no longer counts it.
	if m.Live() {
		t.Error("session still live after umount")
	}
}

// TestConcurrentWritersTwoMounts has two writers on each of two mounts
// open, write and close one file over and over. Which write wins a range is
// up to timing (close-to-open, not a shared cache), but nothing may hang,
// fail, or leave the mounts disagreeing once all are closed. It once
// deadlocked (an event about the file from the other mount, held while
// this mount's commit was out, was applied under the node's lock), and
// then lost data: a commit laid the writes over an old version whose
// needles the other mount's commit had already freed, so reads of the
// file failed with ENOENT. Commits are now conditional on their base.
func TestConcurrentWritersTwoMounts(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	stop := watchdog(t, 60*time.Second, a, b)
	defer stop()
	must(t, os.WriteFile(filepath.Join(a, "shared"), nil, 0o644))
	var wg sync.WaitGroup
	for w := range 4 {
		root := []string{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := range 30 {
				f, err := os.OpenFile(filepath.Join(root, "shared"), os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				for j := range buf {
					buf[j] = byte(w*31 + i)
				}
				if _, err := f.WriteAt(buf, int64(w*4096)); err != nil {
					t.Errorf("writer %d round %d: %v", w, i, err)
				}
				if err := f.Close(); err != nil {
					t.Errorf("writer %d round %d: close: %v", w, i, err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ga, gb := readFile(t, filepath.Join(a, "shared")), readFile(t, filepath.Join(b, "shared"))
	if ga != gb || len(ga) != 4*4096 {
		// Say which mount is wrong, in which writer's range, against the
		// store's own view (which recalls both mounts first).
		var want bytes.Buffer
		st, err := srv.Client().StatFresh(t.Context(), "data", "shared")
		if err == nil {
			_, err = srv.Client().ReadTo(t.Context(), st, 0, st.Size(), &want)
		}
		if err != nil {
			t.Fatalf("mounts disagree after the last close (%d vs %d bytes), and the store's view: %v", len(ga), len(gb), err)
		}
		for _, m := range []struct{ name, got string }{{"A", ga}, {"B", gb}} {
			for w := range 4 {
				lo, hi := w*4096, (w+1)*4096
				if hi > len(m.got) || hi > want.Len() || m.got[lo:hi] != want.String()[lo:hi] {
					t.Errorf("mount %s, writer %d's range (mount %s's): %s, the store: %s", m.name, w, []string{"A", "B"}[w%2], rounds(m.got, lo, hi), rounds(want.String(), lo, hi))
				}
			}
		}
		// And whether the mounts agree with it once asked again.
		for _, m := range []struct{ name, dir string }{{"A", a}, {"B", b}} {
			if again := readFile(t, filepath.Join(m.dir, "shared")); again != want.String() {
				t.Errorf("mount %s read again: still differs from the store", m.name)
			}
		}
		t.Fatalf("mounts disagree after the last close: %d vs %d bytes, equal=%v (store: %d bytes, version %d)", len(ga), len(gb), ga == gb, want.Len(), st.Inode.Version)
	}
	// Each writer's range holds its last write: a commit lays only its own
	// writes over the newest version, so no writer undoes another's.
	for w := range 4 {
		want := string(bytes.Repeat([]byte{byte(w*31 + 29)}, 4096))
		if got := ga[w*4096 : (w+1)*4096]; got != want {
			t.Errorf("writer %d's range holds %q..., want its last write %q...", w, got[:8], want[:8])
		}
	}
}

// rounds describes s[lo:hi] of TestConcurrentWritersTwoMounts's file as the
// rounds whose byte fills it (writer w's round i writes byte w*31+i).
func rounds(s string, lo, hi int) string {
	if hi > len(s) {
		return fmt.Sprintf("short (%d bytes)", len(s))
	}
	var out []string
	for i := lo; i < hi; {
		j := i
		for j < hi && s[j] == s[i] {
			j++
		}
		out = append(out, fmt.Sprintf("[%d,%d) w%d r%d", i, j, int(s[i])/31, int(s[i])%31))
		i = j
	}
	return strings.Join(out, " ")
}

// TestDirtyAcrossSessionCut: a mount whose session stream is cut while it
// has a path announced dirty announces its next close again on the new
// stream. Meta keeps a mount's dirty epoch with the stream, so a new one
// starts clean there; the mount, still in its epoch with the path
// noticed, once went on answering closes that no other mount's read
// recalled (TestConcurrentWritersTwoMounts read older rounds through the
// other mount after a stall had cut a session).
func TestDirtyAcrossSessionCut(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	stop := watchdog(t, 60*time.Second, a, b)
	defer stop()
	fa, fb := filepath.Join(a, "f"), filepath.Join(b, "f")
	must(t, os.WriteFile(fa, []byte("0000"), 0o644))
	if got := readFile(t, fb); got != "0000" {
		t.Fatalf("b read %q, want 0000", got)
	}
	overwrite := func(s string) {
		f, err := os.OpenFile(fa, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt([]byte(s), 0)
		must(t, err)
		must(t, f.Close())
	}
	overwrite("1111") // a dirty, f announced in its epoch

	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	resets := ma.Stats().Op("session-reset").Calls.Load()
	fusefs.CutSession(ma)
	// One reset when the stream ends, one at the new stream's first event.
	for ma.Stats().Op("session-reset").Calls.Load() < resets+2 || !ma.Live() {
		select {
		case <-deadline:
			t.Fatal("the session did not come back")
		case <-tick.C:
		}
	}

	release := fusefs.HoldWriteBehind(ma)
	overwrite("2222") // answered; its commit is held
	recalls := ma.Stats().Op("recall").Calls.Load()
	got := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(fb)
		if err != nil {
			t.Error(err)
		}
		got <- string(b)
	}()
	// b's read must recall a (whose commit is held) before it answers.
	for ma.Stats().Op("recall").Calls.Load() == recalls {
		select {
		case v := <-got:
			release()
			t.Fatalf("b read %q without recalling a, whose close of 2222 had returned", v)
		case <-deadline:
			release()
			t.Fatal("b's read neither recalled a nor answered")
		case <-tick.C:
		}
	}
	release()
	if v := <-got; v != "2222" {
		t.Errorf("b read %q after a's close of 2222", v)
	}
}
