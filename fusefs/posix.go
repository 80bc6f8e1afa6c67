package fusefs

import (
	"context"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// The POSIX surface beyond files, directories and symlinks: special files,
// name and path limits, link counts, atime and the xattr namespaces.

var (
	_ fs.NodeMknoder   = (*node)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

// childPath is the path of a new entry name in directory n (at p), or
// ENAMETOOLONG when the name or the whole path is longer than meta
// stores. Checked before the kernel is answered: a create or mkdir left
// behind reaches meta only later, when its refusal can no longer be told.
func childPath(p, name string) (string, error) {
	if err := pathname.ValidName(name); err != nil {
		return "", err
	}
	c := join(p, name)
	if len(c) > pathname.MaxPath {
		return "", errors.E(errors.Op("fusefs.create"), errors.NameTooLong, "path is longer than 4096 bytes")
	}
	return c, nil
}

// specialTypes maps the file type bits of mknod to the inode type meta
// stores: the kernel serves fifos, devices and sockets itself once it
// knows the type (and rdev), so they need no content.
var specialTypes = map[uint32]metapb.FileType{
	syscall.S_IFIFO:  metapb.FileType_FIFO,
	syscall.S_IFCHR:  metapb.FileType_CHAR_DEVICE,
	syscall.S_IFBLK:  metapb.FileType_BLOCK_DEVICE,
	syscall.S_IFSOCK: metapb.FileType_SOCKET,
}

// Mknod makes a fifo, a device (the kernel lets only CAP_MKNOD ask) or
// an AF_UNIX socket's name; a regular file is a create.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.begin(ctx, "mknod")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return nil, errno(ctx, err)
	}
	c, err := childPath(p, name)
	if err != nil {
		return nil, errno(ctx, err)
	}
	uid, gid := caller(ctx)
	ep := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, c)
	var a *metapb.Inode
	if typ, ok := specialTypes[mode&syscall.S_IFMT]; ok {
		a, err = n.m.meta.Mknod(ctx, &metapb.MountMknodRequest{Ns: n.ns, Path: c, Type: typ, Mode: mode & 07777, Rdev: dev, Uid: uid, Gid: gid})
	} else if t := mode & syscall.S_IFMT; t == syscall.S_IFREG || t == 0 {
		a, err = n.m.meta.Commit(ctx, &metapb.CommitRequest{
			Ns: n.ns, Path: c, Etag: emptyETag, Mode: mode & 07777, ModeExact: true, Uid: uid, Gid: gid, IfNoneMatch: true,
		})
	} else {
		done(0)
		return nil, syscall.EINVAL
	}
	if err != nil {
		done(0)
		return nil, kernelErr(ctx, err)
	}
	defer done(a.Seq)
	n.added(name, a)
	n.dirChanged(a.CtimeNs)
	return n.child(ctx, name, a, ep, out), 0
}

// linksChanged moves the cached link count of directory n by delta, as
// meta did when this mount's own mkdir, rmdir or rename of a directory
// applied (its event is not applied to this mount): a directory's nlink
// is 2 plus its subdirectories.
func (n *node) linksChanged(delta int) {
	if delta == 0 {
		return
	}
	n.mu.Lock()
	if n.attr == nil {
		n.mu.Unlock()
		return
	}
	a := proto.Clone(n.attr).(*metapb.Inode)
	a.Nlink = uint32(max(int(max(a.Nlink, 2))+delta, 2))
	n.attr = a
	n.mu.Unlock()
	n.tellParent(a)
}

// unlinked records that one name of file n went (this mount's unlink or
// rename over it): its cached link count drops at once, not at the next
// invalidation.
func (n *node) unlinked() {
	n.mu.Lock()
	if n.attr != nil && n.attr.Nlink > 1 {
		a := proto.Clone(n.attr).(*metapb.Inode)
		a.Nlink--
		a.CtimeNs = time.Now().UnixNano()
		n.attr = a
	}
	n.mu.Unlock()
}

// nlink is the link count stat shows for a: a file unlinked while open
// has none left, a directory at least its "." and "..".
func (n *node) nlink(a *metapb.Inode) uint32 {
	switch {
	case n.f.gone.Load():
		return 0
	case a.Type == metapb.FileType_DIRECTORY:
		return max(a.Nlink, 2)
	}
	return max(a.Nlink, 1)
}

