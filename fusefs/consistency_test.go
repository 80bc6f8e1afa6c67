package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn/bench"
	"cairn/fusefs"
	"cairn/internal/await"
)

// TestReadYourWrites creates trees of new directories and files and walks
// them at once on the same mount, many rounds: whatever the mount answered
// (mkdirs and creates still queued behind included) every later call
// must show (issue: readdir of a directory whose mkdir was still queued
// answered ENOENT).
func TestReadYourWrites(t *testing.T) {
	srv := store(t)
	dir, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, dir)()
	for round := 0; round < 6; round++ {
		top := filepath.Join(dir, fmt.Sprintf("r%d", round))
		for a := 0; a < 10; a++ {
			for b := 0; b < 8; b++ {
				d := filepath.Join(top, fmt.Sprint("a", a), fmt.Sprint("b", b))
				must(t, os.MkdirAll(d, 0o755))
				for f := 0; f < 6; f++ {
					must(t, os.WriteFile(filepath.Join(d, fmt.Sprint("f", f)), []byte("x"), 0o644))
				}
			}
		}
		const want = 1 + 10 + 80 + 480 // top, a-dirs, b-dirs, files
		got := 0
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			got++
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: walk: %v (after %d entries)", round, err, got)
		}
		if got != want {
			t.Fatalf("round %d: walked %d entries, want %d", round, got, want)
		}
	}
}

// TestUntarThenFind extracts a tree with tar(1) and lists it with find(1)
// at once, as a user would: every file tar was answered for must be found.
func TestUntarThenFind(t *testing.T) {
	files := 5000
	if v, err := strconv.Atoi(os.Getenv("CAIRN_UNTAR_FILES")); err == nil {
		files = v
	}
	tarball := filepath.Join(t.TempDir(), "t.tar")
	must(t, bench.MakeTree(tarball, files, max(1, files/17), 4096))
	want := fmt.Sprint(files+max(1, files/17)+max(1, files/17+99)/100+1, "\n") // files, dirs, m-dirs, src
	srv := store(t)
	dir, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, dir)()
	for round := 0; round < 3; round++ {
		dst := filepath.Join(dir, fmt.Sprint("x", round))
		must(t, os.Mkdir(dst, 0o755))
		run(t, "", "tar", "xf", tarball, "-C", dst)
		if got := run(t, "", "sh", "-c", "find "+filepath.Join(dst, "src")+" | wc -l"); got != want {
			t.Fatalf("round %d: find counts %s entries, want %s", round, got, want)
		}
	}
}

// run runs a command in dir and returns its output, failing t on error.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir = dir
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestOwnCreatesAfterForget: files created here whose creates are still
// queued, in a directory the kernel (and so the mount's tree) forgot,
// must still be found by this mount: a lookup that reaches meta before the
// create's commit must not answer ENOENT for a file this mount created.
func TestOwnCreatesAfterForget(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	d := filepath.Join(dir, "d")
	must(t, os.Mkdir(d, 0o755))
	m.Sync()

	release := fusefs.HoldWriteBehind(m)
	var once sync.Once
	defer once.Do(release)
	big := bytes.Repeat([]byte("x"), 300<<10) // not packed: its commit is held
	const n = 20
	for i := range n {
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), big, 0o644))
	}
	// Drop unused dentries and inodes: the kernel forgets d and its files.
	await.Until(t, 10*time.Second, "the kernel to forget the files", func() bool {
		must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2\n"), 0))
		return fusefs.Kept(m) >= n
	})
	for i := range n {
		st, err := os.Stat(filepath.Join(d, fmt.Sprint("f", i)))
		if err != nil {
			t.Fatalf("stat of a file created here, commit queued: %v", err)
		}
		if st.Size() != int64(len(big)) {
			t.Fatalf("f%d: size %d, want %d", i, st.Size(), len(big))
		}
	}
	once.Do(release)
	if got := names(t, d); strings.Count(got, ",") != n-1 {
		t.Fatalf("listing after the commits: %q", got)
	}
}

// race runs f on mount a and on mount b at once, round after round, and
// hands check the two results.
func race(rounds int, a, b string, f func(dir string, round int) error, check func(round int, ea, eb error)) {
	for round := range rounds {
		var wg sync.WaitGroup
		var ea, eb error
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; ea = f(a, round) }()
		go func() { defer wg.Done(); <-start; eb = f(b, round) }()
		close(start)
		wg.Wait()
		check(round, ea, eb)
	}
}

