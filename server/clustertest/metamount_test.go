package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/internal/await"
)

// TestMountRidesThroughMetaLeaderChange: a FUSE mount of a cluster whose
// meta is a group of three writes files and lists its directory while
// the meta leader is killed (kill -9), twice. The mount's session, its
// leases and its invalidation stream move to the new leader: no call the
// kernel made fails, and every file written reads back.
func TestMountRidesThroughMetaLeaderChange(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "mnt", 2)
	dir, unmount := mountNS(t, c, c.MetaAddr, "mnt")

	var (
		mu      sync.Mutex
		written []string
		failure error
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		fail := func(err error) {
			mu.Lock()
			failure = err
			mu.Unlock()
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("f%04d", i)
			if err := os.WriteFile(filepath.Join(dir, name), chunktest.Data(uint64(i), 4096), 0o644); err != nil {
				fail(fmt.Errorf("write %s: %w", name, err))
				return
			}
			mu.Lock()
			written = append(written, name)
			mu.Unlock()
			if i%4 == 3 {
				ents, err := os.ReadDir(dir)
				if err != nil {
					fail(fmt.Errorf("list after %s: %w", name, err))
					return
				}
				if len(ents) != i+1 {
					fail(fmt.Errorf("list after %s: %d entries, want %d", name, len(ents), i+1))
					return
				}
			}
		}
	}()
	progress := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(written), failure
	}
	waitMore := func(n int, what string) {
		t.Helper()
		await.Until(t, 60*time.Second, what, func() bool {
			got, err := progress()
			if err != nil {
				t.Fatalf("the mount failed a call: %v", err)
			}
			return got >= n
		})
	}
	waitMore(10, "files before the first kill")
	for round := range 2 {
		leader := c.MetaLeader(t)
		n, _ := progress()
		killed := time.Now()
		leader.Kill(t)
		waitMore(n+10, "files after the kill")
		t.Logf("round %d: killed meta leader %s; 10 more files written and listed %v later", round, leader.Addr, time.Since(killed).Round(time.Millisecond))
		leader.Start(t)
	}
	close(stop)
	<-done
	if _, err := progress(); err != nil {
		t.Fatalf("the mount failed a call: %v", err)
	}
	mu.Lock()
	names := append([]string(nil), written...)
	mu.Unlock()
	for i, name := range names {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != string(chunktest.Data(uint64(i), 4096)) {
			t.Fatalf("%s reads back %d bytes, %v", name, len(got), err)
		}
	}
	unmount()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, name := range names {
		if err := c.Check(ctx, "mnt", name, chunktest.Data(uint64(i), 4096)); err != nil {
			t.Errorf("store: %v", err)
		}
	}
}

// TestMountLocksRideThroughMetaLeaderChange: file locks live in the meta
// leader's memory; each mount hands those it holds to the next leader,
// which grants nothing else during its grace. A holds an fcntl write
// lock and a flock on a file, B waits for the fcntl lock (F_SETLKW), and
// the leader is killed (kill -9): afterwards B still cannot take either,
// its wait goes on, and A's release wakes it.
func TestMountLocksRideThroughMetaLeaderChange(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	locksRideThrough(t, c, func() (*Proc, func()) {
		leader := c.MetaLeader(t)
		leader.Kill(t)
		killed := time.Now()
		t.Logf("killed meta leader %s", leader.Addr)
		next := c.MetaLeader(t)
		t.Logf("new meta leader %s after %v", next.Addr, time.Since(killed).Round(time.Millisecond))
		return next, func() { leader.Start(t) }
	})
}

// TestMountLocksRideThroughLoneMetaRestart: the same with a meta alone,
// killed (kill -9) and started again on its store. It finds the marker
// its first lock wrote and takes the grace, so A's locks are back before
// B can take them. Before, a lone meta started without a grace and B
// took whichever lock it asked for before A's session was back.
func TestMountLocksRideThroughLoneMetaRestart(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 3})
	locksRideThrough(t, c, func() (*Proc, func()) {
		c.Meta.Kill(t)
		t.Logf("killed meta %s", c.Meta.Addr)
		c.Meta.Start(t)
		return c.Meta, func() {}
	})
}

