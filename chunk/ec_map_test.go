package chunk

import (
	"bytes"
	"os"
	"testing"

	"cairn/chunk/chunktest"
)

// loseShard drops shard i of volume 1 from its server (stores[i]), as a
// lost disk would: reads of its needles are rebuilt from the others.
func loseShard(stores []*Store, i int) {
	s := stores[i]
	s.ec.mu.Lock()
	ev := s.ec.vols[1]
	ls := ev.shards[i]
	delete(ev.shards, i)
	s.ec.mu.Unlock()
	ls.close()
}

// TestECCloseUnmaps: Close gives up every shard file's mapping, unmapped
// at once when no reader lends from it, and when the last loan is
// returned otherwise (a reader never touches unmapped memory). Without
// the unmapping in Close, the mappings outlived the store.
func TestECCloseUnmaps(t *testing.T) {
	const size = 155 << 10
	stores, rs, keys, home := ecSetup(t, 40, size, 1<<20)
	for i, s := range stores {
		if n := s.ec.mapped.Load(); n != 1 {
			t.Fatalf("server %d: %d shard files mapped, want 1", i, n)
		}
	}
	// Degraded reads on server 1 lend from its mapped shard.
	loseShard(stores, 3)
	if n := stores[3].ec.mapped.Load(); n != 0 {
		t.Fatalf("a dropped shard's file is still mapped (%d)", n)
	}
	readLostShard(t, "shard 3 lost", rs[1], keys, size, func(k uint64) int { return home[k] })

	// A loan held across Close keeps its mapping until it is returned.
	ls := stores[1].ecVolume(1).shards[1]
	b, done, ok := ls.s.Lend(0, 4096)
	if !ok {
		t.Fatal("the local shard lends nothing: not mapped")
	}
	want := append([]byte(nil), b...)
	for i, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatalf("close server %d: %v", i, err)
		}
	}
	if n := stores[2].ec.mapped.Load(); n != 0 {
		t.Fatalf("after Close, %d shard files still mapped on a server no reader lends from", n)
	}
	if n := stores[1].ec.mapped.Load(); n != 1 {
		t.Fatalf("after Close, with a loan out: %d mappings, want 1 (kept for the loan)", n)
	}
	if string(b) != string(want) { // touches the mapping: unmapped, this faults
		t.Fatal("lent bytes changed under the loan")
	}
	done()
	if n := stores[1].ec.mapped.Load(); n != 0 {
		t.Fatalf("after the last loan returned, %d shard files still mapped", n)
	}
	// A shard loaded after Close (an upload still in flight) is not kept.
	if err := stores[2].loadEC(1); err == nil || stores[2].ec.mapped.Load() != 0 {
		t.Fatalf("loadEC after Close: %v, %d mapped; want an error and none", err, stores[2].ec.mapped.Load())
	}
}

// TestECTruncatedShard: a local shard file cut short in place under its
// mapping (no writer here does that; a disk tool or an operator may)
// makes a degraded read that lends from it fault (SIGBUS): the read turns
// the fault into a failed shard and rebuilds from the others, instead of
// the server crashing. Without ec.Reader's fault guard the test binary
// dies of "unexpected fault address".
func TestECTruncatedShard(t *testing.T) {
	const size = 155 << 10
	stores, rs, keys, home := ecSetup(t, 40, size, 1<<20)
	loseShard(stores, 3)
	path := ecShardPath(stores[1].cfg.Dir, 1, 1)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	readLostShard(t, "shard 3 lost, shard 1 cut short", rs[1], keys, size, func(k uint64) int { return home[k] })
	// The shard's own needles are rebuilt too (its pread comes short).
	for i, k := range keys {
		if home[k] != 1 {
			continue
		}
		var b bytes.Buffer
		if _, err := rs[1].ReadTo(t.Context(), 1, k, 0, size, &b); err != nil {
			t.Fatalf("needle %d of the truncated shard: %v", k, err)
		}
		if !bytes.Equal(b.Bytes(), chunktest.Data(uint64(i), size)) {
			t.Fatalf("needle %d of the truncated shard: wrong bytes", k)
		}
	}
}
