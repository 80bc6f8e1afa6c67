package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// TestMountDaemon runs the real binary's `cairn mount -d`: the command
// returns once the file system is mounted, the mount keeps serving from a
// process of its own, and unmounting it ends that process.
func TestMountDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	bin := filepath.Join(t.TempDir(), "cairn")
	if out, err := exec.Command("go", "build", "-o", bin, "cairn/cmd/cairn").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A child that cannot mount: its reason reaches the caller.
	fail := exec.Command(bin, "mount", "-d", "--endpoint", "http://127.0.0.1:1", "docs", t.TempDir())
	fail.Env = append(os.Environ(), "CAIRN_META=")
	out, err := fail.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the mount process exited: finding meta through the gateway at http://127.0.0.1:1") {
		t.Fatalf("mount -d with no gateway: %v: %s", err, out)
	}

	srv := servertest.Start(t, nil)
	if _, err := srv.Client().CreateNamespace(context.Background(), "docs", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "mount", "-d", "--meta", srv.Addr("meta"), "docs", dir)
	cmd.Env = append(os.Environ(), "CAIRN_ACCESS_KEY="+servertest.Root, "CAIRN_SECRET_KEY="+servertest.RootSecret, "CAIRN_CA="+srv.CAFile())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cairn mount -d: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(stderr.String())
	if m == nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		t.Fatalf("no pid in %q", stderr.String())
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL) // the daemon this test started
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("from the daemon"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := srv.Client().StatFresh(context.Background(), "docs", "note.txt")
	if err != nil || f.Size() != 15 {
		t.Fatalf("store sees %v, %v", f, err)
	}
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	await.Until(t, 10*time.Second, fmt.Sprintf("the mount daemon (pid %d) to exit after umount", pid),
		func() bool { return syscall.Kill(pid, 0) != nil })
}
