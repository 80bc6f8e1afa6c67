package chunk

import (
	"bytes"
	"context"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/ec"
	"cairn/internal/await"
	"cairn/volume"
)

// TestECLocalReads: a client on the shard server's host reads a needle
// that lies in one cell of that server's shard through the local path
// (the shard file handed over, read and verified in place), and any other
// needle over HTTP, byte-exact both ways; a needle whose bytes in the
// local shard are damaged is still read right (over HTTP, rebuilt).
func TestECLocalReads(t *testing.T) {
	const size = 155 << 10
	// Default (4 MiB) cells: server 1's shard holds the 14 needles past
	// the first cell, the first of them moved to the cell's start.
	stores, rs, keys, home := ecSetup(t, 40, size, ec.DefaultCell)
	ctx := context.Background()
	var locals []*Remote
	for _, s := range stores {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { s.Run(runCtx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		await.Until(t, 5*time.Second, "the local-read socket", func() bool { return s.localOn.Load() })
	}
	for _, r := range rs {
		locals = append(locals, signed(r.Addr()))
	}
	ev := stores[1].ecVolume(1)
	inCell := func(k uint64) bool {
		loc, _ := stores[1].ecLocate(ev, k)
		rec := loc.Size + 4*((loc.Size+volume.BlockSize-1)/volume.BlockSize)
		return len(ev.layout.Pieces(loc.Data, rec)) == 1
	}
	var local, remote int
	for i, k := range keys {
		want := chunktest.Data(uint64(i), size)
		for j, r := range locals {
			var b bytes.Buffer
			if _, err := r.ReadTo(ctx, 1, k, 0, size, &b); err != nil || !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("needle %d from server %d: err %v, equal %v", k, j, err, bytes.Equal(b.Bytes(), want))
			}
			p := make([]byte, 1000)
			n, isLocal, err := r.ReadLocal(ctx, 1, k, p, 70_000)
			if err != nil || isLocal && (n != len(p) || !bytes.Equal(p, want[70_000:71_000])) {
				t.Fatalf("ReadLocal of needle %d from server %d: n %d, local %v, err %v", k, j, n, isLocal, err)
			}
			// Server 0 encoded the volume and keeps its replica (read-only).
			if wantLocal := j == 0 || j == home[k] && inCell(k); isLocal != wantLocal {
				t.Fatalf("needle %d (home shard %d, in one cell %v) from server %d: local %v", k, home[k], inCell(k), j, isLocal)
			}
			if isLocal {
				local++
			} else {
				remote++
			}
		}
	}
	t.Logf("%d reads local, %d over HTTP", local, remote)
	if local == 0 {
		t.Fatal("no read took the local path")
	}

	// Damage a needle's bytes in its (local) shard: the local read fails
	// its checksums, and the read goes over HTTP, which rebuilds it.
	for i, k := range keys {
		if !inCell(k) || home[k] == 0 {
			continue
		}
		h := home[k]
		e := stores[h].ecVolume(1)
		loc, _ := stores[h].ecLocate(e, k)
		pc := e.layout.Pieces(loc.Data, 1)[0]
		at, err := e.shards[h].s.FileOffset(pc.Off, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writeAt(e.shards[h].f.Name(), bytes.Repeat([]byte{0x5A}, 512), at+100); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := locals[h].ReadTo(ctx, 1, k, 0, size, &b); err != nil || !bytes.Equal(b.Bytes(), chunktest.Data(uint64(i), size)) {
			t.Fatalf("damaged needle %d from its shard's server: err %v", k, err)
		}
		return
	}
	t.Fatal("no needle to damage")
}
