package fusefs

import (
	"container/list"
	"context"
	"time"
)

// The kernel keeps the inodes it looked up for as long as it likes (with
// no memory pressure, for ever), and for each the mount holds a node: its
// record, its extents, go-fuse's inode. A mount that creates and reads a
// stream of files grew by some 1 MB a minute. So the file nodes the kernel
// knows are kept in the order they were last looked up or opened
// (Mount.live), and past Config.MaxFiles the least recent ones that are
// neither open nor have work queued are dropped from the kernel's dentry
// cache (an entry invalidation). The kernel then forgets the inode, and
// go-fuse and the mount (OnForget, untrack) release it; its next use is a
// lookup.

// liveSet is the file nodes the kernel knows, by inode number, least
// recently used last. Guarded by Mount.liveMu.
type liveSet struct {
	byIno map[uint64]*node
	lru   list.List // of *node
	elem  map[*node]*list.Element
}

// track records file node n as known to the kernel (Mount.live), or as
// used again.
func (m *Mount) track(n *node) {
	if !n.isFile() {
		return
	}
	m.liveMu.Lock()
	if m.live.byIno == nil {
		m.live.byIno, m.live.elem = map[uint64]*node{}, map[*node]*list.Element{}
	}
	ino := n.StableAttr().Ino
	if old := m.live.byIno[ino]; old != nil && old != n {
		m.live.lru.Remove(m.live.elem[old])
		delete(m.live.elem, old)
	}
	m.live.byIno[ino] = n
	if e := m.live.elem[n]; e != nil {
		m.live.lru.MoveToFront(e)
	} else {
		m.live.elem[n] = m.live.lru.PushFront(n)
	}
	over := len(m.live.elem) > m.cfg.MaxFiles
	m.liveMu.Unlock()
	if over {
		select {
		case m.trim <- struct{}{}:
		default: // a trim is due already
		}
	}
}

// untrack forgets n (the kernel forgot it).
func (m *Mount) untrack(n *node) {
	m.liveMu.Lock()
	if e := m.live.elem[n]; e != nil {
		m.live.lru.Remove(e)
		delete(m.live.elem, n)
	}
	if m.live.byIno[n.StableAttr().Ino] == n {
		delete(m.live.byIno, n.StableAttr().Ino)
	}
	m.liveMu.Unlock()
}

// liveNode returns the file node with inode number ino the kernel knows.
func (m *Mount) liveNode(ino uint64) *node {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return m.live.byIno[ino]
}

// liveFiles is the number of file nodes the kernel knows.
func (m *Mount) liveFiles() int {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	return len(m.live.elem)
}

// trimmer drops the least recently used files from the kernel's cache
// whenever more than Config.MaxFiles are known, down to nine tenths of
// it. It runs on its own goroutine: an entry invalidation waits for the
// directory's lock, which a request being served may hold.
func (m *Mount) trimmer(ctx context.Context) {
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.trim:
		case <-again:
		}
		again = nil
		for _, n := range m.toForget() {
			if ctx.Err() != nil {
				return
			}
			if n.openCount() > 0 || n.busy() {
				continue
			}
			if name, parent := n.Parent(); parent != nil {
				parent.NotifyEntry(name)
			}
		}
		if m.liveFiles() > m.cfg.MaxFiles {
			// Files skipped (open, their commits queued), or the
			// kernel's forgets not in yet: look again in a while.
			again = time.After(time.Second)
		}
	}
}

// toForget picks the files to drop from the kernel's cache, least
// recently used first, and moves them to the front: one the kernel keeps
// all the same (open elsewhere, a working directory's file) is tried again
// only after the others.
func (m *Mount) toForget() []*node {
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	excess := len(m.live.elem) - m.cfg.MaxFiles*9/10
	var out []*node
	for ; excess > 0; excess-- {
		e := m.live.lru.Back()
		n := e.Value.(*node)
		m.live.lru.MoveToFront(e)
		out = append(out, n)
	}
	return out
}