// locksRideThrough is the body of the tests above: A holds an fcntl write
// lock and a flock, B waits for the fcntl lock (F_SETLKW); then meta goes
// (restart kills it and returns the meta that answers after, and what to
// do at the end); B still cannot take either lock, its wait goes on, and
// A's release wakes it.
func locksRideThrough(t *testing.T, c *Cluster, restart func() (next *Proc, after func())) {
	c.CreateNS(t, "mnt", 2)
	a, _ := mountNS(t, c, c.MetaAddr, "mnt")
	b, _ := mountNS(t, c, c.MetaAddr, "mnt")
	if err := os.WriteFile(filepath.Join(a, "f"), []byte("locked"), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(dir string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, "f"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	fa, fb, fb2 := open(a), open(b), open(b)
	lk := func(typ int16, start, n int64) *syscall.Flock_t {
		return &syscall.Flock_t{Type: typ, Start: start, Len: n}
	}
	if err := syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fb2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("flock on B while A holds it: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- syscall.FcntlFlock(fb.Fd(), syscall.F_SETLKW, lk(syscall.F_WRLCK, 0, 10)) }()
	stillWaiting := func(what string, d time.Duration) {
		t.Helper()
		select {
		case err := <-waited:
			t.Fatalf("%s: B's F_SETLKW returned (%v) while A held the lock", what, err)
		case <-time.After(d):
		}
	}
	stillWaiting("before the kill", time.Second)

	next, after := restart()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(next.logPath)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "lock") || strings.Contains(l, "leading") {
					t.Log(l)
				}
			}
		}
	}()
	// B's calls wait out the new leader's grace, by which time A's locks
	// are back: still refused.
	t0 := time.Now()
	if err := syscall.Flock(int(fb2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Fatalf("flock on B after the leader change (answered after %v), while A holds it: %v", time.Since(t0).Round(time.Millisecond), err)
	}
	if err := syscall.FcntlFlock(fb2.Fd(), syscall.F_SETLK, lk(syscall.F_RDLCK, 50, 10)); err != syscall.EAGAIN && err != syscall.EACCES {
		t.Fatalf("fcntl lock on B after the leader change, while A holds it: %v", err)
	}
	t.Logf("B refused %v after the new leader", time.Since(t0).Round(time.Millisecond))
	stillWaiting("after the leader change", 2*time.Second)

	if err := syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_UNLCK, 0, 100)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("B's F_SETLKW: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("B's F_SETLKW was not woken by A's release")
	}
	if err := syscall.Flock(int(fa.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(fb2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock on B after A's release: %v", err)
	}
	after()
}

// TestMountCallsInterruptedWithoutMetaLeader: with two of a meta group's
// three members killed, the last has no leader and the mount's calls wait
// for one. A process blocked in such a call gets signals (the SIGCHLD of
// a killed child is one, and it fails the leader-change test above when
// it lands on the thread in the call): the kernel interrupts the request,
// and the answer must be EINTR (the process's call is failed with it or
// restarted), never the last attempt's error as EIO.
func TestMountCallsInterruptedWithoutMetaLeader(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "mnt", 2)
	dir, _ := mountNS(t, c, c.MetaAddr, "mnt")
	if err := os.WriteFile(filepath.Join(dir, "old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	leader := c.MetaLeader(t)
	var killed []*Proc
	for _, p := range c.Metas {
		if p == leader || len(killed) == 0 {
			p.Kill(t)
			killed = append(killed, p)
		}
	}
	if len(killed) == 1 { // the leader was the first
		for _, p := range c.Metas {
			if p != leader {
				p.Kill(t)
				killed = append(killed, p)
				break
			}
		}
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"open O_CREAT", func() error {
			fd, err := syscall.Open(filepath.Join(dir, "new"), syscall.O_CREAT|syscall.O_WRONLY, 0o644)
			if err == nil {
				syscall.Close(fd)
			}
			return err
		}},
		{"mkdir", func() error { return syscall.Mkdir(filepath.Join(dir, "sub"), 0o755) }},
		{"unlink", func() error { return syscall.Unlink(filepath.Join(dir, "old")) }},
		{"rename", func() error { return syscall.Rename(filepath.Join(dir, "old"), filepath.Join(dir, "moved")) }},
		{"stat", func() error {
			var st syscall.Stat_t
			return syscall.Stat(filepath.Join(dir, "other"), &st)
		}},
	}
	for _, cl := range calls {
		if err := interrupted(t, cl.call); err != syscall.EINTR {
			t.Errorf("%s interrupted while meta had no leader: %v, want EINTR", cl.name, err)
		}
	}
	for _, p := range killed {
		p.Start(t)
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// interrupted runs call on a thread of its own and signals that thread
// every 50 ms until the call returns, and returns its error. The first
// signals may land before the call reaches the mount, later ones while an
// attempt waits for meta or between attempts (SIGURG: the Go runtime's
// own, handled and harmless).
func interrupted(t *testing.T, call func() error) error {
	t.Helper()
	tid := make(chan int, 1)
	got := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the signals must find this thread in the call
		tid <- syscall.Gettid()
		got <- call()
	}()
	waiter := <-tid
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); {
		select {
		case err := <-got:
			return err
		case <-time.After(50 * time.Millisecond):
		}
		if err := syscall.Tgkill(os.Getpid(), waiter, syscall.SIGURG); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("still blocked after a minute of signals")
	return nil
}
