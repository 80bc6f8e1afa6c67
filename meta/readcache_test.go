package meta

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// TestReadCacheCoherent races resolutions against overwrites and renames
// of the directory above: an answer may be old while a write is in flight,
// but never older than a write that has returned, never a mix of two
// states (which would show as a dangling inode or extents of another
// version), and never an error but NotExist.
func TestReadCacheCoherent(t *testing.T) {
	ts := start(t, nil)
	mkns(t, ts.cl, "coh")
	put(t, ts.cl, "coh", "a/f", 1, 1)
	var acked atomic.Uint64 // size of the newest write that returned
	acked.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := acked.Load()
				r, err := ts.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "coh", Path: "a/f", WantExtents: true})
				if errors.Is(errors.NotExist, err) {
					continue // between the renames
				}
				if err != nil {
					errs <- err
					return
				}
				size := r.Inode.Size
				if size < floor {
					errs <- fmt.Errorf("size %d after write of %d returned", size, floor)
					return
				}
				if len(r.Extents) != 1 || r.Extents[0].Length != size || r.Extents[0].Key != size {
					errs <- fmt.Errorf("inode of size %d with extents %v", size, r.Extents)
					return
				}
			}
		}()
	}
	writes := uint64(400)
	if testing.Short() {
		writes = 100 // the readers spin: on a loaded machine 400 take a minute
	}
	for i := uint64(2); i < writes; i++ {
		put(t, ts.cl, "coh", "a/f", i, i)
		acked.Store(i)
		if i%10 == 0 {
			if _, err := ts.cl.Rename(bg, &metapb.RenameRequest{Ns: "coh", From: "a", To: "b"}); err != nil {
				t.Fatal(err)
			}
			if _, err := ts.cl.Rename(bg, &metapb.RenameRequest{Ns: "coh", From: "b", To: "a"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// TestReadCacheBounded checks that the cache evicts rather than grows.
func TestReadCacheBounded(t *testing.T) {
	c := newReadCache(320, 1<<30)
	gen, _ := c.snapshot()
	for i := range 10_000 {
		c.put(gen, []byte(fmt.Sprint(i)), cacheEntry{absent: true})
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > 320 {
		t.Fatalf("%d entries held, bound 320", n)
	}
}

// TestReadCacheBoundedBytes checks the byte bound: large values (long
// extent lists) evict others instead of growing the cache past it, and the
// shards' byte counts stay exact through updates and drops.
func TestReadCacheBoundedBytes(t *testing.T) {
	const bound = 1 << 20
	c := newReadCache(1_000_000, bound)
	gen, _ := c.snapshot()
	val := make([]byte, 4000)
	for i := range 5_000 {
		k := []byte(fmt.Sprint(i))
		c.put(gen, k, cacheEntry{val: val})
		if i%3 == 0 {
			c.update(k, cacheEntry{vals: [][]byte{val, val[:10]}}, false)
		}
		if i%7 == 0 {
			c.drop(k)
		}
	}
	c.put(gen, []byte("huge"), cacheEntry{val: make([]byte, bound)})
	var held int64
	for i := range c.shards {
		s := &c.shards[i]
		var want int64
		for k, e := range s.m {
			want += entrySize(k, e)
		}
		if s.bytes != want {
			t.Fatalf("shard %d counts %d bytes, holds %d", i, s.bytes, want)
		}
		held += want
	}
	if held > bound {
		t.Fatalf("%d bytes held, bound %d", held, bound)
	}
	if held < bound/4 {
		t.Fatalf("only %d bytes held of %d: evicting far too much", held, bound)
	}
}
