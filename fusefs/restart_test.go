package fusefs_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// freeAddr returns a loopback address no one listens on (yet).
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

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
