package fusefs

import (
	"context"
	"sort"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Symlinks, hard links and extended attributes.

var (
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeReadlinker    = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
)

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.begin(ctx, "symlink")
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
	a, err := n.m.meta.Symlink(ctx, &metapb.MountSymlinkRequest{Ns: n.ns, Path: c, Target: target, Uid: uid, Gid: gid})
	if err != nil {
		done(0)
		return nil, errno(ctx, err)
	}
	defer done(a.Seq)
	n.added(name, a)
	n.dirChanged(a.CtimeNs)
	return n.child(ctx, name, a, ep, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = n.m.begin(ctx, "readlink")
	defer end(ctx)
	a, err := n.stat(ctx)
	if err != nil {
		return nil, errno(ctx, err)
	}
	if a.Type != metapb.FileType_SYMLINK {
		return nil, syscall.EINVAL
	}
	return []byte(a.SymlinkTarget), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.begin(ctx, "link")
	defer end(ctx)
	if err := n.m.readOnly(); err != nil {
		return nil, errno(ctx, err)
	}
	tn, ok := target.(*node)
	if !ok || tn.ns != n.ns {
		return nil, syscall.EXDEV
	}
	if tn.isDir() {
		return nil, syscall.EPERM
	}
	if err := tn.settle(ctx); err != nil {
		return nil, errno(ctx, err)
	}
	if err := tn.flush(ctx); err != nil {
		return nil, errno(ctx, err)
	}
	from, err := tn.path()
	if err != nil {
		return nil, errno(ctx, err)
	}
	p, err := n.path()
	if err != nil {
		return nil, errno(ctx, err)
	}
	if _, err := childPath(p, name); err != nil {
		return nil, errno(ctx, err)
	}
	ep := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, from, join(p, name))
	a, err := n.m.meta.Link(ctx, &metapb.MountLinkRequest{Ns: n.ns, From: from, To: join(p, name)})
	if err != nil {
		done(0)
		if errors.Is(errors.Permission, err) {
			return nil, syscall.EPERM
		}
		return nil, errno(ctx, err)
	}
	defer done(a.Seq)
	n.added(name, a)
	n.dirChanged(a.CtimeNs)
	tn.setAttr(a, ep)
	tn.tellParent(a)
	return n.child(ctx, name, a, ep, out), 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.begin(ctx, "getxattr")
	defer end(ctx)
	if !xattrOK(attr) {
		return 0, syscall.ENODATA
	}
	a, err := n.stat(ctx)
	if err != nil {
		return 0, errno(ctx, err)
	}
	v, ok := a.Xattrs[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.begin(ctx, "listxattr")
	defer end(ctx)
	a, err := n.stat(ctx)
	if err != nil {
		return 0, errno(ctx, err)
	}
	uid, _ := caller(ctx)
	names := make([]string, 0, len(a.Xattrs))
	for k := range a.Xattrs {
		if xattrListed(k, uid) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b []byte
	for _, k := range names {
		b = append(append(b, k...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx = n.m.begin(ctx, "setxattr")
	defer end(ctx)
	if !xattrOK(attr) {
		return syscall.ENOTSUP
	}
	return n.xattr(ctx, &metapb.MountXattrRequest{
		Name: attr, Value: append([]byte(nil), data...),
		Create: flags&0x1 != 0, Replace: flags&0x2 != 0, // XATTR_CREATE, XATTR_REPLACE
	})
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx = n.m.begin(ctx, "removexattr")
	defer end(ctx)
	if !xattrOK(attr) {
		return syscall.ENODATA
	}
	return n.xattr(ctx, &metapb.MountXattrRequest{Name: attr, Remove: true})
}

func (n *node) xattr(ctx context.Context, req *metapb.MountXattrRequest) syscall.Errno {
	if err := n.settle(ctx); err != nil {
		return errno(ctx, err)
	}
	p, err := n.writable()
	if err != nil {
		return errno(ctx, err)
	}
	req.Ns, req.Path = n.ns, p
	ep := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, p)
	a, err := n.m.meta.SetXattr(ctx, req)
	if err != nil {
		done(0)
		if errors.Is(errors.NotExist, err) && (req.Remove || req.Replace) {
			return syscall.ENODATA
		}
		return errno(ctx, err)
	}
	n.mu.Lock()
	exts, ok := n.f.exts, n.f.extsOK
	n.setAttrLocked(a, ep)
	n.f.exts, n.f.extsOK = exts, ok // xattrs leave the content as it was
	n.mu.Unlock()
	n.tellParent(a)
	done(a.Seq)
	return 0
}
