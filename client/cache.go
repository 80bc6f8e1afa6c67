package client

import (
	"context"
	"strings"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"cairn/proto/metapb"
)

// cache holds resolved files and namespace records. Entries are trusted
// without limit while the change stream is healthy (watching) and for ttl
// otherwise. epoch counts invalidations: a resolve that started before an
// invalidation must not insert its (possibly stale) answer.
//
// The client's own writes are cached from meta's answer, which carries the
// sequence number of the write's last event (Inode.seq). Such an entry
// ignores the events at or below that number, its own write's among them,
// so a file just written is read back with no meta call. Meta publishes
// before it answers, so the write's own events often arrive first: recent
// remembers the last events applied, and the answer is cached only if
// none after the write touched its path (lastSeq is the newest applied).
//
// The cache is bounded by entries (max) and by bytes (maxBytes, against
// used: an estimate of what the files, the directory counts and the
// namespace records keep alive, see fileCost). A count alone does not
// bound memory: a file's entry holds its decoded inode and extent list,
// from a few hundred bytes to megabytes for a long extent list.
type cache struct {
	mu        sync.RWMutex
	max       int
	maxBytes  int64
	used      int64
	ttl       time.Duration
	watching  bool
	epoch     uint64
	lastSeq   uint64
	recent    [256]recentEvent     // ring, indexed by seq % len
	files     map[string]fileEntry // key: ns + "\x00" + path
	dirRefs   map[string]int       // key: ns + "\x00" + dir -> cached entries below it
	ns        map[string]nsEntry
	listeners []func(*metapb.Event)
}

type recentEvent struct {
	seq       uint64
	ns, path  string
	namespace bool
}

type fileEntry struct {
	f    *File
	at   time.Time
	seq  uint64 // events at or below seq are already reflected in f
	cost int64  // fileCost, counted in cache.used
}

type nsEntry struct {
	n    *metapb.Namespace
	at   time.Time
	cost int64
}

// What the cache's entries cost besides their strings and their protos'
// contents, on 64-bit Go: a map slot (key header, value, hash bits and
// the map's slack at its load factor) plus the structs allocated per
// entry, rounded up. TestCacheCostEstimate holds the estimate against the
// heap a filled cache really takes.
const (
	fileOverhead    = 96 + int64(unsafe.Sizeof(File{})) + int64(unsafe.Sizeof(metapb.Inode{}))
	extentCost      = int64(unsafe.Sizeof(metapb.Extent{})) // a message, besides its pointer (cap counts those)
	mapItemCost     = 64                                    // an entry of one of an inode's maps
	dirRefCost      = 48                                    // a dirRefs slot, besides its key
	nsEntryOverhead = 96 + int64(unsafe.Sizeof(metapb.Namespace{}))
)

// fileCost estimates the bytes an entry for f under key k keeps alive.
// proto.Size stands for the variable part of the inode (strings, map
// contents, part sizes): its wire form is about as long as their bytes.
func fileCost(k string, f *File) int64 {
	n := fileOverhead + int64(len(k)+len(f.NS)+len(f.Path)) + int64(len(f.Extents))*extentCost + int64(cap(f.Extents))*8
	if ino := f.Inode; ino != nil {
		n += int64(proto.Size(ino))
		n += mapItemCost * int64(len(ino.UserMeta)+len(ino.Headers)+len(ino.Tags)+len(ino.Xattrs))
	}
	return n
}

func nsCost(name string, n *metapb.Namespace) int64 {
	return nsEntryOverhead + int64(len(name)) + int64(proto.Size(n))
}

// newCache returns a cache of at most max files (-1: none cached) and
// about maxBytes bytes (0: no byte bound).
func newCache(max int, maxBytes int64, ttl time.Duration) *cache {
	return &cache{
		max: max, maxBytes: maxBytes, ttl: ttl,
		files:   map[string]fileEntry{},
		dirRefs: map[string]int{},
		ns:      map[string]nsEntry{},
	}
}

func fileKey(ns, p string) string { return ns + "\x00" + p }

func (c *cache) fresh(at time.Time) bool {
	return c.watching || time.Since(at) < c.ttl
}

func (c *cache) epochNow() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch
}