// TestExclusiveCreateTwoMounts races O_CREAT|O_EXCL of one name, a write
// and a close on two mounts of one namespace: exactly one wins, the other
// gets EEXIST at once, and the file holds the winner's bytes.
func TestExclusiveCreateTwoMounts(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	b, mb := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, a, b)()
	must(t, os.Mkdir(filepath.Join(a, "x"), 0o755))
	who := map[string]string{a: "A", b: "B"}
	race(50, a, b, func(dir string, round int) error {
		f, err := os.OpenFile(filepath.Join(dir, "x", fmt.Sprint("f", round)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.Write(bytes.Repeat([]byte(who[dir]), 5000)); err != nil {
			return err
		}
		return f.Close()
	}, func(round int, ea, eb error) {
		var winner string
		switch {
		case ea == nil && eb == nil:
			t.Fatalf("round %d: both exclusive creates succeeded", round)
		case ea == nil && errors.Is(eb, fs.ErrExist):
			winner = "A"
		case eb == nil && errors.Is(ea, fs.ErrExist):
			winner = "B"
		default:
			t.Fatalf("round %d: A: %v, B: %v", round, ea, eb)
		}
		ma.Sync()
		mb.Sync()
		for _, dir := range []string{a, b} {
			got := readFile(t, filepath.Join(dir, "x", fmt.Sprint("f", round)))
			if got != strings.Repeat(winner, 5000) {
				t.Fatalf("round %d: %s reads %d bytes, not the winner's (%s)", round, who[dir], len(got), winner)
			}
		}
	})
}

// TestExclusiveMkdirTwoMounts races mkdir of one name on two mounts:
// exactly one succeeds. Then a mkdir/rmdir loop of one name on each
// mount: the successful mkdirs and rmdirs must balance with what is left.
func TestExclusiveMkdirTwoMounts(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 5*60e9, a, b)()
	race(100, a, b, func(dir string, round int) error {
		return os.Mkdir(filepath.Join(dir, fmt.Sprint("d", round)), 0o755)
	}, func(round int, ea, eb error) {
		if (ea == nil) == (eb == nil) || ea != nil && !errors.Is(ea, fs.ErrExist) || eb != nil && !errors.Is(eb, fs.ErrExist) {
			t.Fatalf("round %d: mkdir on A: %v, on B: %v", round, ea, eb)
		}
	})

	var mkdirs, rmdirs atomic.Int64
	loop := func(dir string) {
		p := filepath.Join(dir, "loop")
		for range 150 {
			if os.Mkdir(p, 0o755) == nil {
				mkdirs.Add(1)
			}
			if os.Remove(p) == nil {
				rmdirs.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); loop(a) }()
	go func() { defer wg.Done(); loop(b) }()
	wg.Wait()
	left := int64(0)
	if _, err := os.Stat(filepath.Join(a, "loop")); err == nil {
		left = 1
	}
	if mkdirs.Load()-rmdirs.Load() != left {
		t.Fatalf("%d mkdirs and %d rmdirs succeeded, %d left", mkdirs.Load(), rmdirs.Load(), left)
	}
}

// TestDirMtimeKept: tar sets a directory's times after writing its files;
// the files' creates, committed behind, must not move the time back to
// their commit (676 of 1,324 directories were wrong after untar and a
// remount).
func TestDirMtimeKept(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	want := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	const dirs = 40
	for d := range dirs {
		p := filepath.Join(a, "t", fmt.Sprint("d", d))
		must(t, os.MkdirAll(p, 0o755))
		for f := range 12 {
			must(t, os.WriteFile(filepath.Join(p, fmt.Sprint("f", f)), []byte("data"), 0o644))
		}
		must(t, os.Chtimes(p, want, want))
	}
	ma.Sync()
	b, _ := mount(t, srv, "data", nil) // meta's record, as after a remount
	wrong := 0
	for d := range dirs {
		for _, dir := range []string{a, b} {
			st, err := os.Stat(filepath.Join(dir, "t", fmt.Sprint("d", d)))
			must(t, err)
			if !st.ModTime().Equal(want) {
				wrong++
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d directory times lost", wrong, 2*dirs)
	}
}
