package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("FUSE is required: %v", err)
	}
	srv := servertest.Start(t, nil)
	if _, err := srv.Client().CreateNamespace(context.Background(), "data", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	return srv
}

// mount mounts ns of srv under a new temporary directory, unmounted when
// the test ends (also when it fails).
func mount(t testing.TB, srv *server.Server, ns string, mod func(*fusefs.Config)) (string, *fusefs.Mount) {
	t.Helper()
	mc, conn, err := meta.Dial(srv.Addr("meta"), fusefs.CountCalls())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Config{
		Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemote(a) }, NoWatch: true, CacheEntries: -1,
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
