//go:build linux

package clustertest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/proto/metapb"
)

// Crashes in the middle of encoding (Linux: the moment is found with
// inotify).

// midEncode waits until some data server starts receiving a shard or an
// index of an encode (creates its temporary file) and returns that
// server, or nil if none did within d. It watches the data directories
// (inotify) rather than polling them: the file lives only as long as
// one shard takes to arrive, a few milliseconds.
func midEncode(t *testing.T, c *Cluster, d time.Duration) *Proc {
	t.Helper()
	const pattern = "*.ec*.tmp*" // writeFileSynced's temporary names
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Go's poller serves it, deadlines work
	defer f.Close()
	byWatch := map[int32]*Proc{}
	for _, p := range c.Chunks {
		wd, err := syscall.InotifyAddWatch(fd, p.Dir, syscall.IN_CREATE)
		if err != nil {
			t.Fatal(err)
		}
		byWatch[int32(wd)] = p
	}
	// One created before the watches were set.
	for _, p := range c.Chunks {
		if names, _ := filepath.Glob(filepath.Join(p.Dir, pattern)); len(names) > 0 {
			return p
		}
	}
	if err := f.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			return nil // the deadline
		}
		// Events: wd, mask, cookie, len (u32 each), then len bytes of
		// NUL-padded name.
		for b := buf[:n]; len(b) >= syscall.SizeofInotifyEvent; {
			wd := int32(binary.NativeEndian.Uint32(b))
			nameLen := int(binary.NativeEndian.Uint32(b[12:]))
			name := string(bytes.TrimRight(b[syscall.SizeofInotifyEvent:syscall.SizeofInotifyEvent+nameLen], "\x00"))
			if ok, _ := filepath.Match(pattern, name); ok && byWatch[wd] != nil {
				return byWatch[wd]
			}
			b = b[syscall.SizeofInotifyEvent+nameLen:]
		}
	}
}

// TestECEncodeCrash: meta, and then a data server receiving shards, are
// killed (-9) in the middle of encoding sealed volumes. After each, every
// file still reads back byte-exact, the encodes are retried and complete,
// and no volume is recorded encoded before all its shards are durable:
// every encoded volume ends whole, with its shards on distinct servers.
func TestECEncodeCrash(t *testing.T) {
	c, files := ecCluster(t, 8)
	var ids []uint32
	for _, v := range c.Status(t).Volumes {
		ids = append(ids, v.Volume.Id)
	}
	if _, err := c.MC.Assign(bg, &metapb.AssignRequest{Ns: "cold", Full: ids}); err != nil {
		t.Fatal(err)
	}
	// Meta, mid-encode.
	if p := midEncode(t, c, 60*time.Second); p == nil {
		t.Fatal("no encode seen in progress")
	}
	c.Meta.Kill(t)
	t.Log("meta killed in the middle of an encode")
	c.Meta.Start(t)
	waitEncoded(t, c, ids, "", 180*time.Second)
	checkAll(t, c, "cold", files)

	// A data server receiving a shard, mid-encode: more files, new
	// volumes, sealed.
	more := map[string][]byte{}
	for i := range 40 {
		p := fmt.Sprintf("g%03d", i)
		more[p] = chunktest.Data(uint64(i)+5000, 20<<10+(i*7919)%(200<<10))
		if _, err := c.Client.Put(bg, "cold", p, bytes.NewReader(more[p]), client.PutOptions{SizeHint: int64(len(more[p]))}); err != nil {
			t.Fatal(err)
		}
	}
	var fresh []uint32
	for _, v := range c.Status(t).Volumes {
		if !slices.Contains(ids, v.Volume.Id) {
			fresh = append(fresh, v.Volume.Id)
		}
	}
	if _, err := c.MC.Assign(bg, &metapb.AssignRequest{Ns: "cold", Full: fresh}); err != nil {
		t.Fatal(err)
	}
	victim := midEncode(t, c, 60*time.Second)
	if victim == nil {
		t.Fatal("no encode seen in progress")
	}
	gone := victim.ID(t)
	victim.Kill(t)
	t.Logf("data server %s killed while it received a shard", victim.Name)
	checkAll(t, c, "cold", files)
	checkAll(t, c, "cold", more)
	// Meta finds it dead, rebuilds its shards elsewhere, re-replicates
	// or encodes the volumes it held replicas of.
	waitEncoded(t, c, append(ids, fresh...), gone, 240*time.Second)
	victim.Start(t)
	c.WaitAlive(t, victim)
	checkAll(t, c, "cold", files)
	checkAll(t, c, "cold", more)
	for _, v := range c.Status(t).Volumes {
		if v.Volume.Ec == nil {
			continue
		}
		if got := distinct(v.Volume.Ec.ShardServerIds); got != int(v.Volume.Ec.K+v.Volume.Ec.M) {
			t.Errorf("volume %d: shards on %d distinct servers", v.Volume.Id, got)
		}
	}
	// The victim's cut-short upload left no temporary file behind.
	if names, _ := filepath.Glob(filepath.Join(victim.Dir, "*.ec*.tmp*")); len(names) > 0 {
		t.Errorf("temporary shard files left after a restart: %v", names)
	}
}
