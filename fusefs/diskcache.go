package fusefs

import (
	"container/list"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// diskCache is the block cache's second tier (Config.DiskCache): blocks
// the memory tier evicts are written to files, up to Config.DiskCacheSize,
// and a later miss reads them from there instead of the network. A data
// set larger than memory and read again (a training epoch) then costs
// local disk reads, not fetches. Needles are immutable, so a block file
// needs no invalidation; but needle keys are unique only within one
// cluster, so the tier starts empty with every mount.
type diskCache struct {
	dir string // the mount's own subdirectory, emptied at start
	max int64
	sem chan struct{} // bounds writes in flight

	mu   sync.Mutex
	used int64
	ents map[blockKey]*diskEnt
	lru  *list.List // of *diskEnt, most recent first
}

type diskEnt struct {
	k      blockKey
	lo, hi int64 // needle range held
	ready  bool  // the file is complete
	elem   *list.Element
}

func openDiskCache(dir string, max int64) (*diskCache, error) {
	d := filepath.Join(dir, "cairn-blocks")
	if err := os.RemoveAll(d); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return nil, err
	}
	return &diskCache{dir: d, max: max, sem: make(chan struct{}, 4), ents: map[blockKey]*diskEnt{}, lru: list.New()}, nil
}

// path names the file of entry e: every field of its key and range, so
// that an entry replaced while its file is being written (another range
// of the same block) never shares a file with its successor.
func (d *diskCache) path(e *diskEnt) string {
	return filepath.Join(d.dir, fmt.Sprintf("%d-%x-%d-%d-%d", e.k.vol, e.k.key, e.k.idx, e.lo, e.hi))
}

// store writes data, the needle range [lo, lo+len(data)) of block k, in
// the background; it waits while too many writes are in flight.
func (d *diskCache) store(k blockKey, lo int64, data []byte) {
	size := int64(len(data))
	if size == 0 || size > d.max {
		return
	}
	d.sem <- struct{}{}
	d.mu.Lock()
	if old := d.ents[k]; old != nil && old.lo <= lo && old.hi >= lo+size {
		d.mu.Unlock()
		<-d.sem
		return
	}
	d.removeLocked(d.ents[k])
	e := &diskEnt{k: k, lo: lo, hi: lo + size}
	e.elem = d.lru.PushFront(e)
	d.ents[k] = e
	d.used += size
	d.evictLocked()
	d.mu.Unlock()
	go func() {
		defer func() { <-d.sem }()
		p := d.path(e)
		tmp, err := writeTemp(d.dir, data)
		if err == nil {
			err = os.Rename(tmp, p)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		switch {
		case d.ents[k] != e:
			// Evicted or replaced while being written.
			if err == nil {
				os.Remove(p)
			}
		case err != nil:
			if tmp != "" {
				os.Remove(tmp)
			}
			d.removeLocked(e)
		default:
			e.ready = true
		}
	}()
}

// writeTemp writes data to a new file of its own in dir.
func writeTemp(dir string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, "tmp-")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return f.Name(), err
	}
	return f.Name(), f.Close()
}

// load returns the bytes of block k holding [lo, hi) and the needle
// offset they start at, if the tier has them.
func (d *diskCache) load(k blockKey, lo, hi int64) ([]byte, int64, bool) {
	d.mu.Lock()
	e := d.ents[k]
	if e == nil || !e.ready || e.lo > lo || e.hi < hi {
		d.mu.Unlock()
		return nil, 0, false
	}
	d.lru.MoveToFront(e.elem)
	d.mu.Unlock()
	data, err := os.ReadFile(d.path(e))
	if err != nil || int64(len(data)) != e.hi-e.lo {
		return nil, 0, false // evicted meanwhile, or damaged: fetch it
	}
	return data, e.lo, true
}

// removeLocked forgets e and deletes its file (if written).
func (d *diskCache) removeLocked(e *diskEnt) {
	if e == nil || d.ents[e.k] != e {
		return
	}
	delete(d.ents, e.k)
	d.lru.Remove(e.elem)
	d.used -= e.hi - e.lo
	if e.ready {
		os.Remove(d.path(e))
	}
}

func (d *diskCache) evictLocked() {
	for d.used > d.max && d.lru.Len() > 1 {
		d.removeLocked(d.lru.Back().Value.(*diskEnt))
	}
}

// stats returns the number of complete blocks and their bytes.
func (d *diskCache) stats() (blocks int, bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.ents {
		if e.ready {
			blocks++
			bytes += e.hi - e.lo
		}
	}
	return blocks, bytes
}
