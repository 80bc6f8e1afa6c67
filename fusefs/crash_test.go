package fusefs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cairn"
	"cairn/api"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/server/servertest"
)

// TestMain doubles as the mount process of TestCrashRemount: with
// CAIRN_TEST_MOUNT=meta-addr,dir it mounts namespace "data" and serves
// until killed.
func TestMain(m *testing.M) {
	if v := os.Getenv("CAIRN_TEST_MOUNT"); v != "" {
		serveChild(v)
		return
	}
	if os.Getenv("CAIRN_TEST_SYSCALL") != "" { // TestSyscalls' child
		os.Exit(syscallChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func serveChild(v string) {
	i := bytes.IndexByte([]byte(v), ',')
	tlsCfg, err := api.TLSConfig() // $CAIRN_CA, set by the parent
	if err != nil {
		panic(err)
	}
	mc, _, err := meta.Dial(v[:i], meta.DialTLS(tlsCfg), meta.WithUser(servertest.Root, servertest.RootSecret), fusefs.CountCalls())
	if err != nil {
		panic(err)
	}
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, tlsCfg) }, NoWatch: true, CacheEntries: -1})
	if err != nil {
		panic(err)
	}
	m, err := fusefs.New(fusefs.Config{Meta: mc, Client: cl, Namespace: "data", Mountpoint: v[i+1:]})
	if err != nil {
		panic(err)
	}
	m.Wait()
}

func writeSynced(t *testing.T, p string, data []byte) {
	t.Helper()
	f, err := os.Create(p)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
}

func mounted(dir string) bool {
	var st, parent syscall.Stat_t
	return syscall.Stat(dir, &st) == nil && syscall.Stat(filepath.Dir(dir), &parent) == nil && st.Dev != parent.Dev
}

// TestCrashRemount kills the mount process with SIGKILL in the middle of
// writing a file, remounts on the same directory and checks that the
// store is as the last commits left it: committed files intact, the file
// being rewritten still its old self, and the mount fully usable.
func TestCrashRemount(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	srv := store(t)
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "CAIRN_TEST_MOUNT="+srv.Addr("meta")+","+dir, "CAIRN_CA="+srv.CAFile())
	child.Stderr = os.Stderr
	must(t, child.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			child.Process.Kill()
		}
		child.Wait()
		syscall.Unmount(dir, syscall.MNT_DETACH) // whatever the test left
	})
	await.Until(t, 10*time.Second, "the child's mount", func() bool { return mounted(dir) })

	// Durable is what fsync returned for (close leaves commits behind).
	stable := bytes.Repeat([]byte("committed "), 100_000)
	writeSynced(t, filepath.Join(dir, "stable"), stable)
	writeSynced(t, filepath.Join(dir, "victim"), []byte("old content"))

	f, err := os.OpenFile(filepath.Join(dir, "victim"), os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	piece := bytes.Repeat([]byte("new!"), 64<<10)
	for i := 0; i < 8; i++ { // 2 MiB of unflushed writes
		if _, err := f.Write(piece); err != nil {
			t.Fatal(err)
		}
	}
	must(t, child.Process.Signal(syscall.SIGKILL))
	killed = true
	child.Wait()
	if _, err := f.Write(piece); err == nil {
		t.Error("write after the mount process died succeeded")
	}
	f.Close()

	// Remount on the same directory: the stale mount is cleared first.
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret), fusefs.CountCalls())
	must(t, err)
	defer conn.Close()
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, srv.UserTLS()) }, NoWatch: true, CacheEntries: -1})
	must(t, err)
	defer cl.Close()
	m, err := fusefs.New(fusefs.Config{Meta: mc, Client: cl, Namespace: "data", Mountpoint: dir})
	must(t, err)
	defer func() {
		must(t, m.Unmount())
		m.Wait()
	}()
	if got, err := os.ReadFile(filepath.Join(dir, "stable")); err != nil || !bytes.Equal(got, stable) {
		t.Fatalf("committed file after crash: %d bytes, %v", len(got), err)
	}
	// O_TRUNC committed an empty file before the writes; the writes were
	// never committed. Either is a state the file really had.
	got, err := os.ReadFile(filepath.Join(dir, "victim"))
	must(t, err)
	if string(got) != "" && string(got) != "old content" {
		t.Fatalf("victim after crash: %d bytes %q...", len(got), got[:min(len(got), 16)])
	}
	must(t, os.WriteFile(filepath.Join(dir, "victim"), []byte("after"), 0o644))
	if s := readFile(t, filepath.Join(dir, "victim")); s != "after" {
		t.Fatalf("write after remount: %q", s)
	}
}
