package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
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
	env := append(os.Environ(), "CAIRN_ACCESS_KEY="+servertest.Root, "CAIRN_SECRET_KEY="+servertest.RootSecret, "CAIRN_CA="+srv.CAFile())
	// An admin address that is taken fails the mount before it mounts.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := t.TempDir()
	fail = exec.Command(bin, "mount", "-d", "--meta", srv.Addr("meta"), "--admin", taken.Addr().String(), "docs", busy)
	fail.Env = env
	if out, err := fail.CombinedOutput(); err == nil || !strings.Contains(string(out), "admin listener") {
		syscall.Unmount(busy, syscall.MNT_DETACH)
		t.Fatalf("mount -d with its admin address taken: %v: %s", err, out)
	}

	dir := t.TempDir()
	cmd := exec.Command(bin, "mount", "-d", "--meta", srv.Addr("meta"), "--admin", "127.0.0.1:0", "--pprof", "docs", dir)
	cmd.Env = env
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
	// The daemon serves its heap profile (the soak takes one, to find
	// what grows).
	ports := listening(t, pid)
	if len(ports) != 1 {
		t.Fatalf("the mount daemon listens on ports %v, want its admin port alone", ports)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("the mount's heap profile: %s, %d bytes", resp.Status, len(body))
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

// listening returns the TCP ports process pid listens on (IPv4): the
// sockets among its descriptors that /proc/net/tcp shows in state LISTEN.
func listening(t *testing.T, pid int) []int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(l, "socket:["); ok {
			mine[strings.TrimSuffix(inode, "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ports []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		x := strings.Fields(sc.Text())
		if len(x) < 10 || x[3] != "0A" || !mine[x[9]] {
			continue
		}
		_, port, _ := strings.Cut(x[1], ":")
		p, err := strconv.ParseInt(port, 16, 32)
		if err == nil {
			ports = append(ports, int(p))
		}
	}
	return ports
}
