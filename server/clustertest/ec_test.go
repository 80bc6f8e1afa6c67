package clustertest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/proto/metapb"
)

// ecCluster starts n data servers labelled media=hdd with small volumes
// (so that a few MiB of files seal several), a namespace "cold" of class
// ec-4+2 written with 2 replicas, and writes files into it; it returns the
// files written.
func ecCluster(t *testing.T, n int) (*Cluster, map[string][]byte) {
	c := Start(t, Options{Bin: bin, Servers: n, DeadAfter: 3 * time.Second,
		MetaArgs: []string{"--max-volume-size", "3MiB", "--class", "cold=ec:4+2,media=hdd", "--ec-cell", "256KiB"},
		Labels:   func(i int) []string { return []string{"media=hdd", fmt.Sprintf("rack=r%d", i%4)} }})
	if _, err := c.MC.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "cold", Owner: Root, Replication: 2, StorageClass: "cold"}); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i := range 60 {
		p := fmt.Sprintf("f%03d", i)
		size := 10<<10 + (i*104729)%(300<<10)
		if i%17 == 5 {
			size = 1<<20 + 4321 // two extents: 1 MiB needles cross cells
		}
		files[p] = chunktest.Data(uint64(i)+1000, size)
		if _, err := c.Client.Put(bg, "cold", p, bytes.NewReader(files[p]), client.PutOptions{SizeHint: int64(size)}); err != nil {
			t.Fatal(err)
		}
	}
	return c, files
}

// sealAll marks every volume read-only in meta (as a full one is), so
// that meta encodes them all, and waits until it has.
func sealAll(t *testing.T, c *Cluster) *metapb.ClusterStatusResponse {
	var ids []uint32
	for _, v := range c.Status(t).Volumes {
		ids = append(ids, v.Volume.Id)
	}
	if _, err := c.MC.Assign(bg, &metapb.AssignRequest{Ns: "cold", Full: ids}); err != nil {
		t.Fatal(err)
	}
	var st *metapb.ClusterStatusResponse
	WaitFor(t, 120*time.Second, "every sealed volume to be erasure-coded", func() bool {
		st = c.Status(t)
		for _, v := range st.Volumes {
			if slices.Contains(ids, v.Volume.Id) && (v.Volume.Ec == nil || v.Health != "ok") {
				return false
			}
		}
		return true
	})
	return st
}