func (c *cache) get(ns, p string) (*File, bool) {
	if c.max < 0 {
		return nil, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.files[fileKey(ns, p)]
	if !ok || !c.fresh(e.at) {
		return nil, false
	}
	return e.f, true
}

func (c *cache) put(f *File, epoch uint64) {
	if c.max < 0 {
		return
	}
	k := fileKey(f.NS, f.Path)
	cost := fileCost(k, f) // outside the lock: it walks the inode
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	c.insertLocked(k, f, 0, cost)
}

// putWritten caches the answer to the client's own write, whose last event
// is seq (see the type's comment).
func (c *cache) putWritten(f *File, seq uint64) {
	if c.max < 0 {
		return
	}
	k := fileKey(f.NS, f.Path)
	cost := fileCost(k, f)
	c.mu.Lock()
	defer c.mu.Unlock()
	// Resolves that started before the write must not insert what they
	// read; nor may anything cached from before it survive.
	c.epoch++
	if seq == 0 || !c.watching || c.touchedSince(f.NS, f.Path, seq) {
		c.invalidateLocked(f.NS, f.Path, 0)
		return
	}
	c.insertLocked(k, f, seq, cost)
}

// touchedSince reports whether an event after seq may have changed ns/p,
// or whether that can no longer be told.
func (c *cache) touchedSince(ns, p string, seq uint64) bool {
	for s := seq + 1; s <= c.lastSeq; s++ {
		e := c.recent[s%uint64(len(c.recent))]
		if e.seq != s {
			return true // fell out of the ring
		}
		if e.ns == ns && (e.namespace || e.path == "" || e.path == p || strings.HasPrefix(p, e.path+"/")) {
			return true
		}
	}
	return false
}

// record notes an applied event for touchedSince.
func (c *cache) recordLocked(seq uint64, ns, p string, namespace bool) {
	if seq == 0 {
		return
	}
	c.recent[seq%uint64(len(c.recent))] = recentEvent{seq: seq, ns: ns, path: p, namespace: namespace}
	c.lastSeq = max(c.lastSeq, seq)
}

// insertLocked caches f under its key k; cost is fileCost(k, f).
func (c *cache) insertLocked(k string, f *File, seq uint64, cost int64) {
	if c.maxBytes > 0 && cost > c.maxBytes/8 {
		// One entry may not take a large share of the cache (a file of
		// a million extents): it would evict many others to fit.
		c.invalidateLocked(f.NS, f.Path, 0)
		return
	}
	// A replaced entry goes first, so that eviction cannot pick it
	// while its successor is counted.
	if old, ok := c.files[k]; ok {
		c.removeLocked(k, old)
	}
	if len(c.files) >= c.max || c.over(cost) {
		c.evictLocked(cost)
	}
	c.forEachParent(f.NS, f.Path, func(d string) {
		if c.dirRefs[d]++; c.dirRefs[d] == 1 {
			c.used += dirRefCost + int64(len(d))
		}
	})
	c.used += cost
	c.files[k] = fileEntry{f: f, at: time.Now(), seq: seq, cost: cost}
}

// over reports whether adding cost bytes would take the cache past its
// byte bound.
func (c *cache) over(cost int64) bool { return c.maxBytes > 0 && c.used+cost > c.maxBytes }

// evictLocked drops about a tenth of the cache, and more until cost more
// bytes fit; Go's map iteration order makes that a random sample, which
// is as good as LRU for this purpose and costs no bookkeeping on the read
// path.
func (c *cache) evictLocked(cost int64) {
	n := len(c.files)/10 + 1
	for k, e := range c.files {
		c.removeLocked(k, e)
		if n--; n <= 0 && !c.over(cost) {
			return
		}
	}
}

func (c *cache) removeLocked(k string, e fileEntry) {
	delete(c.files, k)
	c.used -= e.cost
	c.forEachParent(e.f.NS, e.f.Path, func(d string) {
		if c.dirRefs[d]--; c.dirRefs[d] <= 0 {
			delete(c.dirRefs, d)
			c.used -= dirRefCost + int64(len(d))
		}
	})
}

// forEachParent calls fn with the key of every directory above p,
// including the namespace root.
func (c *cache) forEachParent(ns, p string, fn func(string)) {
	fn(fileKey(ns, ""))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			fn(fileKey(ns, p[:i]))
		}
	}
}