// atimeOf is a's access time; a record that never had one shows mtime.
func atimeOf(a *metapb.Inode) int64 {
	if a.AtimeNs != 0 {
		return a.AtimeNs
	}
	return a.MtimeNs
}

// relatimeWindow is how stale an atime may get before any read moves it
// (relatime: also when it is not newer than mtime or ctime).
const relatimeWindow = 24 * time.Hour

// accessed applies relatime after a read of n: atime moves to now when it
// is not newer than mtime or ctime, or older than a day. The change is
// local at once and written behind: with the file's queued chain if it
// has one (its commit carries the atime), else in a batch with the other
// files read meanwhile (access.go), never a meta call per read; past the
// write-behind queue's
// bound it is stored before the read answers, as every attribute change
// past it is (the atime shown must be the one stored). When nothing can
// be left behind (--sync-close, no session) it is skipped, as noatime.
func (n *node) accessed(ctx context.Context) {
	if n.m.cfg.NoAtime || n.m.cfg.ReadOnly || !n.m.wb.enabled() {
		return
	}
	now := time.Now().UnixNano()
	n.mu.Lock()
	a := n.attr
	if a == nil || !n.isFile() {
		n.mu.Unlock()
		return
	}
	at := atimeOf(a)
	if at > a.MtimeNs && at > a.CtimeNs && now-at < int64(relatimeWindow) {
		n.mu.Unlock()
		return
	}
	na := proto.Clone(a).(*metapb.Inode)
	na.AtimeNs = now
	n.attr = na
	n.mu.Unlock()
	attrs := &metapb.SetAttrRequest{AtimeNs: &now, Access: true}
	if n.m.wb.enqueue(ctx, n, work{attrs: attrs}) || n.busy() {
		// Queued. (Work joining a queued chain is refused only when
		// meta could not be told: the file may not be in meta yet.)
		return
	}
	// Not cut by the reader's interrupt: the read has its bytes, and an
	// atime shown but never stored is what this is for.
	if err := n.commitBehind(context.WithoutCancel(ctx), false, attrs); err != nil {
		n.m.log.Warn("mount: storing an access time failed", "ns", n.ns, "ino", n.StableAttr().Ino, "err", err)
	}
}

// xattrOK says which xattr namespaces are stored: user.*, and trusted.*
// and security.* as on a local file system. The kernel has checked the
// caller already (trusted.* only with CAP_SYS_ADMIN; security.* by the
// security modules); system.* (POSIX ACLs) is not supported.
func xattrOK(name string) bool {
	return strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security.")
}

// xattrListed says whether caller uid sees name in a listing: trusted.*
// only for root, as ext4 lists them (the kernel filters no listing).
func xattrListed(name string, uid uint32) bool {
	return uid == 0 || !strings.HasPrefix(name, "trusted.")
}

// Allocate is fallocate(2). Space is not reserved (files are sparse, and
// the data servers place needles at write time), so only what shows is
// done: mode 0 extends the file's size over the range, KEEP_SIZE changes
// nothing, PUNCH_HOLE (with KEEP_SIZE, as Linux requires) reads as zeros
// afterwards (written as zeros: the space is not given back); collapsing
// and inserting ranges are not supported.
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	n := h.n
	switch mode {
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		return h.punch(ctx, off, size)
	case 0:
	default:
		return syscall.EOPNOTSUPP
	}
	var out fuse.AttrOut
	if e := n.Getattr(ctx, h, &out); e != 0 {
		return e
	}
	if end := off + size; end > out.Size {
		in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_SIZE, Size: end}}
		return n.Setattr(ctx, h, in, &out)
	}
	return 0
}

// punch zeroes [off, off+size) within the file's size.
func (h *handle) punch(ctx context.Context, off, size uint64) syscall.Errno {
	var out fuse.AttrOut
	if e := h.n.Getattr(ctx, h, &out); e != 0 {
		return e
	}
	end := min(off+size, out.Size)
	zeros := make([]byte, min(end-min(off, end), 1<<20))
	for o := off; o < end; o += uint64(len(zeros)) {
		k := min(uint64(len(zeros)), end-o)
		if err := h.n.writeAt(ctx, zeros[:k], int64(o)); err != nil {
			return errno(ctx, err)
		}
	}
	return 0
}
