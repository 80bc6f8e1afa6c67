package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn/fusefs"
	"cairn/internal/await"
)

// TestUnlinkQueuedCreateAfterForget: a file created here whose create is
// still queued, and which the kernel has forgotten, can be unlinked; it
// does not come back when the queue runs. (The queue is released just
// before the unlink: unlink waits for the file's queued work, so with the
// queue held it would wait for ever.)
func TestUnlinkQueuedCreateAfterForget(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	d := filepath.Join(dir, "d")
	must(t, os.Mkdir(d, 0o755))
	m.Sync()
	release := fusefs.HoldWriteBehind(m)
	var once sync.Once
	defer once.Do(release)
	p := filepath.Join(d, "queued")
	must(t, os.WriteFile(p, []byte(strings.Repeat("q", 300<<10)), 0o644)) // not packed
	await.Until(t, 10*time.Second, "the kernel to forget the file", func() bool {
		must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2\n"), 0))
		return fusefs.Kept(m) > 0
	})
	// Unlink settles the file's queued work first: the queue runs again
	// now, and the unlink meets the create still queued or under way.
	once.Do(release)
	must(t, os.Remove(p))
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat after unlink: %v", err)
	}
	m.Sync()
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("stat after the queue ran: %v", err)
	}
	if _, err := srv.Client().StatFresh(t.Context(), "data", "d/queued"); err == nil {
		t.Fatal("the unlinked file is in meta after the queue ran")
	}
	if got := names(t, d); got != "" {
		t.Fatalf("listing: %q", got)
	}
}