// invalidate drops p and, when p is a directory with cached entries
// below it, all of those.
func (c *cache) invalidate(ns, p string) { c.invalidateAt(ns, p, 0) }

// invalidateAt is invalidate for the event numbered seq (0: a local
// change): entries that already reflect seq stay.
func (c *cache) invalidateAt(ns, p string, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.recordLocked(seq, ns, p, false)
	c.invalidateLocked(ns, p, seq)
}

func (c *cache) invalidateLocked(ns, p string, seq uint64) {
	stale := func(e fileEntry) bool { return seq == 0 || e.seq < seq }
	k := fileKey(ns, p)
	if e, ok := c.files[k]; ok && stale(e) {
		c.removeLocked(k, e)
	}
	if c.dirRefs[k] > 0 {
		prefix := k
		if p != "" {
			prefix += "/"
		}
		for fk, e := range c.files {
			if strings.HasPrefix(fk, prefix) && stale(e) {
				c.removeLocked(fk, e)
			}
		}
	}
}

// seen records a namespace event (or a reset at seq: nothing older is
// known, which touchedSince reports as "touched").
func (c *cache) seen(seq uint64, ns string) {
	c.mu.Lock()
	c.recordLocked(seq, ns, "", true)
	c.mu.Unlock()
}

func (c *cache) getNS(name string) (*metapb.Namespace, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.ns[name]
	if !ok || !c.fresh(e.at) {
		return nil, false
	}
	return e.n, true
}

func (c *cache) putNS(name string, n *metapb.Namespace, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	// Namespaces are few next to files: their records count in used (so
	// that files make room for them) but are not evicted.
	if old, ok := c.ns[name]; ok {
		c.used -= old.cost
	}
	e := nsEntry{n: n, at: time.Now(), cost: nsCost(name, n)}
	c.used += e.cost
	c.ns[name] = e
}

// invalidateNS drops a namespace record. Files cached in it stay: only an
// empty namespace can be deleted, so its files' own events have already
// dropped them, and a visibility change leaves files as they are.
func (c *cache) invalidateNS(name string) {
	c.mu.Lock()
	c.epoch++
	if e, ok := c.ns[name]; ok {
		c.used -= e.cost
		delete(c.ns, name)
	}
	c.mu.Unlock()
}

func (c *cache) reset(watching bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.watching = watching
	c.lastSeq = 0
	c.recent = [len(c.recent)]recentEvent{}
	c.files = map[string]fileEntry{}
	c.dirRefs = map[string]int{}
	c.ns = map[string]nsEntry{}
	c.used = 0
}

func (c *cache) notify(ev *metapb.Event) {
	c.mu.RLock()
	ls := c.listeners
	c.mu.RUnlock()
	for _, f := range ls {
		f(ev)
	}
}

// watch follows meta's change stream until ctx ends, reconnecting with
// backoff. While it is down, entries live only for the TTL.
func (c *Client) watch(ctx context.Context) {
	defer close(c.done)
	backoff := 50 * time.Millisecond
	var last uint64
	for ctx.Err() == nil {
		err := c.follow(ctx, &last)
		c.cache.reset(false)
		c.cache.notify(&metapb.Event{Reset_: true})
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Debug("client: change stream lost", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (c *Client) follow(ctx context.Context, last *uint64) error {
	stream, err := c.meta.Watch(ctx, &metapb.WatchRequest{After: *last})
	if err != nil {
		return err
	}
	first := true
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		// Until the first event proves the stream is live, nothing cached
		// can be trusted past its TTL; after a gap, nothing at all.
		gap := *last != 0 && ev.Seq != *last+1 && !ev.Reset_
		if first || ev.Reset_ || gap {
			c.cache.reset(true)
			c.cache.notify(&metapb.Event{Reset_: true})
			first = false
		}
		if ev.Seq != 0 {
			*last = ev.Seq
		}
		if ev.Reset_ {
			c.cache.seen(ev.Seq, "")
			continue
		}
		if ev.Namespace {
			c.cache.invalidateNS(ev.Ns)
			c.cache.seen(ev.Seq, ev.Ns)
		} else {
			c.cache.invalidateAt(ev.Ns, ev.Path, ev.Seq)
		}
		c.cache.notify(ev)
	}
}
