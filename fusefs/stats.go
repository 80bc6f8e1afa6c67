package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// statsNode is the .cairn-stats file: the counters as a table, built at
// open so that one read sees one snapshot.
type statsNode struct {
	fs.Inode
	m *Mount
}

var (
	_ fs.NodeOpener    = (*statsNode)(nil)
	_ fs.NodeGetattrer = (*statsNode)(nil)
)

func (n *node) statsFile(ctx context.Context, out *fuse.EntryOut) *fs.Inode {
	ch := n.NewInode(ctx, &statsNode{m: n.m}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 1<<63 + 1})
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = 1 << 16
	return ch
}

func (s *statsNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	out.Size = 1 << 16 // a generous upper bound; reads stop at the real end
	return 0
}

func (s *statsNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR) != 0 {
		return nil, 0, syscall.EACCES
	}
	return &statsHandle{data: []byte(s.m.stats.String())}, fuse.FOPEN_DIRECT_IO, 0
}

type statsHandle struct{ data []byte }

func (h *statsHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}