// TestTwoMountsCreateInOneDir: two mounts creating, writing and closing
// files in one directory at once (each create needs the other mount's
// recall) all succeed, and both list every file.
func TestTwoMountsCreateInOneDir(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	must(t, os.Mkdir(filepath.Join(a, "shared"), 0o755))
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, dir := range []string{a, b} {
		wg.Go(func() {
			for k := range n {
				p := filepath.Join(dir, "shared", fmt.Sprintf("m%d-%d", i, k))
				if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("create on two mounts in one directory: %v", err)
	}
	for _, dir := range []string{a, b} {
		ents, err := os.ReadDir(filepath.Join(dir, "shared"))
		must(t, err)
		if len(ents) != 2*n {
			t.Fatalf("%s lists %d files, want %d", dir, len(ents), 2*n)
		}
		for _, e := range ents {
			if got := readFile(t, filepath.Join(dir, "shared", e.Name())); !strings.HasSuffix(got, "/shared/"+e.Name()) {
				t.Fatalf("%s holds %q", e.Name(), got)
			}
		}
	}
}

// BenchmarkCreatesTwoMounts measures create+write+close per second with
// two mounts of one namespace creating at once, in one shared directory
// and in a directory each (what the create-claim protocol costs).
func BenchmarkCreatesTwoMounts(b *testing.B) {
	srv := store(b)
	a, _ := mount(b, srv, "data", nil)
	c, _ := mount(b, srv, "data", nil)
	for _, shared := range []bool{true, false} {
		b.Run(map[bool]string{true: "one-dir", false: "two-dirs"}[shared], func(b *testing.B) {
			run := fmt.Sprint(time.Now().UnixNano())
			dirs := []string{filepath.Join(a, "s"+run), filepath.Join(c, "s"+run)}
			if err := os.Mkdir(dirs[0], 0o755); err != nil {
				b.Fatal(err)
			}
			if !shared {
				dirs[1] = filepath.Join(c, "t"+run)
				if err := os.Mkdir(dirs[1], 0o755); err != nil {
					b.Fatal(err)
				}
			}
			data := make([]byte, 4096)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, dir := range dirs {
				wg.Go(func() {
					for k := range b.N {
						if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m%d-%d", i, k)), data, 0o644); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "creates/s")
		})
	}
}

// TestByInodeAcrossRename: an open file is its inode on every mount. An
// O_APPEND write after another mount renamed the file goes to the file
// (it went by path, and failed with ENOENT); and a mount that knows the
// file by its new name sees a write made by inode through the old
// descriptor at once (it saw it only after its cache expired).
func TestByInodeAcrossRename(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 2*60e9, a, b)()

	t.Run("append-after-rename", func(t *testing.T) {
		f, err := os.OpenFile(filepath.Join(a, "ap"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		must(t, err)
		defer f.Close()
		_, err = f.Write([]byte("line 1\n"))
		must(t, err)
		must(t, os.Rename(filepath.Join(b, "ap"), filepath.Join(b, "ap.1")))
		_, err = f.Write([]byte("line 2\n"))
		must(t, err)
		if got := readFile(t, filepath.Join(b, "ap.1")); got != "line 1\nline 2\n" {
			t.Fatalf("the renamed file reads %q on the renaming mount", got)
		}
		must(t, f.Close())
		if _, err := os.Stat(filepath.Join(a, "ap")); !os.IsNotExist(err) {
			t.Fatalf("the old name came back: %v", err)
		}
		st, err := srv.Client().StatFresh(t.Context(), "data", "ap.1")
		must(t, err)
		got, err := srv.Client().ReadAll(t.Context(), st)
		must(t, err)
		if string(got) != "line 1\nline 2\n" {
			t.Fatalf("the store holds %q", got)
		}
	})

	t.Run("write-seen-under-new-name", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(a, "wn"), []byte("old content"), 0o644))
		f, err := os.OpenFile(filepath.Join(a, "wn"), os.O_RDWR, 0)
		must(t, err)
		defer f.Close()
		must(t, os.Rename(filepath.Join(b, "wn"), filepath.Join(b, "wn.2")))
		if got := readFile(t, filepath.Join(b, "wn.2")); got != "old content" {
			t.Fatalf("B reads %q before the write", got)
		}
		_, err = f.WriteAt([]byte("NEW"), 0)
		must(t, err)
		must(t, f.Sync()) // committed by inode: no name of A's knows it
		if got := readFile(t, filepath.Join(b, "wn.2")); got != "NEW content" {
			t.Fatalf("B reads %q under the new name after A's fsync", got)
		}
		must(t, f.Close())
	})
}

// TestRecallWhileOtherMountWrites: one mount writes into a directory as
// fast as it can (new files, and files it rewrites over and over), while
// the other stats and creates in the same directory. Each of the second
// mount's look-ups recalls the first mount's write-behind; the recall
// must end once what was queued before it is committed, not wait for a
// queue the writers keep filling (it did: the recall outlived the
// caller's attempts and stat answered EIO after 30 s). Every call of both
// mounts must succeed.
func TestRecallWhileOtherMountWrites(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, a, b)()
	must(t, os.Mkdir(filepath.Join(a, "shared"), 0o755))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	var written [4]atomic.Int64 // by the creating writers
	data := make([]byte, 4096)
	for w := range 2 * len(written) {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				// Half the writers create new files, half rewrite one
				// file each: its chain always has a next commit.
				name := fmt.Sprintf("r%d", w)
				if w < len(written) {
					name = fmt.Sprintf("b%d-%d", w, k)
				}
				if err := os.WriteFile(filepath.Join(b, "shared", name), data, 0o644); err != nil {
					errs <- fmt.Errorf("writer on B: %w", err)
					return
				}
				if w < len(written) {
					written[w].Add(1)
				}
			}
		})
	}
	// Let B's queue fill before A starts looking.
	await.Until(t, time.Minute, "B to write", func() bool {
		ents, _ := os.ReadDir(filepath.Join(b, "shared"))
		return len(ents) >= 200
	})
	var slowest time.Duration
	for k := range 60 {
		start := time.Now()
		if _, err := os.Stat(filepath.Join(a, "shared")); err != nil {
			errs <- fmt.Errorf("stat on A: %w", err)
			break
		}
		// A name A has not looked up yet: the look-up reaches meta.
		last := fmt.Sprintf("b%d-%d", k%len(written), written[k%len(written)].Load()-1)
		if _, err := os.Stat(filepath.Join(a, "shared", last)); err != nil {
			errs <- fmt.Errorf("stat of B's file on A: %w", err)
			break
		}
		f, err := os.OpenFile(filepath.Join(a, "shared", fmt.Sprintf("a-%d", k)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, err = f.Write(data)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			errs <- fmt.Errorf("create on A: %w", err)
			break
		}
		slowest = max(slowest, time.Since(start))
		if d := time.Since(start); d > time.Second {
			t.Logf("round %d took %v", k, d)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for i := range written {
		total += int(written[i].Load())
	}
	t.Logf("B wrote %d files while A made 60 rounds; A's slowest round took %v", total, slowest)
}

// TestRecallOnlyWhatConcerns: mount A writes behind in directory da;
// mount B's work in db (creates, look-ups, a listing, reads) does not
// recall A, whose queued changes do not concern it, while B's listing
// of da, and a walk from the directory above, show every file A closed
// (close-to-open), recalling A first. Every data call recalled every
// dirty mount: two mounts working in two directories recalled each
// other on every look-up.
func TestRecallOnlyWhatConcerns(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, a, b)()
	must(t, os.MkdirAll(filepath.Join(a, "top", "da"), 0o755))
	must(t, os.Mkdir(filepath.Join(a, "top", "db"), 0o755))
	// B's first look at db recalls A's mkdirs.
	_, err := os.Stat(filepath.Join(b, "top", "db"))
	must(t, err)
	const n = 50
	write := func(dir, prefix string) {
		t.Helper()
		for k := range n {
			p := filepath.Join(dir, fmt.Sprintf("%s%d", prefix, k))
			must(t, os.WriteFile(p, []byte(prefix), 0o644))
		}
	}
	recalls := func() int64 { return ma.Stats().Op("recall").Calls.Load() }

	write(filepath.Join(a, "top", "da"), "a")
	before := recalls()
	db := filepath.Join(b, "top", "db")
	write(db, "b")
	for k := range n {
		if got := readFile(t, filepath.Join(db, fmt.Sprintf("b%d", k))); got != "b" {
			t.Fatalf("db/b%d holds %q", k, got)
		}
	}
	if got := len(strings.Split(names(t, db), ",")); got != n {
		t.Fatalf("db lists %d files, want %d", got, n)
	}
	if _, err := os.Stat(filepath.Join(db, "none")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	if r := recalls() - before; r != 0 {
		t.Errorf("B's work in db recalled A %d times; A's queued changes are in da", r)
	}

	// B sees what A closed in da, through a listing of da...
	da := filepath.Join(b, "top", "da")
	if got := len(strings.Split(names(t, da), ",")); got != n {
		t.Fatalf("da lists %d files on B, want %d", got, n)
	}
	for k := range n {
		if got := readFile(t, filepath.Join(da, fmt.Sprintf("a%d", k))); got != "a" {
			t.Fatalf("da/a%d holds %q on B", k, got)
		}
	}
	if recalls() == before {
		t.Error("B's listing of da did not recall A")
	}
	// ...and a walk from the directory above (its listing was cached).
	write(filepath.Join(a, "top", "da"), "c")
	files := 0
	must(t, filepath.WalkDir(filepath.Join(b, "top"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) == "da" {
			files++
		}
		return err
	}))
	if files != 2*n {
		t.Fatalf("a walk of top on B finds %d files in da, want %d", files, 2*n)
	}
}
