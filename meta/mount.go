package meta

import (
	"context"
	"fmt"
	"strings"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// What the FUSE mount needs beyond the object API: symlinks, hard links
// and extended attributes. Each is a Command applied like every other
// mutation (see apply); sessions and their acknowledgements are in
// session.go.

func (s *Service) Symlink(ctx context.Context, req *metapb.MountSymlinkRequest) (*metapb.Inode, error) {
	const op = errors.Op("meta.Symlink")
	if _, err := checkPath(op, req.Ns, req.Path); err != nil {
		return nil, err
	}
	if req.Target == "" || len(req.Target) > 4096 {
		return nil, errors.E(op, errors.Invalid, fullPath(req.Ns, req.Path), "symlink target empty or over 4096 bytes")
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_MountSymlink{MountSymlink: req}}))
}

func (s *Service) Link(ctx context.Context, req *metapb.MountLinkRequest) (*metapb.Inode, error) {
	const op = errors.Op("meta.Link")
	if _, err := checkPath(op, req.Ns, req.From); err != nil {
		return nil, err
	}
	if _, err := checkPath(op, req.Ns, req.To); err != nil {
		return nil, err
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_MountLink{MountLink: req}}))
}

func (s *Service) SetXattr(ctx context.Context, req *metapb.MountXattrRequest) (*metapb.Inode, error) {
	const op = errors.Op("meta.SetXattr")
	if _, err := checkPath(op, req.Ns, req.Path); err != nil {
		return nil, err
	}
	if req.Name == "" || len(req.Name) > 255 || len(req.Value) > 64<<10 {
		return nil, errors.E(op, errors.Invalid, fullPath(req.Ns, req.Path), "xattr name empty or over 255 bytes, or value over 64 KiB")
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_MountXattr{MountXattr: req}}))
}

// Mknod makes a special file (fifo, device, socket): an inode with a
// type and device number and no content, like a symlink.
func (s *Service) Mknod(ctx context.Context, req *metapb.MountMknodRequest) (*metapb.Inode, error) {
	const op = errors.Op("meta.Mknod")
	if _, err := checkPath(op, req.Ns, req.Path); err != nil {
		return nil, err
	}
	if !specialType(req.Type) {
		return nil, errors.E(op, errors.Invalid, fullPath(req.Ns, req.Path), "not a special file type")
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_MountMknod{MountMknod: req}}))
}

// specialType reports whether t is a special file's type (Mknod's).
func specialType(t metapb.FileType) bool {
	switch t {
	case metapb.FileType_FIFO, metapb.FileType_CHAR_DEVICE, metapb.FileType_BLOCK_DEVICE, metapb.FileType_SOCKET:
		return true
	}
	return false
}

// MountReserve reserves inode numbers for a mount's local creates.
func (s *Service) MountReserve(ctx context.Context, req *metapb.MountReserveRequest) (*metapb.MountReserveResponse, error) {
	if req.Count == 0 || req.Count > 1<<20 {
		return nil, errors.E(errors.Op("meta.MountReserve"), errors.Invalid, "count must be 1 to 2^20")
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_MountReserve{MountReserve: req}}))
	if err != nil {
		return nil, err
	}
	return &metapb.MountReserveResponse{First: res.first, Count: req.Count}, nil
}

func (t *txn) mountReserve(r *metapb.MountReserveRequest) error {
	val, _, err := t.v.get(keyInoCounter)
	if err != nil {
		return err
	}
	t.res.first = u64(val) + 1
	return t.b.Set(keyInoCounter, be64(u64(val)+uint64(r.Count)), nil)
}

// maxAccessBatch bounds MountAccess, as maxCommitBatch bounds CommitBatch.
const maxAccessBatch = 4096

// MountAccess stores the access times a mount's reads moved (relatime),
// many files in one command: a read costs no meta round trip or log write
// of its own (fusefs/access.go).
func (s *Service) MountAccess(ctx context.Context, req *metapb.MountAccessRequest) (*metapb.Empty, error) {
	const op = errors.Op("meta.MountAccess")
	if len(req.Files) > maxAccessBatch {
		return nil, errors.E(op, errors.TooLarge, fmt.Sprintf("more than %d files", maxAccessBatch))
	}
	for _, f := range req.Files {
		if _, err := checkPath(op, req.Ns, f.Path); err != nil {
			return nil, err
		}
	}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_MountAccess{MountAccess: req}}); err != nil {
		return nil, err
	}
	return &metapb.Empty{}, nil
}

// mountAccess moves each file's atime forward to the one given: only
// forward, as a read's time never takes an atime back (a batch that
// lands after a commit carrying a newer one changes nothing). No version,
// ctime or event: nothing a cache holds changes that a reader needs. A
// path that names no file, or another inode than the one read (renamed
// or replaced since), is skipped: the access time of that read is lost,
// never given to another file.
func (t *txn) mountAccess(r *metapb.MountAccessRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	// A batch's files share directories (a mount reads what it wrote
	// together): each directory is walked once.
	type dirIno struct {
		ino uint64
		ok  bool
	}
	dirs := map[string]dirIno{}
	for _, f := range r.Files {
		p, _, err := pathname.Clean(f.Path)
		if err != nil {
			return err
		}
		dir, name := "", p
		if i := strings.LastIndexByte(p, '/'); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		d, ok := dirs[dir]
		if !ok {
			ino, isDir, err := t.v.walk(ns.RootIno, dir)
			if err != nil && !errors.Is(errors.NotExist, err) && !errors.Is(errors.NotDir, err) {
				return err
			}
			d = dirIno{ino, err == nil && isDir}
			dirs[dir] = d
		}
		if !d.ok {
			continue // no such directory (any more)
		}
		ino, isDir, found, err := t.v.lookupAs(d.ino, name, false)
		if err != nil {
			return err
		}
		if !found || isDir || ino != f.Ino {
			continue
		}
		n, err := t.v.inode(ino)
		if err != nil {
			return err
		}
		if f.AtimeNs <= n.AtimeNs {
			continue
		}
		n.AtimeNs = f.AtimeNs
		if err := t.put(inodeKey(ino), n); err != nil {
			return err
		}
	}
	return nil
}

