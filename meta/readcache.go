package meta

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// readCache keeps recently read values of the store in memory, so that a
// warm Resolve (namespace, one dirent per level, inode, extents) costs map
// lookups instead of Pebble seeks and opens no iterator at all.
//
// Coherence rests on gen, bumped to odd before a batch reaches the memtable
// and to even once every key the batch wrote has been dropped from the
// cache. A reader takes a view at an even gen and trusts the cache only
// while gen has not moved: then the cache holds exactly the state the view
// would read. Inserts carry the same check under the shard lock, so a value
// read before a write can never land after that write's invalidation.
type readCache struct {
	gen    atomic.Uint64
	seed   maphash.Seed
	shards [32]cacheShard
	max    int   // entries per shard
	maxB   int64 // bytes per shard
}

type cacheShard struct {
	mu    sync.Mutex
	m     map[string]cacheEntry
	bytes int64 // size of m by entrySize
}

// cacheEntry is a value, or a proven absence (absent), or for a scan entry
// (extents) the values in key order.
type cacheEntry struct {
	val    []byte
	vals   [][]byte
	absent bool
}

// entryOverhead approximates what a map slot, the key's string header and
// the entry's slices cost beyond their bytes.
const entryOverhead = 96

func entrySize(k string, e cacheEntry) int64 {
	n := int64(len(k) + len(e.val) + entryOverhead)
	for _, v := range e.vals {
		n += int64(len(v)) + 24
	}
	return n
}

func newReadCache(entries int, bytes int64) *readCache {
	c := &readCache{seed: maphash.MakeSeed(), max: max(1, entries/32), maxB: max(1, bytes/32)}
	for i := range c.shards {
		c.shards[i].m = map[string]cacheEntry{}
	}
	return c
}

func (c *readCache) shard(k []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, k)%uint64(len(c.shards))]
}

// snapshot returns the gen a view may trust the cache at, and false while a
// batch is being applied.
func (c *readCache) snapshot() (uint64, bool) {
	g := c.gen.Load()
	return g, g%2 == 0
}

func (c *readCache) get(gen uint64, k []byte) (cacheEntry, bool) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.gen.Load() != gen {
		return cacheEntry{}, false
	}
	e, ok := s.m[string(k)]
	return e, ok
}

func (c *readCache) put(gen uint64, k []byte, e cacheEntry) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	size := entrySize(string(k), e)
	if size > c.maxB/4 {
		return // one entry may not take a quarter of its shard
	}
	if old, ok := s.m[string(k)]; ok {
		s.bytes -= entrySize(string(k), old)
		delete(s.m, string(k))
	}
	if len(s.m) >= c.max || s.bytes+size > c.maxB {
		s.evict(c.max/10+1, c.maxB-c.maxB/10-size)
	}
	s.m[string(k)] = e
	s.bytes += size
}

// evict drops at least n entries, and more until the shard holds at most
// bytes. Map order makes this a random sample.
func (s *cacheShard) evict(n int, bytes int64) {
	for k, e := range s.m {
		if n <= 0 && s.bytes <= bytes {
			return
		}
		delete(s.m, k)
		s.bytes -= entrySize(k, e)
		n--
	}
}

// beginWrite is called, under the apply mutex, before a batch is applied.
func (c *readCache) beginWrite() { c.gen.Add(1) }

// endWrite brings every key the batch wrote up to date in the cache, drops
// the scan entry covering it, then lets readers back in. A key already
// cached takes its new value (write-through) rather than being dropped:
// the counters every create bumps (next inode, event sequence) and a
// directory's entries stay warm for the next mutation instead of costing
// it a Pebble lookup each. Keys not cached stay out, so a write never
// fills the cache with what nobody reads.
func (c *readCache) endWrite(b *pebble.Batch) {
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil || !ok {
			if err != nil {
				c.clear() // cannot tell what changed: forget everything
			}
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			c.update(k, cacheEntry{val: v}, true)
		case pebble.InternalKeyKindDelete:
			c.update(k, cacheEntry{absent: true}, false)
		default:
			c.drop(k)
		}
		if scan := scanPrefix(k); scan != nil {
			c.drop(scan)
		}
	}
	c.gen.Add(1)
}

// update replaces the entry of k, if it has one; clone says that e.val
// is the batch's and must be copied to be kept (most keys a batch writes
// are not cached: the copy is made only for those that are).
func (c *readCache) update(k []byte, e cacheEntry, clone bool) {
	s := c.shard(k)
	s.mu.Lock()
	if old, ok := s.m[string(k)]; ok {
		if clone {
			e.val = bytes.Clone(e.val)
		}
		s.bytes += entrySize(string(k), e) - entrySize(string(k), old)
		s.m[string(k)] = e
		if s.bytes > c.maxB {
			s.evict(0, c.maxB-c.maxB/10)
		}
	}
	s.mu.Unlock()
}

func (c *readCache) drop(k []byte) {
	s := c.shard(k)
	s.mu.Lock()
	if old, ok := s.m[string(k)]; ok {
		s.bytes -= entrySize(string(k), old)
		delete(s.m, string(k))
	}
	s.mu.Unlock()
}

func (c *readCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.m = map[string]cacheEntry{}
		s.bytes = 0
		s.mu.Unlock()
	}
}

// scanPrefix is the scan entry a key belongs to: the extents of one inode
// (of one generation of them, extents.go).
func scanPrefix(k []byte) []byte {
	if len(k) > 10 && k[0] == pExtent && k[1] == '/' {
		return k[:10]
	}
	if len(k) > 18 && k[0] == pExtentGen && k[1] == '/' {
		return k[:18]
	}
	return nil
}
