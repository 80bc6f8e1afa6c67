package clustertest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn"
	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/fusefs"
	"cairn/meta"
)

// TestMountRidesThroughRestarts: a FUSE mount of a cluster keeps working
// across a kill -9 and restart of meta alone, then of a data server
// alone. Operations made while meta is down wait for it and succeed (no
// EIO); everything written reads back.
func TestMountRidesThroughRestarts(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 4})
	c.CreateNS(t, "mnt", 3)
	dir, unmount := mountNS(t, c, c.Meta.Addr, "mnt")
	want := map[string][]byte{}
	write := func(name string, size int) {
		t.Helper()
		data := chunktest.Data(uint64(len(want))+90, size)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		want[name] = data
	}
	check := func(when string) {
		t.Helper()
		for name, data := range want {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || string(got) != string(data) {
				t.Fatalf("%s: %s: %d bytes, %v (want %d)", when, name, len(got), err, len(data))
			}
		}
	}
	write("before", 3<<20)
	write("small", 100)

	// Meta down: a create+write+close and a read wait for it.
	c.Meta.Kill(t)
	back := make(chan struct{})
	go func() {
		time.Sleep(time.Second)
		c.Meta.Start(t)
		close(back)
	}()
	write("during-meta", 64<<10)
	check("meta restarting")
	<-back
	write("after-meta", 1<<20)
	check("after meta's restart")

	// A data server holding replicas of everything restarts.
	victim := c.Chunks[0]
	victim.Kill(t)
	write("during-chunk", 2<<20)
	check("data server down")
	victim.Start(t)
	c.WaitAlive(t, victim)
	write("after-chunk", 4096)
	check("after the data server's restart")

	unmount()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, data := range want {
		if err := c.Check(ctx, "mnt", name, data); err != nil {
			t.Errorf("store: %v", err)
		}
	}
}

// mountNS mounts namespace ns of c in a new directory, through meta at
// metaAddr (a list for a group). unmount drains what close left behind
// and unmounts; a test that stops before calling it unmounts at cleanup.
func mountNS(t *testing.T, c *Cluster, metaAddr, ns string) (dir string, unmount func()) {
	t.Helper()
	mc, conn, err := meta.Dial(metaAddr, meta.DialTLS(c.TLS), fusefs.CountCalls())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return c.Remote(a) }, NoWatch: true, CacheEntries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	dir = t.TempDir()
	m, err := fusefs.New(fusefs.Config{Meta: mc, Client: cl, Namespace: ns, Mountpoint: dir})
	if err != nil {
		t.Fatal(err)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			m.Unmount()
			m.Wait()
		}
	})
	return dir, func() {
		t.Helper()
		if err := m.Unmount(); err != nil {
			t.Fatal(err)
		}
		m.Wait()
		unmounted = true
	}
}
