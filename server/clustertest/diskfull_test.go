package clustertest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestDataServerDiskFull: one data server's disk fills (its data directory
// is a 24 MiB tmpfs) under a write load. Its volumes refuse writes
// (NoSpace) and turn read-only, meta places no new volume on it, writers
// go on through the other servers,
// every acknowledged file reads back, and the cluster status shows the
// server's volumes refusing writes for want of space.
func TestDataServerDiskFull(t *testing.T) {
	// The small server is alone in its zone: spread puts a replica of
	// every volume on it until it is full, and then must not.
	// Small volumes: new ones are placed all through the test.
	c := Start(t, Options{Bin: bin, Servers: 3, MetaArgs: []string{"--max-volume-size", "4MiB", "--rebalance-on-join=false"}, Labels: func(i int) []string {
		if i == 3 {
			return []string{"zone=b"}
		}
		return []string{"zone=a"}
	}})
	// The next data server (number 3) keeps its data on a small disk of
	// its own. Detached at the end: the process may still hold it.
	dir := filepath.Join(c.Dir, "chunk3")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=24m,mode=0700"); err != nil {
		t.Fatalf("a small disk for the data server (tmpfs; needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	small := c.AddChunk(t)
	smallID := small.ID(t)
	c.CreateNS(t, "full", 2)

	l := startLoad(c, "full", 4)
	server := func(st *metapb.ClusterStatusResponse) *metapb.ClusterServer {
		for _, s := range st.Servers {
			if s.Id == smallID {
				return s
			}
		}
		return nil
	}
	var noSpace uint32
	WaitFor(t, 3*time.Minute, small.Name+" to report volumes out of space", func() bool {
		if s := server(c.Status(t)); s != nil && s.Disk != nil {
			noSpace = s.Disk.NoSpaceVolumes
		}
		return noSpace > 0
	})
	lastVol := uint32(0)
	for _, v := range c.Status(t).Volumes {
		lastVol = max(lastVol, v.Volume.Id)
	}
	// A writer that met the full disk had meta keep the server out of
	// placement for a while (suspect); writers go on past that, while
	// new volumes are placed.
	WaitFor(t, time.Minute, small.Name+" to be alive and not suspect", func() bool {
		s := server(c.Status(t))
		return s != nil && s.Alive && !s.Suspect
	})
	after := l.count()
	await.Until(t, time.Minute, "writes going on after the disk filled", func() bool { return l.count() >= after+60 })
	l.finish()
	t.Logf("%d files acknowledged (%d when the disk was full), %d errors, %d volumes out of space on %s",
		len(l.acked), after, len(l.errs), noSpace, small.Name)
	for i, err := range l.errs {
		if i < 5 {
			t.Errorf("writer error: %v", err)
		}
	}
	checkAll(t, c, "full", l.acked)

	// The status says which server and how many volumes; the volumes on
	// it take no new writes.
	st := c.Status(t)
	s := server(st)
	if s == nil || !s.Alive || s.Disk == nil || s.Disk.NoSpaceVolumes == 0 {
		t.Fatalf("status of the full server: %v", s)
	}
	newer := 0
	for _, v := range st.Volumes {
		if v.Volume.Id > lastVol {
			newer++
			if slices.Contains(v.Volume.ServerIds, smallID) {
				t.Errorf("volume %d was placed on the full server after its disk filled", v.Volume.Id)
			}
		}
	}
	if newer == 0 {
		t.Fatal("no volume was placed after the disk filled: the test proves nothing")
	}
	t.Logf("%d volumes placed after the disk filled, none on it", newer)
	out := c.Admin(t, "status")
	if !strings.Contains(out, smallID) {
		t.Fatalf("cairn admin status does not name the full server:\n%s", out)
	}
	t.Logf("cairn admin status:\n%s", out)
}
