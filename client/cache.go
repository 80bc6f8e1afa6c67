package client

import (
	"context"
	"strings"
	"sync"
	"time"

	"cairn/proto/metapb"
)

// cache holds resolved files and namespace records. Entries are trusted
// without limit while the change stream is healthy (watching) and for ttl
// otherwise. epoch counts invalidations: a resolve that started before an
// invalidation must not insert its (possibly stale) answer.
type cache struct {
	mu        sync.RWMutex
	max       int
	ttl       time.Duration
	watching  bool
	epoch     uint64
	files     map[string]fileEntry // key: ns + "\x00" + path
	dirRefs   map[string]int       // key: ns + "\x00" + dir -> cached entries below it
	ns        map[string]nsEntry
	listeners []func(*metapb.Event)
}

type fileEntry struct {
	f  *File
	at time.Time
}

type nsEntry struct {
	n  *metapb.Namespace
	at time.Time
}

func newCache(max int, ttl time.Duration) *cache {
	return &cache{
		max: max, ttl: ttl,
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	k := fileKey(f.NS, f.Path)
	if _, ok := c.files[k]; !ok {
		if len(c.files) >= c.max {
			c.evictLocked()
		}
		c.forEachParent(f.NS, f.Path, func(d string) { c.dirRefs[d]++ })
	}
	c.files[k] = fileEntry{f: f, at: time.Now()}
}

// evictLocked drops about a tenth of the cache; Go's map iteration order
// makes that a random sample, which is as good as LRU for this purpose
// and costs no bookkeeping on the read path.
func (c *cache) evictLocked() {
	n := len(c.files)/10 + 1
	for k, e := range c.files {
		c.removeLocked(k, e.f)
		if n--; n == 0 {
			return
		}
	}
}

func (c *cache) removeLocked(k string, f *File) {
	delete(c.files, k)
	c.forEachParent(f.NS, f.Path, func(d string) {
		if c.dirRefs[d]--; c.dirRefs[d] <= 0 {
			delete(c.dirRefs, d)
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
func (c *cache) invalidate(ns, p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	k := fileKey(ns, p)
	if e, ok := c.files[k]; ok {
		c.removeLocked(k, e.f)
	}
	if c.dirRefs[k] > 0 {
		prefix := k
		if p != "" {
			prefix += "/"
		}
		for fk, e := range c.files {
			if strings.HasPrefix(fk, prefix) {
				c.removeLocked(fk, e.f)
			}
		}
	}
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
	if epoch == c.epoch {
		c.ns[name] = nsEntry{n: n, at: time.Now()}
	}
}

// invalidateNS drops a namespace record and every file cached in it.
func (c *cache) invalidateNS(name string) {
	c.mu.Lock()
	c.epoch++
	delete(c.ns, name)
	c.mu.Unlock()
	c.invalidate(name, "")
}

func (c *cache) reset(watching bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.watching = watching
	c.files = map[string]fileEntry{}
	c.dirRefs = map[string]int{}
	c.ns = map[string]nsEntry{}
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
			continue
		}
		if ev.Namespace {
			c.cache.invalidateNS(ev.Ns)
		} else {
			c.cache.invalidate(ev.Ns, ev.Path)
		}
		c.cache.notify(ev)
	}
}
