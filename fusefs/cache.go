package fusefs

import (
	"container/list"
	"context"
	"sort"
	"sync"
	"time"

	"cairn/proto/metapb"
)

// blockCache holds needle data in blocks of Config.BlockSize, keyed by
// needle and block index. Needles are immutable, so a cached block stays
// right whichever file version, handle or offset asks for it, and it
// survives seeks; a block being fetched is waited for, never fetched twice.
type blockCache struct {
	m    *Mount
	bs   int64
	max  int64
	sem  chan struct{} // bounds background fetches
	disk *diskCache    // the second tier, or nil (diskcache.go)

	mu     sync.Mutex
	used   int64 // the capacity of the blocks' data: the bytes they keep alive
	blocks map[blockKey]*block
	lru    *list.List // of *block, most recent first
}

type blockKey struct {
	vol uint32
	key uint64
	idx int64
}

type block struct {
	k      blockKey
	lo, hi int64 // needle range held
	data   []byte
	done   chan struct{}
	err    error
	elem   *list.Element
}

func newBlockCache(m *Mount, max int64) *blockCache {
	return &blockCache{
		m: m, bs: m.cfg.BlockSize, max: max, sem: make(chan struct{}, m.cfg.Parallel),
		blocks: map[blockKey]*block{}, lru: list.New(),
	}
}

// read fills buf with the committed content at file offset off (holes and
// the range past the last extent read as zeros).
func (c *blockCache) read(ctx context.Context, exts []*metapb.Extent, committed, off int64, buf []byte) error {
	clear(buf)
	end := min(off+int64(len(buf)), committed)
	i := sort.Search(len(exts), func(i int) bool { return int64(exts[i].Offset+exts[i].Length) > off })
	for ; i < len(exts) && int64(exts[i].Offset) < end; i++ {
		e := exts[i]
		lo, hi := max(off, int64(e.Offset)), min(end, int64(e.Offset+e.Length))
		if err := c.readExtent(ctx, e, lo, hi, buf[lo-off:hi-off]); err != nil {
			return err
		}
	}
	return nil
}

// slice returns the committed content at [off, off+n) without a copy
// when it lies inside one block of one extent (a kernel readahead request
// aligned to the block size does): the block's bytes are never changed.
func (c *blockCache) slice(ctx context.Context, exts []*metapb.Extent, off, n int64) ([]byte, bool, error) {
	i := sort.Search(len(exts), func(i int) bool { return int64(exts[i].Offset+exts[i].Length) > off })
	if i >= len(exts) || int64(exts[i].Offset) > off || int64(exts[i].Offset+exts[i].Length) < off+n {
		return nil, false, nil
	}
	e := exts[i]
	if c.m.cl.Local(ctx, e.Volume) {
		return nil, false, nil // read straight into the caller's buffer
	}
	nlo := int64(e.NeedleOffset) + off - int64(e.Offset)
	idx := nlo / c.bs
	if (nlo+n-1)/c.bs != idx {
		return nil, false, nil
	}
	b, err := c.get(ctx, e.Volume, e.Key, idx, nlo, nlo+n, int64(e.NeedleOffset), int64(e.NeedleOffset+e.Length))
	if err != nil {
		return nil, false, err
	}
	return b.data[nlo-b.lo : nlo-b.lo+n], true, nil
}

// readExtent copies file range [lo, hi) of extent e into dst.
func (c *blockCache) readExtent(ctx context.Context, e *metapb.Extent, lo, hi int64, dst []byte) error {
	nlo := int64(e.NeedleOffset) + lo - int64(e.Offset)
	nhi := nlo + hi - lo
	if c.m.cl.Local(ctx, e.Volume) {
		// The volume's file is on this host: read it in place. The
		// kernel's page cache of that file is the cache.
		if o := opOf(ctx); o != nil {
			o.Data.Add(1)
		}
		return retry(ctx, func() error { return c.m.cl.ReadNeedleAt(ctx, e.Volume, e.Key, dst, nlo) })
	}
	eLo, eHi := int64(e.NeedleOffset), int64(e.NeedleOffset+e.Length)
	for at := nlo; at < nhi; {
		idx := at / c.bs
		b, err := c.get(ctx, e.Volume, e.Key, idx, at, min(nhi, (idx+1)*c.bs), eLo, eHi)
		if err != nil {
			return err
		}
		to := min(nhi, b.hi)
		copy(dst[at-nlo:to-nlo], b.data[at-b.lo:to-b.lo])
		at = to
	}
	return nil
}

