package fusefs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestLocksAcrossMounts: flock and fcntl locks taken on one mount exclude
// the other mount's, a blocked F_SETLKW (and a blocking flock) is woken
// by the release, and a close releases.
func TestLocksAcrossMounts(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 2*60e9, a, b)()
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("locked file"), 0o644))
	open := func(dir string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
		must(t, err)
		return f
	}
	fa, fb := open(a), open(b)
	defer fa.Close()
	defer fb.Close()

	// flock
	must(t, syscall.Flock(int(fa.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	if err := syscall.Flock(int(fb.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("flock on B while A holds it: %v", err)
	}
	if err := syscall.Flock(int(fb.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("shared flock on B while A holds it exclusively: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- syscall.Flock(int(fb.Fd()), syscall.LOCK_EX) }()
	notReturned(t, got, "blocking flock")
	must(t, syscall.Flock(int(fa.Fd()), syscall.LOCK_UN))
	must(t, <-got)
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("flock on A while B holds it: %v", err)
	}
	must(t, syscall.Flock(int(fb.Fd()), syscall.LOCK_UN))

	// fcntl record locks
	lk := func(typ int16, start, n int64) *syscall.Flock_t {
		return &syscall.Flock_t{Type: typ, Whence: 0, Start: start, Len: n}
	}
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK, 0, 100)))
	if err := syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK, 50, 10)); err != syscall.EAGAIN && err != syscall.EACCES {
		t.Fatalf("overlapping fcntl lock on B: %v", err)
	}
	test := lk(syscall.F_WRLCK, 50, 10)
	must(t, syscall.FcntlFlock(fb.Fd(), syscall.F_GETLK, test))
	if test.Type != syscall.F_WRLCK || test.Start != 0 || test.Len != 100 {
		t.Fatalf("F_GETLK on B: %+v, want A's write lock on [0,100)", test)
	}
	must(t, syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK, 200, 100))) // disjoint
	go func() { got <- syscall.FcntlFlock(fb.Fd(), syscall.F_SETLKW, lk(syscall.F_WRLCK, 0, 10)) }()
	notReturned(t, got, "F_SETLKW")
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_UNLCK, 0, 100)))
	must(t, <-got)

	// A close releases the closing process's POSIX locks.
	must(t, fb.Close())
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK, 0, 0)))
}

func notReturned(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while the other mount held the lock", what, err)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestSQLiteTwoMounts: one sqlite3 writer per mount on one database: every
// acknowledged commit is kept (9 were lost while locks were per mount).
func TestSQLiteTwoMounts(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatal("sqlite3 is required (apt: sqlite3)")
	}
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 4*60e9, a, b)()
	sql := func(dir, q string) (string, error) {
		out, err := exec.Command("sqlite3", "-cmd", ".timeout 60000", filepath.Join(dir, "db"), q).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := sql(a, "CREATE TABLE t (who TEXT, n INTEGER)"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, dir := range []string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if out, err := sql(dir, fmt.Sprintf("INSERT INTO t VALUES ('%s', %d)", filepath.Base(dir), i)); err != nil {
					errs <- fmt.Errorf("insert %d on %s: %v: %s", i, dir, err, out)
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
	for _, dir := range []string{a, b} {
		out, err := sql(dir, "SELECT count(*) FROM t; PRAGMA integrity_check")
		if err != nil || out != fmt.Sprintf("%d\nok", 2*n) {
			t.Fatalf("on %s: %q (%v), want %d rows and ok", dir, out, err, 2*n)
		}
	}
}

// TestLockCloseByOwner: a close releases the POSIX locks of the process
// that closes, and only those, as close(2) does on a local disk. A child
// that inherits the descriptor and closes it (here at exec: Go opens
// files close-on-exec) takes nothing from its parent; another descriptor
// of the file closed by the holder releases the holder's locks. Before,
// any close of the locking descriptor released every POSIX lock taken
// through it (go-fuse does not pass the flush's owner), so a process that
// ran a command lost its locks; and a close of another descriptor
// released nothing.
func TestLockCloseByOwner(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	defer watchdog(t, 2*60e9, a, b)()
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("locked file"), 0o644))
	fa, fb := openRW(t, a, "f"), openRW(t, b, "f")
	wr := &syscall.Flock_t{Type: syscall.F_WRLCK, Start: 0, Len: 100}
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, wr))
	refused := func(what string) {
		t.Helper()
		err := syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK, Start: 10, Len: 10})
		if err != syscall.EAGAIN && err != syscall.EACCES {
			t.Fatalf("B's lock %s, while A holds it: %v", what, err)
		}
	}
	refused("before")
	// A child inherits fa and closes it when it execs.
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Fatalf("true: %v %s", err, out)
	}
	refused("after a child closed its copy of A's descriptor")
	// The holder closes another descriptor of the file: its locks go.
	other, err := os.Open(filepath.Join(a, "f"))
	must(t, err)
	must(t, other.Close())
	must(t, syscall.FcntlFlock(fb.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK, Start: 10, Len: 10}))
}

// openRW opens dir/name read-write for the test; it is closed when the
// test ends, before its mounts go.
func openRW(t *testing.T, dir, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}
