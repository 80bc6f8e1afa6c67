package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/internal/ports"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// freeAddr returns a loopback address no one listens on (yet), one that
// stays free while the store is down (internal/ports).
func freeAddr(t *testing.T) string { return ports.Free(t, "127.0.0.1") }

// restartableStore starts a store with namespace "data" on fixed loopback
// addresses, so that server.Start(cfg) brings it back on the same ones and
// the same data. The caller closes it (last, after its mounts).
func restartableStore(t *testing.T) (server.Config, *server.Server) {
	cfg := server.Defaults()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = freeAddr(t), freeAddr(t), freeAddr(t), "off"
	cfg.S3 = "off"
	cfg.RootUser, cfg.RootPassword = servertest.Root, servertest.RootSecret
	srv, err := server.Start(cfg)
	must(t, err)
	_, err = srv.Client().CreateNamespace(context.Background(), "data", servertest.Root, metapb.Visibility_PRIVATE)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	return cfg, srv
}

// TestServerRestart stops the whole store (meta and data server) under a
// live mount and starts it again on the same addresses and data: the
// mount rides through (calls wait, the session comes back, caches are
// dropped) and reads and writes work again without a remount.
func TestServerRestart(t *testing.T) {
	cfg, srv := restartableStore(t)
	t.Cleanup(func() { srv.Close() }) // after the mount's cleanup (LIFO)
	dir, m := mount(t, srv, "data", nil)
	writeSynced(t, filepath.Join(dir, "before"), []byte("written before the restart"))

	must(t, srv.Close())
	// While the store is down, a read of a warm file waits rather than
	// failing; bring the store back while it waits.
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		s, err := server.Start(cfg)
		if err == nil {
			srv = s
		}
		restarted <- err
	}()
	// A read during the outage waits for the store and succeeds.
	if got := readFile(t, filepath.Join(dir, "before")); got != "written before the restart" {
		t.Fatalf("read during the outage: %q", got)
	}
	// So does a create, write and close; and the close answered is not
	// lost (if its commit was left behind, it waits for meta).
	must(t, os.WriteFile(filepath.Join(dir, "during"), []byte("x"), 0o644))
	must(t, <-restarted)
	await.Until(t, 10*time.Second, "the session to come back", m.Live)
	if got := readFile(t, filepath.Join(dir, "before")); got != "written before the restart" {
		t.Fatalf("after restart: %q", got)
	}
	must(t, os.WriteFile(filepath.Join(dir, "after"), []byte("written after"), 0o644))
	if got := readFile(t, filepath.Join(dir, "after")); got != "written after" {
		t.Fatalf("write after restart: %q", got)
	}
	must(t, m.Unmount()) // drains what close left behind
	m.Wait()
	f, err := srv.Client().StatFresh(context.Background(), "data", "during")
	if err != nil || f.Size() != 1 {
		t.Fatalf("file closed during the outage: %v, %v", f, err)
	}
}

// TestLockWaitInterruptedWhileMetaDown: a process blocked in F_SETLKW
// gets a signal while meta cannot be reached. The kernel then interrupts
// the lock request and restarts the call only if the answer is EINTR; the
// mount answered with the failed attempt's error (EIO), which reached the
// process (the meta group's cluster test saw it when the SIGCHLD of the
// killed leader landed on the waiting thread). The wait must go on, and
// end when meta is back and the lock is free.
func TestLockWaitInterruptedWhileMetaDown(t *testing.T) {
	cfg, srv := restartableStore(t)
	t.Cleanup(func() { srv.Close() })
	a, _ := mount(t, srv, "data", nil)
	b, mb := mount(t, srv, "data", nil)
	defer watchdog(t, 3*60e9, a, b)()
	must(t, os.WriteFile(filepath.Join(a, "f"), []byte("locked"), 0o644))
	fa, fb := openRW(t, a, "f"), openRW(t, b, "f")
	lk := func(typ int16) *syscall.Flock_t { return &syscall.Flock_t{Type: typ, Start: 0, Len: 10} }
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_WRLCK)))

	tid := make(chan int, 1)
	got := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the signal below must find this thread in the call
		tid <- syscall.Gettid()
		got <- syscall.FcntlFlock(fb.Fd(), syscall.F_SETLKW, lk(syscall.F_WRLCK))
	}()
	waiter := <-tid
	notReturned(t, got, "F_SETLKW")
	must(t, srv.Close())
	// Signals while meta is down: each interrupts the request that the
	// kernel restarts (SIGURG: the Go runtime's own, handled and
	// harmless). A second of them covers the mount's retries.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		must(t, syscall.Tgkill(os.Getpid(), waiter, syscall.SIGURG))
		select {
		case err := <-got:
			t.Fatalf("F_SETLKW returned (%v) when interrupted while meta was down", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	srv2, err := server.Start(cfg)
	must(t, err)
	srv = srv2
	await.Until(t, 30*time.Second, "B's session to come back", mb.Live)
	must(t, syscall.FcntlFlock(fa.Fd(), syscall.F_SETLK, lk(syscall.F_UNLCK)))
	select {
	case err := <-got:
		must(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("B's F_SETLKW was not granted after meta came back and A released")
	}
}