// get returns block idx of a needle holding at least [lo, hi); a fetch
// covers the block clipped to the extent's needle range [eLo, eHi).
func (c *blockCache) get(ctx context.Context, vol uint32, key uint64, idx, lo, hi, eLo, eHi int64) (*block, error) {
	k := blockKey{vol, key, idx}
	for {
		c.mu.Lock()
		b := c.blocks[k]
		if b != nil && b.lo <= lo && b.hi >= hi {
			if b.elem != nil {
				c.lru.MoveToFront(b.elem)
			}
			c.mu.Unlock()
			select {
			case <-b.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if b.err != nil {
				c.drop(b)
				return nil, b.err
			}
			return b, nil
		}
		nb := c.start(k, max(idx*c.bs, eLo), min((idx+1)*c.bs, eHi))
		c.mu.Unlock()
		c.fetch(ctx, nb)
		if nb.err != nil {
			c.drop(nb)
			return nil, nb.err
		}
		return nb, nil
	}
}

// start registers a fetch of [lo, hi) of block k (c.mu held).
func (c *blockCache) start(k blockKey, lo, hi int64) *block {
	if old := c.blocks[k]; old != nil && old.elem != nil {
		c.lru.Remove(old.elem)
		c.used -= int64(cap(old.data))
	}
	b := &block{k: k, lo: lo, hi: hi, done: make(chan struct{})}
	c.blocks[k] = b
	return b
}

func (c *blockCache) fetch(ctx context.Context, b *block) {
	if c.disk != nil {
		if data, lo, ok := c.disk.load(b.k, b.lo, b.hi); ok {
			c.m.stats.Op("disk-cache-hit").Calls.Add(1)
			d := data[b.lo-lo : b.hi-lo]
			if lo != b.lo || len(data) != len(d) {
				d = append(make([]byte, 0, len(d)), d...) // not the rest of a larger block
			}
			c.fetched(b, d, nil)
			return
		}
	}
	if o := opOf(ctx); o != nil {
		o.Data.Add(1)
		if o == c.m.stats.Op("readahead") {
			t0 := time.Now()
			defer func() { o.Nanos.Add(int64(time.Since(t0))); o.Calls.Add(1) }()
		}
	}
	buf := make([]byte, b.hi-b.lo)
	err := retry(ctx, func() error {
		return c.m.cl.ReadNeedleAt(ctx, b.k.vol, b.k.key, buf, b.lo)
	})
	c.fetched(b, buf, err)
}

// fetched completes a fetch of b with data (or err).
func (c *blockCache) fetched(b *block, data []byte, err error) {
	b.data, b.err = data, err
	var evicted []*block
	c.mu.Lock()
	if b.err == nil && c.blocks[b.k] == b {
		b.elem = c.lru.PushFront(b)
		c.used += int64(cap(b.data))
		evicted = c.evictLocked()
	}
	c.mu.Unlock()
	close(b.done)
	c.spill(evicted)
}

func (c *blockCache) drop(b *block) {
	c.mu.Lock()
	if c.blocks[b.k] == b {
		delete(c.blocks, b.k)
	}
	c.mu.Unlock()
}

// prefetch registers the blocks holding file range [from, to) that are
// neither cached nor on their way, and fetches them in file order in the
// background, at most Config.Parallel at a time. Registered blocks are
// waited for by readers, never fetched twice. It returns to (the offset
// up to which fetches are arranged).
func (c *blockCache) prefetch(exts []*metapb.Extent, committed, from, to int64) int64 {
	ctx := c.m.begin(context.Background(), "readahead")
	var todo []*block
	i0 := sort.Search(len(exts), func(i int) bool { return int64(exts[i].Offset+exts[i].Length) > from })
	// Needles of volumes on this host are read in place when asked (the
	// kernel reads ahead in their files): not fetched. Asked before c.mu,
	// as it may ask meta.
	local := map[uint32]bool{}
	for i := i0; i < len(exts) && int64(exts[i].Offset) < to; i++ {
		if v := exts[i].Volume; !local[v] {
			local[v] = c.m.cl.Local(ctx, v)
		}
	}
	c.mu.Lock()
	for i := i0; i < len(exts) && int64(exts[i].Offset) < to; i++ {
		e := exts[i]
		if local[e.Volume] {
			continue
		}
		lo, hi := max(from, int64(e.Offset)), min(to, int64(e.Offset+e.Length))
		eLo, eHi := int64(e.NeedleOffset), int64(e.NeedleOffset+e.Length)
		nlo := eLo + lo - int64(e.Offset)
		nhi := nlo + hi - lo
		for idx := nlo / c.bs; idx*c.bs < nhi; idx++ {
			k := blockKey{e.Volume, e.Key, idx}
			blo, bhi := max(idx*c.bs, eLo), min((idx+1)*c.bs, eHi)
			if b := c.blocks[k]; b != nil && b.lo <= blo && b.hi >= bhi {
				continue
			}
			todo = append(todo, c.start(k, blo, bhi))
		}
	}
	c.mu.Unlock()
	if len(todo) == 0 {
		return to
	}
	go func() {
		for _, b := range todo {
			c.sem <- struct{}{}
			go func() {
				defer func() { <-c.sem }()
				c.fetch(ctx, b)
				if b.err != nil {
					c.drop(b)
				}
			}()
		}
	}()
	return to
}

// insert caches data just stored as needle (vol, key) from offset 0, so
// that reading back what this mount wrote costs no fetch. Each block is a
// copy: data is a piece of an upload buffer (a file's dirty span, a
// group of small files, up to 4 MiB or more), and a block cut from it
// would keep all of that buffer alive after the rest was evicted, bytes
// the cache does not count (a 64 MiB cache was found holding 73 MB).
func (c *blockCache) insert(vol uint32, key uint64, data []byte) {
	type cut struct {
		lo, hi int64
		data   []byte
	}
	cuts := make([]cut, 0, (int64(len(data))+c.bs-1)/c.bs)
	for off := int64(0); off < int64(len(data)); off += c.bs {
		hi := min(off+c.bs, int64(len(data)))
		b := make([]byte, hi-off) // its capacity is its length: what the cache counts
		copy(b, data[off:hi])
		cuts = append(cuts, cut{off, hi, b})
	}
	closed := make(chan struct{})
	close(closed)
	c.mu.Lock()
	for _, u := range cuts {
		k := blockKey{vol, key, u.lo / c.bs}
		if old := c.blocks[k]; old != nil && old.elem != nil {
			c.lru.Remove(old.elem)
			c.used -= int64(cap(old.data))
		}
		b := &block{k: k, lo: u.lo, hi: u.hi, data: u.data, done: closed}
		b.elem = c.lru.PushFront(b)
		c.blocks[k] = b
		c.used += int64(cap(b.data))
	}
	evicted := c.evictLocked()
	c.mu.Unlock()
	c.spill(evicted)
}

// evictLocked drops least recently used blocks until the cache fits and
// returns them for spill (after c.mu is released).
func (c *blockCache) evictLocked() (evicted []*block) {
	for c.used > c.max && c.lru.Len() > 1 {
		old := c.lru.Remove(c.lru.Back()).(*block)
		old.elem = nil
		c.used -= int64(cap(old.data))
		if c.blocks[old.k] == old {
			delete(c.blocks, old.k)
		}
		if c.disk != nil {
			evicted = append(evicted, old)
		}
	}
	return evicted
}

// spill hands evicted blocks to the disk tier, if any. It may wait for
// the disk (a bounded number of writes in flight): a reader that fills
// memory faster than the disk takes blocks is slowed, rather than blocks
// being lost to the second tier.
func (c *blockCache) spill(evicted []*block) {
	for _, b := range evicted {
		c.disk.store(b.k, b.lo, b.data)
	}
}