// reserved checks that ino was handed out by MountReserve and is free.
func (t *txn) reserved(ino uint64) error {
	val, _, err := t.v.get(keyInoCounter)
	if err != nil {
		return err
	}
	if ino > u64(val) {
		return errors.E(errors.Invalid, "inode number not reserved")
	}
	if used, err := t.v.has(inodeKey(ino)); err != nil {
		return err
	} else if used {
		return errors.E(errors.Exist, "inode number in use")
	}
	return nil
}

// newName finds the parent of a path that must not exist yet.
func (t *txn) newName(nsName, raw string) (ns *metapb.Namespace, p string, parent uint64, name string, err error) {
	if ns, err = t.v.namespace(nsName); err != nil {
		return
	}
	if p, _, err = pathname.Clean(raw); err != nil {
		return
	}
	if p == "" {
		err = errors.E(errors.Exist, "the root directory exists")
		return
	}
	if parent, name, err = t.parentDir(ns, p, false, 0, 0); err != nil {
		return
	}
	_, _, found, lerr := t.v.lookup(parent, name)
	if lerr != nil {
		err = lerr
	} else if found {
		err = errors.E(errors.Exist, "file exists")
	}
	return
}

func (t *txn) mountSymlink(r *metapb.MountSymlinkRequest) error {
	_, p, parent, _, err := t.newName(r.Ns, r.Path)
	if err != nil {
		return err
	}
	n, err := t.newInode(metapb.FileType_SYMLINK, 0o777, r.Uid, r.Gid)
	if err != nil {
		return err
	}
	n.SymlinkTarget = r.Target
	if err := t.link(parent, pathBase(p), false, n); err != nil {
		return err
	}
	t.res.inode = n
	t.event(r.Ns, p, false)
	return nil
}

func (t *txn) mountMknod(r *metapb.MountMknodRequest) error {
	_, p, parent, _, err := t.newName(r.Ns, r.Path)
	if err != nil {
		return err
	}
	n, err := t.newInodeMode(0, r.Type, r.Mode&0o7777, true, r.Uid, r.Gid)
	if err != nil {
		return err
	}
	if r.Type == metapb.FileType_CHAR_DEVICE || r.Type == metapb.FileType_BLOCK_DEVICE {
		n.Rdev = r.Rdev
	}
	n.Etag = syntheticETag(n)
	if err := t.link(parent, pathBase(p), false, n); err != nil {
		return err
	}
	t.res.inode = n
	t.event(r.Ns, p, false)
	return nil
}

func (t *txn) mountLink(r *metapb.MountLinkRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	from, _, err := pathname.Clean(r.From)
	if err != nil {
		return err
	}
	ino, isDir, err := t.v.walk(ns.RootIno, from)
	if err != nil {
		return err
	}
	if isDir {
		return errors.E(errors.Permission, "hard link to a directory")
	}
	_, to, parent, name, err := t.newName(r.Ns, r.To)
	if err != nil {
		return err
	}
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	n.Nlink = max(n.Nlink, 1) + 1
	t.touch(n, false)
	if err := t.put(inodeKey(ino), n); err != nil {
		return err
	}
	if err := t.b.Set(direntKey(parent, name, false), be64(ino), nil); err != nil {
		return err
	}
	if err := t.touchDir(parent); err != nil {
		return err
	}
	t.res.inode = n
	t.event(r.Ns, from, false)
	t.event(r.Ns, to, false)
	return nil
}

func (t *txn) mountXattr(r *metapb.MountXattrRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	ino, _, err := t.v.walk(ns.RootIno, p)
	if err != nil {
		return err
	}
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	_, set := n.Xattrs[r.Name]
	switch {
	case (r.Remove || r.Replace) && !set:
		return errors.E(errors.NotExist, "no such attribute")
	case r.Create && set:
		return errors.E(errors.Exist, "attribute exists")
	}
	if r.Remove {
		delete(n.Xattrs, r.Name)
	} else {
		if n.Xattrs == nil {
			n.Xattrs = map[string][]byte{}
		}
		n.Xattrs[r.Name] = r.Value
	}
	t.touch(n, false)
	t.res.inode = n
	t.event(r.Ns, p, false)
	return t.put(inodeKey(ino), n)
}

// unlinkFile drops one name of file ino: the file itself goes with its
// last name.
func (t *txn) unlinkFile(ino uint64) (gone bool, err error) {
	n, err := t.v.inode(ino)
	if err != nil || n.Nlink <= 1 {
		if err == nil {
			if kept, err := t.keepOrphan(n); kept || err != nil {
				return true, err
			}
		}
		return true, t.removeFile(ino)
	}
	n.Nlink--
	t.touch(n, false)
	return false, t.put(inodeKey(ino), n)
}

func pathBase(p string) string {
	_, name := pathname.Parent(p)
	return name
}
