package fusefs

import (
	"cairn/proto/metapb"
)

// Open files are inodes. The first open of a file here announces it to
// meta on the session stream (MountSessionMsg.open), before the open is
// checked, and the last close withdraws it once its queued commits are
// done (close). While it is announced, meta keeps the file's inode and
// data through another client's unlink or rename over it, and this mount
// reads, commits and truncates it by inode number when its path names
// another file or none (ResolveRequest.ino, CommitRequest.open_ino,
// SetAttrRequest.open_ino): a descriptor keeps the file it opened.

// opening announces n's first open (n.mu held).
func (m *Mount) opening(n *node) {
	ino := n.StableAttr().Ino
	m.mu.Lock()
	if m.opened == nil {
		m.opened = map[uint64]*node{}
	}
	m.opened[ino] = n
	m.mu.Unlock()
	n.f.held.Store(true)
	m.sess.send(&metapb.MountSessionMsg{Open: ino})
}

// closed ends one open of n; after the last, once the commits queued for
// n are done, meta is told (it may then remove a file unlinked meanwhile).
func (n *node) closed() {
	n.mu.Lock()
	n.f.opens--
	last := n.f.opens == 0
	n.mu.Unlock()
	if !last {
		return
	}
	go func() {
		// The commits queued first (an unlinked file's content must land
		// before meta may remove it), not an atime batch: each close
		// waiting for one sent it at once, a MountAccess per file read.
		n.waitChain()
		n.wb.mu.Lock()
		err := n.wb.err
		n.wb.err = nil
		n.wb.mu.Unlock()
		if err != nil {
			n.m.log.Warn("mount: commit before the last close failed", "err", err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.f.opens > 0 || !n.f.held.Load() {
			return // opened again meanwhile: still announced
		}
		ino := n.StableAttr().Ino
		n.m.mu.Lock()
		if n.m.opened[ino] == n {
			delete(n.m.opened, ino)
		}
		n.m.mu.Unlock()
		n.f.held.Store(false)
		n.m.sess.send(&metapb.MountSessionMsg{Close: ino})
	}()
}

// openIno is n's inode number while it is announced open, else 0.
func (n *node) openIno() uint64 {
	if n.f.held.Load() {
		return n.StableAttr().Ino
	}
	return 0
}

// openNode returns the open file with inode number ino, if any.
func (m *Mount) openNode(ino uint64) *node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opened[ino]
}

// openInos lists the inode numbers of the files open here.
func (m *Mount) openInos() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]uint64, 0, len(m.opened))
	for ino := range m.opened {
		out = append(out, ino)
	}
	return out
}

// applyIno drops what is cached of the open file an inode event names
// (a commit by inode number, by another mount), as session.apply does:
// the attributes are waited for briefly (a flush here may hold the node
// while it waits for meta, which waits for this acknowledgement), the
// cached pages not at all (see notifyKernel).
func (s *session) applyIno(ev *metapb.Event, wait bool) {
	n := s.m.openNode(ev.Ino)
	if n == nil {
		// Not open here, but known, perhaps by a name the writer's
		// mount does not know (renamed since it opened the file).
		n = s.m.liveNode(ev.Ino)
	}
	if n == nil {
		return
	}
	s.ep.Add(1)
	s.notifyKernel([]func(){func() { n.invalidate(); n.NotifyContent(-1, 0) }}, []func(){func() { n.NotifyContent(0, 0) }}, wait)
}

// stillNamed reports whether n may still be the file its name shows:
// created here and not committed, or not dropped by another client's
// change of the name since (an open file renamed over elsewhere keeps
// queued work, an access time, but the name is the other file's now).
func (n *node) stillNamed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.f.creating || !n.f.gone.Load()
}