// TestErasureCoding: files of an ec class are encoded into 4+2 shards on
// distinct servers once their volumes seal, and read back byte-exact:
// healthy, with a shard corrupted, with 2 servers killed (-9); meta then
// rebuilds the lost shards on the surviving servers (full health again),
// and the replicas are gone from every server.
func TestErasureCoding(t *testing.T) {
	c, files := ecCluster(t, 8)
	st := sealAll(t, c)
	var ecVols []*metapb.Volume
	for _, v := range st.Volumes {
		if v.Volume.Ec != nil {
			ecVols = append(ecVols, v.Volume)
			if got := distinct(v.Volume.Ec.ShardServerIds); got != 6 {
				t.Fatalf("volume %d: shards on %d distinct servers, want 6", v.Volume.Id, got)
			}
		}
	}
	t.Logf("%d volumes encoded (%d encodes reported)", len(ecVols), st.EcEncoded)
	if len(ecVols) < 2 {
		t.Fatalf("only %d volumes encoded", len(ecVols))
	}
	checkAll(t, c, "cold", files)

	// The replicas are dropped: no data server keeps a .dat of an encoded volume.
	WaitFor(t, 30*time.Second, "the encoded volumes' replicas to be dropped", func() bool {
		for _, p := range c.Chunks {
			for _, v := range ecVols {
				if _, err := os.Stat(filepath.Join(p.Dir, fmt.Sprint(v.Id)+".dat")); err == nil {
					return false
				}
			}
		}
		return true
	})

	// Space: bytes of shard files (and needle indexes) per byte encoded.
	// A volume's last row of K cells is padded, which small test volumes
	// (3 MiB, 256 KiB cells) feel and 8 GiB ones do not: the code's own
	// figure is disk bytes per padded data byte.
	var data, padded, disk int64
	for _, v := range ecVols {
		row := int64(v.Ec.K) * int64(v.Ec.Cell)
		data += int64(v.Ec.Size)
		padded += (int64(v.Ec.Size) + row - 1) / row * row
		for _, p := range c.Chunks {
			names, _ := filepath.Glob(filepath.Join(p.Dir, fmt.Sprintf("%d.ec*", v.Id)))
			for _, n := range names {
				if fi, err := os.Stat(n); err == nil {
					disk += fi.Size()
				}
			}
		}
	}
	t.Logf("space: %d bytes of shards and indexes for %d bytes of volumes (%d padded to whole rows): %.3fx per padded byte, %.3fx per byte (4+2; the 2 replicas were 2x)",
		disk, data, padded, float64(disk)/float64(padded), float64(disk)/float64(data))
	if r := float64(disk) / float64(padded); r > 1.52 {
		t.Errorf("shards take %.3fx the padded volumes' bytes, want 1.5x", r)
	}

	// A corrupt data shard: reads rebuild around it, the checksum decides.
	v0 := ecVols[0]
	holder := c.Find(v0.Ec.ShardServers[0])
	shard := filepath.Join(holder.Dir, fmt.Sprintf("%d.ec00", v0.Id))
	f, err := os.OpenFile(shard, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Damage 4 KB of every 8 KB of the shard's data, so that whatever
	// records packing put where, each live one in this shard (10 KB or
	// more) is hit: with fixed offsets near the start, or 4 KB every
	// 60 KB, the damage could miss every record a read meets (the test
	// then timed out waiting for a rebuild, with no corruption logged).
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xA5}, 4096)
	for off := int64(32 + 200); off+int64(len(junk)) <= fi.Size(); off += 8 << 10 {
		if _, err := f.WriteAt(junk, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	checkAll(t, c, "cold", files)
	// The read that met the damage had the shard scrubbed: it is dropped
	// and meta rebuilds it, whole again.
	WaitFor(t, 60*time.Second, "the corrupt shard to be rebuilt", func() bool {
		st = c.Status(t)
		if st.EcRebuilt == 0 {
			checkAll(t, c, "cold", files) // reads that meet the damage report it
		}
		for _, v := range st.Volumes {
			if v.Volume.Id == v0.Id {
				return st.EcRebuilt >= 1 && v.Health == "ok"
			}
		}
		return false
	})
	st = c.Status(t)
	for _, v := range st.Volumes {
		if v.Volume.Id == v0.Id {
			v0 = v.Volume
		}
	}
	shard = filepath.Join(c.Find(v0.Ec.ShardServers[0]).Dir, fmt.Sprintf("%d.ec00", v0.Id))
	if b, err := os.ReadFile(shard); err != nil || bytes.Contains(b, junk) {
		t.Fatalf("shard 0 of volume %d not rebuilt whole (err %v)", v0.Id, err)
	}
	t.Logf("corrupt shard rebuilt (%d shards rebuilt)", st.EcRebuilt)

	// Kill -9 two servers that hold shards: every byte still reads.
	victims := []*Proc{c.Find(v0.Ec.ShardServers[1]), c.Find(v0.Ec.ShardServers[4])}
	var gone []string
	for _, p := range victims {
		gone = append(gone, p.ID(t))
		p.Kill(t)
	}
	killed := time.Now()
	checkAll(t, c, "cold", files)
	t.Logf("all %d files read back with 2 of 8 servers killed", len(files))

	// Meta rebuilds the dead servers' shards elsewhere.
	WaitFor(t, 180*time.Second, "lost shards to be rebuilt", func() bool {
		st = c.Status(t)
		for _, v := range st.Volumes {
			if v.Volume.Ec == nil {
				continue
			}
			if v.Health != "ok" {
				return false
			}
			for _, id := range v.Volume.Ec.ShardServerIds {
				if slices.Contains(gone, id) {
					return false
				}
			}
		}
		return true
	})
	t.Logf("full shard health %v after the kill; %d shards rebuilt", time.Since(killed).Round(time.Millisecond), st.EcRebuilt)
	checkAll(t, c, "cold", files)
	out := c.Admin(t, "status")
	if !bytes.Contains([]byte(out), []byte("SHARD HEALTH")) {
		t.Errorf("admin status shows no shard health:\n%s", out)
	}
}

func distinct(ids []string) int {
	seen := map[string]bool{}
	for _, id := range ids {
		if id != "" {
			seen[id] = true
		}
	}
	return len(seen)
}

// TestECStaleShards: a data server holding shards is killed (-9), meta
// rebuilds its shards on the others, and the server comes back with its
// old shard files: once meta has the rebuilt shards confirmed by their new
// holders, it names the old ones in the heartbeat answer and the server
// deletes them. Every file reads back throughout.
func TestECStaleShards(t *testing.T) {
	c, files := ecCluster(t, 7)
	st := sealAll(t, c)
	v0 := st.Volumes[0].Volume
	for _, v := range st.Volumes {
		if v.Volume.Ec != nil {
			v0 = v.Volume
			break
		}
	}
	victim := c.Find(v0.Ec.ShardServers[1])
	id := victim.ID(t)
	// The shard files the victim holds now, for every encoded volume.
	var held []string
	for _, v := range st.Volumes {
		if v.Volume.Ec == nil {
			continue
		}
		for i, sid := range v.Volume.Ec.ShardServerIds {
			if sid == id {
				held = append(held, filepath.Join(victim.Dir, fmt.Sprintf("%d.ec%02d", v.Volume.Id, i)))
			}
		}
	}
	for _, p := range held {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("shard file of the victim: %v", err)
		}
	}
	victim.Kill(t)
	WaitFor(t, 180*time.Second, "the killed server's shards to be rebuilt elsewhere", func() bool {
		st = c.Status(t)
		for _, v := range st.Volumes {
			if v.Volume.Ec != nil && (v.Health != "ok" || slices.Contains(v.Volume.Ec.ShardServerIds, id)) {
				return false
			}
		}
		return true
	})
	checkAll(t, c, "cold", files)
	victim.Start(t)
	c.WaitAlive(t, victim)
	WaitFor(t, 60*time.Second, fmt.Sprintf("the %d stale shard files to be deleted", len(held)), func() bool {
		for _, p := range held {
			if _, err := os.Stat(p); err == nil {
				return false
			}
		}
		return true
	})
	t.Logf("%d stale shard files deleted after the server came back", len(held))
	checkAll(t, c, "cold", files)
	for _, v := range c.Status(t).Volumes {
		if v.Volume.Ec != nil && v.Health != "ok" {
			t.Errorf("volume %d: %s after the stale shards went", v.Volume.Id, v.Health)
		}
	}
}

