package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cairn/cli"
	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// TestMountCommand runs `cairn mount` in-process against a real store,
// found as users find it (the gateway at --endpoint says where meta is):
// every visible namespace appears as a directory, a file written through
// it reaches the store, and cancelling the command (Ctrl-C) unmounts.
func TestMountCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	srv := servertest.Start(t, nil)
	t.Setenv("CAIRN_ROOT_USER", servertest.Root)
	t.Setenv("CAIRN_ROOT_PASSWORD", servertest.RootSecret)
	t.Setenv("CAIRN_ACCESS_KEY", "")
	t.Setenv("CAIRN_META", "")
	t.Setenv("CAIRN_CA", srv.CAFile())
	if _, err := srv.Client().CreateNamespace(context.Background(), "docs", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		root := cli.Root()
		root.SetArgs([]string{"mount", "--endpoint", srv.URL(), "--cache-size", "16MiB", dir})
		done <- root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	await.Until(t, 10*time.Second, "the namespace directory", func() bool {
		_, err := os.Stat(filepath.Join(dir, "docs"))
		return err == nil
	})
	if err := os.WriteFile(filepath.Join(dir, "docs", "readme.txt"), []byte("via mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := srv.Client().StatFresh(context.Background(), "docs", "readme.txt")
	if err != nil || f.Size() != 9 {
		t.Fatalf("store sees %v, %v", f, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mount returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mount did not return after cancel")
	}
	if _, err := os.Stat(filepath.Join(dir, "docs")); !os.IsNotExist(err) {
		t.Fatalf("still mounted after cancel: %v", err)
	}
}
