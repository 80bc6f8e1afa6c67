package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fs"

	"cairn/proto/metapb"
)

// HoldWriteBehind keeps queued commits of files that exist in meta from
// starting until release is called (it takes every slot of the queue).
func HoldWriteBehind(m *Mount) (release func()) {
	for range cap(m.wb.sem) {
		m.wb.sem <- struct{}{}
	}
	return func() {
		for range cap(m.wb.sem) {
			<-m.wb.sem
		}
	}
}

// Kept is the number of nodes the kernel forgot while their work was
// still queued.
func Kept(m *Mount) int {
	m.wb.keptMu.Lock()
	defer m.wb.keptMu.Unlock()
	return len(m.wb.kept)
}

// DiskCached is the number of complete blocks in the disk tier.
func DiskCached(m *Mount) int {
	if m.blocks.disk == nil {
		return 0
	}
	n, _ := m.blocks.disk.stats()
	return n
}

// DiskCacheFailures is the disk tier's count of I/O errors and whether
// they turned it off.
func DiskCacheFailures(m *Mount) (errs int64, off bool) {
	if m.blocks.disk == nil {
		return 0, false
	}
	return m.blocks.disk.failures()
}

// CutSession ends m's session stream from the mount's side, as a stall
// that outlasts half a lease does; the mount then opens a new one.
func CutSession(m *Mount) {
	m.sess.sendMu.Lock()
	defer m.sess.sendMu.Unlock()
	if m.sess.out != nil {
		m.sess.out.CloseSend()
	}
}

// LiveFiles is the number of file nodes the kernel knows (forget.go).
func LiveFiles(m *Mount) int { return m.liveFiles() }

// Children is the number of inodes go-fuse holds under the mount's root.
func Children(m *Mount) int { return len(m.root.Children()) }

// Listed is the number of entries the directories' listings hold, over
// the tree go-fuse knows.
func Listed(m *Mount) int {
	total := 0
	var walk func(*fs.Inode)
	walk = func(in *fs.Inode) {
		if n, ok := in.Operations().(*node); ok {
			n.mu.Lock()
			total += len(n.kids)
			n.mu.Unlock()
		}
		for _, ch := range in.Children() {
			walk(ch)
		}
	}
	walk(m.root)
	return total
}

// Queued is the number of chains of work left behind, queued or running
// (the entries Config.WritebackMaxEntries bounds).
func Queued(m *Mount) int {
	m.wb.mu.Lock()
	defer m.wb.mu.Unlock()
	return m.wb.pending
}

// Record is the inode record the mount holds for inode ino (nil if it
// knows no such node).
func Record(m *Mount, ino uint64) *metapb.Inode {
	n := m.liveNode(ino)
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attr
}

// QueuedBytes is the unflushed bytes the queued chains are charged
// (the bytes Config.WritebackMaxBytes bounds).
func QueuedBytes(m *Mount) int64 {
	m.wb.mu.Lock()
	defer m.wb.mu.Unlock()
	return m.wb.bytes
}