// shardFileBytes is the bytes of every current shard file on the cluster's
// data servers.
func shardFileBytes(c *Cluster) int64 {
	var n int64
	for _, p := range c.Chunks {
		names, _ := filepath.Glob(filepath.Join(p.Dir, "*.ec[0-9][0-9]"))
		for _, name := range names {
			if fi, err := os.Stat(name); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// TestECCompaction: most files of an erasure-coded namespace are deleted;
// the collector deletes their needles on the shard servers, meta has the
// volumes with much deleted encoded again without them (compaction, a
// staged generation, then the switch), the shard files shrink, and every
// file left reads back byte-exact.
func TestECCompaction(t *testing.T) {
	c, files := ecCluster(t, 6)
	st := sealAll(t, c)
	gens := map[uint32]uint64{}
	for _, v := range st.Volumes {
		if v.Volume.Ec != nil {
			gens[v.Volume.Id] = v.Volume.Generation
		}
	}
	before := shardFileBytes(c)
	kept := map[string][]byte{}
	for p, data := range files {
		if p[len(p)-1]%3 == 0 {
			kept[p] = data
			continue
		}
		if err := c.Client.Delete(bg, "cold", p, false, ""); err != nil {
			t.Fatal(err)
		}
	}
	WaitFor(t, 240*time.Second, "encoded volumes to be compacted", func() bool {
		compacted := 0
		for _, v := range c.Status(t).Volumes {
			if g, ok := gens[v.Volume.Id]; ok && v.Volume.Generation > g && v.Health == "ok" {
				compacted++
			}
		}
		return compacted*2 >= len(gens) && shardFileBytes(c) < before*7/10
	})
	after := shardFileBytes(c)
	t.Logf("shard files: %d bytes before the deletes, %d after compaction (%d of %d files kept)", before, after, len(kept), len(files))
	checkAll(t, c, "cold", kept)
	for p := range files {
		if _, ok := kept[p]; !ok {
			if _, err := c.Client.Stat(bg, "cold", p); err == nil {
				t.Fatalf("deleted file %s still there", p)
			}
		}
	}
}

// waitEncoded waits until every volume in ids is recorded erasure-coded
// and whole (every shard ok), none of its shards on the server gone (a
// killed one: its shards rebuilt elsewhere).
func waitEncoded(t *testing.T, c *Cluster, ids []uint32, gone string, d time.Duration) {
	var st *metapb.ClusterStatusResponse
	defer func() {
		if t.Failed() && st != nil {
			dumpEC(t, st)
		}
	}()
	WaitFor(t, d, "every sealed volume to be erasure-coded and whole", func() bool {
		st = c.Status(t)
		for _, v := range st.Volumes {
			if !slices.Contains(ids, v.Volume.Id) {
				continue
			}
			if v.Volume.Ec == nil || v.Health != "ok" || gone != "" && slices.Contains(v.Volume.Ec.ShardServerIds, gone) {
				return false
			}
		}
		return true
	})
}

// dumpEC logs what meta says of every volume and server: on a timed-out
// wait, which volume is not whole and why.
func dumpEC(t *testing.T, st *metapb.ClusterStatusResponse) {
	t.Helper()
	for _, s := range st.Servers {
		t.Logf("server %s %s alive=%v", s.Id, s.Addr, s.Alive)
	}
	for _, v := range st.Volumes {
		if v.Volume.Ec == nil {
			t.Logf("volume %d: replicated on %v (ids %v), read-only %v, class %q, health %s", v.Volume.Id, v.Volume.Servers, v.Volume.ServerIds, v.Volume.ReadOnly, v.Volume.StorageClass, v.Health)
			continue
		}
		t.Logf("volume %d gen %d: %s, shards %v on %v", v.Volume.Id, v.Volume.Generation, v.Health, v.ShardHealth, v.Volume.Ec.ShardServerIds)
	}
	t.Logf("encoded %d, rebuilt %d, repairs %v", st.EcEncoded, st.EcRebuilt, st.Repairs)
}
