package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// store starts a real store on loopback with namespace "data".
func store(t testing.TB) *server.Server {
	// CAIRN_BENCH_NO_LOCAL measures what local reads bring.
	return startStore(t, os.Getenv("CAIRN_BENCH_NO_LOCAL") != "")
}

// remoteStore is store with local reads off: the mount reads over HTTP and
// through its block cache, as from a data server on another host.
func remoteStore(t testing.TB) *server.Server { return startStore(t, true) }

func startStore(t testing.TB, noLocal bool) *server.Server {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("FUSE is required: %v", err)
	}
	srv := servertest.Start(t, func(c *server.Config) { c.NoLocalReads = noLocal })
	if _, err := srv.Client().CreateNamespace(context.Background(), "data", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	return srv
}

// mount mounts ns of srv under a new temporary directory, unmounted when
// the test ends (also when it fails).
func mount(t testing.TB, srv *server.Server, ns string, mod func(*fusefs.Config)) (string, *fusefs.Mount) {
	t.Helper()
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret), fusefs.CountCalls())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{
		Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, srv.UserTLS()) }, NoWatch: true, CacheEntries: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Other users (the permission tests) must be able to reach the mount.
	os.Chmod(filepath.Dir(dir), 0o755)
	cfg := fusefs.Config{Meta: mc, Client: cl, Namespace: ns, Mountpoint: dir}
	if mod != nil {
		mod(&cfg)
	}
	m, err := fusefs.New(cfg)
	if err != nil {
		cl.Close()
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		// Whatever happened above, leave no mount behind (a no-op when
		// the unmount worked).
		syscall.Unmount(dir, syscall.MNT_DETACH)
		m.Wait()
		cl.Close()
		conn.Close()
	})
	return dir, m
}

// watchdog fails t if it is still running after d: it writes every
// goroutine's stack to the log, then aborts the FUSE connections of dirs
// (fusectl), so that a mount deadlocked inside this very process answers
// its blocked callers with ENOTCONN instead of wedging the test binary
// forever (a process cannot exit while its own threads wait on its own
// mount). Stop it with the returned function.
func watchdog(t *testing.T, d time.Duration, dirs ...string) (stop func()) {
	t.Helper()
	var devs []uint64
	for _, dir := range dirs {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, st.Dev)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-time.After(d):
		}
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 2)
		t.Errorf("still running after %v (deadlock?); goroutines:\n%s", d, b.String())
		const ctl = "/sys/fs/fuse/connections"
		if entries, _ := os.ReadDir(ctl); len(entries) == 0 {
			syscall.Mount("none", ctl, "fusectl", 0, "")
		}
		for _, dev := range devs {
			// A FUSE connection is named by the minor number of its device.
			minor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
			os.WriteFile(fmt.Sprintf("%s/%d/abort", ctl, minor), []byte("1"), 0)
		}
	}()
	return func() { close(done) }
}
