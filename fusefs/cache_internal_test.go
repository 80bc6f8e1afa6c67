package fusefs

import (
	"bytes"
	"testing"
)

// TestBlockCacheCountsWhatItKeeps: blocks cached from an upload (small
// files packed into one 4 MiB buffer, a large dirty span) keep alive only
// the bytes the cache counts, so that its bound is the memory it holds.
// Blocks cut from the upload buffer kept the whole buffer alive.
func TestBlockCacheCountsWhatItKeeps(t *testing.T) {
	m := &Mount{cfg: Config{BlockSize: 1 << 20, Parallel: 1}}
	c := newBlockCache(m, 8<<20)
	group := bytes.Repeat([]byte("g"), 4<<20) // a group upload
	for i := range 3 {
		off := i * (1 << 20)
		c.insert(1, uint64(i), group[off:off+1000])
	}
	span := bytes.Repeat([]byte("s"), 3<<20+512) // one file's dirty span
	c.insert(2, 1, span)
	clear(group)
	clear(span)

	c.mu.Lock()
	defer c.mu.Unlock()
	var kept int64
	for _, b := range c.blocks {
		kept += int64(cap(b.data))
		if b.data[0] == 0 {
			t.Errorf("block %v shares the upload buffer it was cut from", b.k)
		}
	}
	if kept != c.used {
		t.Errorf("the cached blocks keep %d bytes alive, the cache counts %d", kept, c.used)
	}
	if c.used > c.max {
		t.Errorf("the cache holds %d bytes, bound %d", c.used, c.max)
	}
}
