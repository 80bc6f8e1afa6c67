package gateway

import (
	"container/list"
	"sync"
)

// hotCache keeps whole small objects in memory, bounded in bytes, least
// recently used out first. An entry is valid only for the inode version
// it was read at: the metadata cache (kept coherent by meta's change
// stream) supplies the current version, so an overwrite is never served
// stale. Change events also drop entries early to free their memory.
type hotCache struct {
	mu      sync.Mutex
	max     int64
	maxObj  int64
	used    int64
	lru     *list.List // of *hotEntry, front = most recent
	entries map[string]*list.Element
	hits    uint64
	misses  uint64
}

type hotEntry struct {
	key     string
	ino     uint64
	version uint64
	data    []byte
}

func newHotCache(max, maxObj int64) *hotCache {
	if max <= 0 {
		return nil
	}
	return &hotCache{max: max, maxObj: min(maxObj, max), lru: list.New(), entries: map[string]*list.Element{}}
}

func (h *hotCache) fits(size int64) bool { return h != nil && size <= h.maxObj }

func (h *hotCache) get(key string, ino, version uint64) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.entries[key]
	if !ok {
		h.misses++
		return nil, false
	}
	e := el.Value.(*hotEntry)
	if e.ino != ino || e.version != version {
		h.removeLocked(el)
		h.misses++
		return nil, false
	}
	h.lru.MoveToFront(el)
	h.hits++
	return e.data, true
}

func (h *hotCache) put(key string, ino, version uint64, data []byte) {
	if int64(len(data)) > h.maxObj {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.entries[key]; ok {
		h.removeLocked(el)
	}
	e := &hotEntry{key: key, ino: ino, version: version, data: data}
	h.entries[key] = h.lru.PushFront(e)
	h.used += int64(len(data))
	for h.used > h.max {
		h.removeLocked(h.lru.Back())
	}
}

func (h *hotCache) drop(key string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.entries[key]; ok {
		h.removeLocked(el)
	}
}

// dropPrefix drops every entry under a namespace key (or all, for ""):
// a scan of the whole cache, for rare events only.
func (h *hotCache) dropPrefix(prefix string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, el := range h.entries {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			h.removeLocked(el)
		}
	}
}

func (h *hotCache) removeLocked(el *list.Element) {
	e := el.Value.(*hotEntry)
	h.lru.Remove(el)
	delete(h.entries, e.key)
	h.used -= int64(len(e.data))
}

func (h *hotCache) stats() (used int64, entries int, hits, misses uint64) {
	if h == nil {
		return 0, 0, 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.used, len(h.entries), h.hits, h.misses
}
