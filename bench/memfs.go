package bench

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// MemFS mounts at dir a FUSE file system that keeps everything in memory
// and does no other work: directories, files, attributes. Untar and the
// small-file workloads on it measure what FUSE itself costs on this
// machine (every create, write, chown, close is still a round trip
// through the kernel), the floor under any FUSE file system's ratio to a
// local disk. It mounts with the kernel settings of a Cairn mount.
func MemFS(dir string) (unmount func() error, err error) {
	hour := time.Hour
	zero := time.Duration(0)
	srv, err := fs.Mount(dir, &memDir{memNode{attr: memAttr(syscall.S_IFDIR | 0o755)}}, &fs.Options{
		MountOptions: fuse.MountOptions{
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DisableSplice: true, MaxBackground: 64,
			ExplicitDataCacheControl: true, Options: []string{"default_permissions"},
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2, // as a Cairn mount: no set-ID bits to drop here
		},
		EntryTimeout: &hour, AttrTimeout: &hour, NegativeTimeout: &zero,
	})
	if err != nil {
		return nil, err
	}
	return srv.Unmount, nil
}

// memNode holds the attributes every node has.
type memNode struct {
	fs.Inode
	mu   sync.Mutex
	attr fuse.Attr
	data []byte // files
}

// memAttr is the attributes of a new node.
func memAttr(mode uint32) fuse.Attr {
	now := time.Now()
	a := fuse.Attr{Mode: mode, Nlink: 1}
	a.SetTimes(&now, &now, &now)
	return a
}

func (n *memNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	out.Attr = n.attr
	out.Size = uint64(len(n.data))
	return 0
}

func (n *memNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m, ok := in.GetMode(); ok {
		n.attr.Mode = n.attr.Mode&syscall.S_IFMT | m&0o7777
	}
	if u, ok := in.GetUID(); ok {
		n.attr.Uid = u
	}
	if g, ok := in.GetGID(); ok {
		n.attr.Gid = g
	}
	if t, ok := in.GetMTime(); ok {
		n.attr.SetTimes(nil, &t, nil)
	}
	if sz, ok := in.GetSize(); ok {
		n.data = append(n.data[:min(sz, uint64(len(n.data)))], make([]byte, sz-min(sz, uint64(len(n.data))))...)
	}
	out.Attr = n.attr
	out.Size = uint64(len(n.data))
	return 0
}

// Getxattr answers "no such attribute", as a file system with xattrs
// does for the kernel's security.capability look-ups.
func (n *memNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENODATA
}

type memDir struct{ memNode }

func (d *memDir) child(ctx context.Context, name string, node fs.InodeEmbedder, mode uint32) *fs.Inode {
	ch := d.NewInode(ctx, node, fs.StableAttr{Mode: mode})
	d.AddChild(name, ch, true)
	return ch
}

func (d *memDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	c := &memDir{memNode{attr: memAttr(syscall.S_IFDIR | mode&0o7777)}}
	c.attr.Nlink = 2
	out.Attr = c.attr
	return d.child(ctx, name, c, syscall.S_IFDIR), 0
}

func (d *memDir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	c := &memFile{memNode{attr: memAttr(syscall.S_IFREG | mode&0o7777)}}
	out.Attr = c.attr
	return d.child(ctx, name, c, syscall.S_IFREG), nil, 0, 0
}

type memFile struct{ memNode }

func (f *memFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *memFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end := off + int64(len(data)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[off:], data)
	return uint32(len(data)), 0
}

func (f *memFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := copy(dest, f.data[min(off, int64(len(f.data))):])
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *memFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return 0 }
