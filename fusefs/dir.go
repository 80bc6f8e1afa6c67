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

// orphanDir held files unlinked while open in earlier versions (meta now
// keeps them by inode, open.go); what is left of it in a store stays
// hidden from the namespace root's listing.
const orphanDir = ".cairn-orphans"

// statsName is the read-only file at each mounted root that shows the
// server operations per FUSE operation.
const statsName = ".cairn-stats"

// emptyETag is the MD5 of no bytes, the ETag of a freshly created file.
const emptyETag = "d41d8cd98f00b204e9800998ecf8427e"

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
)

func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// writable returns n's path for a change, or EROFS on a read-only mount.
func (n *node) writable() (string, error) {
	if err := n.m.readOnly(); err != nil {
		return "", err
	}
	return n.path()
}

func (n *node) isRoot() bool {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	return n.m.nsRoot[n.ns] == n
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.begin(ctx, "lookup")
	defer end(ctx)
	if name == statsName && n.isRoot() {
		return n.statsFile(ctx, out), 0
	}
	if len(name) > pathname.MaxComponent {
		return nil, syscall.ENAMETOOLONG
	}
	n.mu.Lock()
	if n.listed() {
		a, ok := n.kids[name]
		n.mu.Unlock()
		if !ok {
			return nil, syscall.ENOENT
		}
		return n.child(ctx, name, a, n.m.sess.epoch(), out), 0
	}
	n.mu.Unlock()
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok && cn.busy() && cn.stillNamed() {
			// Changes of it are queued here: meta is behind.
			cn.mu.Lock()
			a := cn.attr
			cn.mu.Unlock()
			cn.fill(a, &out.Attr)
			out.SetEntryTimeout(n.m.timeout())
			out.SetAttrTimeout(n.m.timeout())
			return ch, 0
		}
	}
	p, err := n.path()
	if err != nil {
		return nil, errno(ctx, err)
	}
	if len(join(p, name)) > pathname.MaxPath {
		// Nothing can exist there (no create past meta's limit is ever
		// answered): ENOENT, as whether the directory's listing is cached
		// must not change the answer.
		return nil, syscall.ENOENT
	}
	epoch := n.m.sess.epoch()
	if cn := n.m.wb.madeAt(n.ns, join(p, name)); cn != nil {
		// Created here, its create still queued: meta does not have it
		// yet, and whatever this mount answered it must go on showing.
		cn.mu.Lock()
		a := cn.attr
		cn.mu.Unlock()
		return n.child(ctx, name, a, epoch, out), 0
	}
	var r *metapb.ResolveResponse
	err = retry(ctx, func() (err error) {
		r, err = n.m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: n.ns, Path: join(p, name)})
		return err
	})
	if err != nil {
		return nil, errno(ctx, err)
	}
	return n.child(ctx, name, r.Inode, epoch, out), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx = n.m.begin(ctx, "readdir")
	defer end(ctx)
	n.mu.Lock()
	if n.listed() {
		ents := direntsOf(n.kids)
		n.mu.Unlock()
		return fs.NewListDirStream(ents), 0
	}
	n.mu.Unlock()
	n.m.wb.drain() // files created here must be in meta before it lists them
	p, err := n.path()
	if err != nil {
		return nil, errno(ctx, err)
	}
	prefix := ""
	if p != "" {
		prefix = p + "/"
	}
	epoch := n.m.sess.epoch()
	kids := map[string]*metapb.Inode{}
	root := p == ""
	req := &metapb.ListRequest{Ns: n.ns, Prefix: prefix, Delimiter: "/", Limit: 10000}
	for {
		var r *metapb.ListResponse
		err := retry(ctx, func() (err error) {
			r, err = n.m.meta.List(ctx, req)
			return err
		})
		if err != nil {
			return nil, errno(ctx, err)
		}
		for _, e := range r.Entries {
			name := strings.TrimSuffix(e.Name[len(prefix):], "/")
			if e.Inode == nil || root && name == orphanDir {
				continue
			}
			kids[name] = e.Inode
		}
		if r.NextCursor == "" {
			break
		}
		req.Cursor = r.NextCursor
	}
	n.mu.Lock()
	if epoch == n.m.sess.epoch() && n.m.sess.live() && len(kids) <= n.m.cfg.MaxListing {
		n.kids, n.complete, n.listGen = kids, true, n.m.sess.generation()
	}
	n.mu.Unlock()
	return fs.NewListDirStream(direntsOf(kids)), 0
}

func direntsOf(kids map[string]*metapb.Inode) []fuse.DirEntry {
	ents := make([]fuse.DirEntry, 0, len(kids))
	for name, a := range kids {
		ents = append(ents, fuse.DirEntry{Name: name, Ino: a.Ino, Mode: typeBits(a.Type)})
	}
	return ents
}

// added records a child this mount created, renamed into n or changed.
func (n *node) added(name string, a *metapb.Inode) {
	n.mu.Lock()
	if n.complete {
		if _, ok := n.kids[name]; !ok && len(n.kids) >= n.m.cfg.MaxListing {
			// Past the bound on a listing kept: meta lists it from now.
			n.complete, n.kids = false, nil
		} else {
			n.kids[name] = a
		}
	}
	n.mu.Unlock()
}

// removed records that name left n (this mount's own change).
func (n *node) removed(name string) {
	n.mu.Lock()
	if n.complete {
		delete(n.kids, name)
	}
	n.mu.Unlock()
	n.dirChanged(time.Now().UnixNano())
}

// dirChanged moves the cached mtime and ctime of directory n to at, as
// meta did when this mount's own change of an entry applied (the event
// of an own change is not applied, and the kernel asks again at once).
func (n *node) dirChanged(at int64) {
	n.mu.Lock()
	if n.attr != nil && at > n.attr.MtimeNs {
		a := proto.Clone(n.attr).(*metapb.Inode)
		a.MtimeNs, a.CtimeNs = at, at
		n.attr = a
	}
	n.mu.Unlock()
}

// renamed moves the cached ctime of n, which this mount just renamed, to
// at, meta's: a rename changes the moved inode's ctime (as on ext4, which
// pjdfstest's rename/22.t checks), and the kernel drops its cached
// attributes after a rename and asks again, so n must not answer the
// ctime from before. Only the ctime: a write that raced the rename keeps
// the size it cached.
func (n *node) renamed(at int64) {
	n.mu.Lock()
	if n.attr != nil && at > n.attr.CtimeNs {
		a := proto.Clone(n.attr).(*metapb.Inode)
		a.CtimeNs = at
		n.attr = a
	}
	n.mu.Unlock()
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.begin(ctx, "mkdir")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return nil, errno(ctx, err)
	}
	uid, gid := caller(ctx)
	if _, err := childPath(p, name); err != nil {
		return nil, errno(ctx, err) // answered here: meta sees the name only later
	}
	if n.m.wb.enabled() {
		if ch, ok := n.mkdirBehind(ctx, p, name, mode, uid, gid, out); ok {
			return ch, 0
		}
	}
	epoch := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, join(p, name))
	// Durable at the next fsync, as on a local disk: meta answers before
	// its log sync (NoSyncWait), and the log is ordered, so a file
	// committed in the directory, or the directory's fsync, carries it.
	a, err := n.m.meta.Mkdir(ctx, &metapb.MkdirRequest{Ns: n.ns, Path: join(p, name), Mode: mode & 07777, ModeExact: true, Uid: uid, Gid: gid, NoSyncWait: true})
	if err != nil {
		done(0)
		return nil, kernelErr(ctx, err)
	}
	defer done(a.Seq)
	n.added(name, a)
	n.dirChanged(a.CtimeNs)
	n.linksChanged(1)
	ch := n.child(ctx, name, a, epoch, out)
	if cn, ok := ch.Operations().(*node); ok && n.m.sess.live() {
		cn.mu.Lock()
		if !cn.complete {
			// A new directory is empty: its listing is known.
			cn.kids, cn.complete, cn.listGen = map[string]*metapb.Inode{}, true, n.m.sess.generation()
		}
		cn.mu.Unlock()
	}
	return ch, 0
}

// mkdirBehind makes a directory here and leaves its Mkdir behind, as
// createBehind does for files: the kernel gets an inode number meta
// reserved for this mount, other mounts drop the name, and the commit
// (with that number) runs at once in the background. Calls naming paths
// wait for it (mkdirGate); an untar's mkdirs cost no round trip each.
func (n *node) mkdirBehind(ctx context.Context, p, name string, mode, uid, gid uint32, out *fuse.EntryOut) (*fs.Inode, bool) {
	ino, err := n.m.wb.allocIno(ctx)
	if err != nil {
		return nil, false
	}
	now := time.Now().UnixNano()
	a := &metapb.Inode{
		Ino: ino, Type: metapb.FileType_DIRECTORY, Mode: mode & 07777, Uid: uid, Gid: gid,
		MtimeNs: now, CtimeNs: now, Nlink: 2, Version: 1,
	}
	cn := n.m.newNode(n.ns, a)
	// A new directory is empty: its listing is known.
	cn.kids, cn.complete, cn.listGen = map[string]*metapb.Inode{}, true, n.m.sess.generation()
	// Vouched for from its mkdir, as a file created here is
	// (createBehind): its commit's answer is then trusted, and a getattr
	// after the kernel dropped its attributes (it does for a directory at
	// every create in it) asks meta nothing. It was never vouched for,
	// and writing 5,000 files into new directories paid a Resolve per
	// directory.
	cn.valid, cn.gen = n.m.sess.live(), n.m.sess.generation()
	// The inode first: the commit starts at once and looks at it.
	ch := n.NewInode(ctx, cn, stableOf(a))
	cn.mkdirTicket = n.m.wb.mkdirs.add()
	if !n.m.wb.enqueueAt(ctx, cn, join(p, name), work{create: true, flush: true, in: n}) {
		n.m.wb.mkdirs.turn(cn.mkdirTicket) // tickets are done in order
		n.m.wb.mkdirs.done(cn.mkdirTicket)
		return nil, false
	}
	n.madeHere(name, cn, a, out)
	n.linksChanged(1)
	return ch, true
}

// madeHere records in n a child made by this mount whose commit is left
// behind, and answers the kernel's entry for it.
func (n *node) madeHere(name string, cn *node, a *metapb.Inode, out *fuse.EntryOut) {
	n.added(name, a)
	n.dirChanged(a.MtimeNs)
	cn.fill(a, &out.Attr)
	t := n.m.timeout()
	out.SetEntryTimeout(t)
	out.SetAttrTimeout(t)
}

// commitMkdir commits a directory made here (mkdirBehind) with the inode
// number the kernel was given; a repeat after a lost answer finds it.
func (n *node) commitMkdir(ctx context.Context) error {
	p, err := n.path()
	if err != nil {
		return err
	}
	n.mu.Lock()
	a := n.attr
	epoch := n.answerEpoch(ctx)
	n.mu.Unlock()
	done := n.m.sess.mutating(n.ns, p)
	na, err := n.m.meta.Mkdir(context.WithValue(ctx, mkdirKey{}, true), &metapb.MkdirRequest{
		Ns: n.ns, Path: p, Mode: a.Mode, ModeExact: true, Uid: a.Uid, Gid: a.Gid, Ino: a.Ino, NoSyncWait: true,
	})
	if err != nil {
		done(0)
		return err
	}
	n.mu.Lock()
	n.wb.mu.Lock()
	if n.wb.attrs != nil || n.attr.MtimeNs > na.MtimeNs {
		// Changes made here meanwhile (entries added, attributes queued)
		// are newer than the answer: keep them.
		na = proto.Clone(na).(*metapb.Inode)
		na.Mode, na.Uid, na.Gid = n.attr.Mode, n.attr.Uid, n.attr.Gid
		na.MtimeNs, na.CtimeNs = max(na.MtimeNs, n.attr.MtimeNs), max(na.CtimeNs, n.attr.CtimeNs)
	}
	if n.attr.Nlink > na.Nlink {
		// Subdirectories made here meanwhile: their mkdirs commit after
		// this one (mkdirGate), so meta's count is behind.
		na = proto.Clone(na).(*metapb.Inode)
		na.Nlink = n.attr.Nlink
	}
	n.wb.mu.Unlock()
	n.setAttrLocked(na, epoch)
	n.mu.Unlock()
	n.tellParent(na)
	done(na.Seq)
	return nil
}

// typeOf returns the type of child name: from the kernel's tree when it
// knows it, else with a Resolve.
func (n *node) typeOf(ctx context.Context, p, name string) (uint32, error) {
	if ch := n.GetChild(name); ch != nil {
		return ch.StableAttr().Mode, nil
	}
	if cn := n.m.wb.madeAt(n.ns, join(p, name)); cn != nil {
		return cn.StableAttr().Mode, nil
	}
	r, err := n.m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: n.ns, Path: join(p, name)})
	if err != nil {
		return 0, err
	}
	return typeBits(r.Inode.Type), nil
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = n.m.begin(ctx, "rmdir")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return errno(ctx, err)
	}
	t, err := n.typeOf(ctx, p, name)
	if err != nil {
		return errno(ctx, err)
	}
	if t != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	// Everything queued first: meta must see the entries created in the
	// directory (else it removes a directory that is not empty, and their
	// commits fail after), and the directory's own queued changes must
	// not run after the removal.
	n.m.wb.drain()
	if e := n.remove(ctx, p, name, 0); e != 0 {
		return e
	}
	n.linksChanged(-1)
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = n.m.begin(ctx, "unlink")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return errno(ctx, err)
	}
	t, err := n.typeOf(ctx, p, name)
	if err != nil {
		return errno(ctx, err)
	}
	if t == syscall.S_IFDIR {
		return syscall.EISDIR
	}
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			if err := cn.settle(ctx); err != nil {
				n.m.log.Warn("mount: commit before unlink failed", "err", err)
			}
		}
		if cn, ok := ch.Operations().(*node); ok && cn.openCount() > 0 {
			// Open here: meta keeps its data until the last close on
			// any mount (open.go); it is addressed by inode from now.
			e := n.remove(ctx, p, name, ch.StableAttr().Ino)
			if e == 0 {
				cn.f.gone.Store(true)
				cn.unlinked()
			}
			return e
		}
	}
	e := n.remove(ctx, p, name, 0)
	if ch := n.GetChild(name); e == 0 && ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			cn.unlinked() // its other names show the count at once
		}
	}
	return e
}

// remove deletes child name of n (at p) in meta; held is its inode
// number if it is open here (meta keeps it for this session).
func (n *node) remove(ctx context.Context, p, name string, held uint64) syscall.Errno {
	done := n.m.sess.mutating(n.ns, join(p, name))
	r, err := n.m.meta.Delete(ctx, &metapb.DeleteRequest{Ns: n.ns, Path: join(p, name), HeldIno: held})
	if err != nil {
		done(0)
		return errno(ctx, err)
	}
	// By its sequence the session knows the deletion's event for this
	// mount's own: the directory's cached listing and attributes (updated
	// here) stay, and the kernel's next permission check in it costs no
	// Resolve (rm -r made one per file).
	done(r.Seq)
	n.removed(name)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = n.m.begin(ctx, "rename")
	defer end(ctx)
	if err := n.m.readOnly(); err != nil {
		return errno(ctx, err)
	}
	np, ok := newParent.(*node)
	if !ok || np.ns != n.ns {
		return syscall.EXDEV
	}
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT
	}
	p, err := n.path()
	if err != nil {
		return errno(ctx, err)
	}
	q, err := np.path()
	if err != nil {
		return errno(ctx, err)
	}
	from, to := join(p, name), join(q, newName)
	if _, err := childPath(q, newName); err != nil {
		return errno(ctx, err)
	}
	// A directory moving to another parent moves its ".." link; one
	// replacing a directory takes the replaced one's place.
	movedDir, replacedDir := false, false
	if ch := n.GetChild(name); ch != nil {
		movedDir = ch.IsDir()
	}
	if ch := np.GetChild(newName); ch != nil && flags&unix.RENAME_NOREPLACE == 0 {
		replacedDir = ch.IsDir()
	}
	if ch := n.GetChild(name); ch != nil {
		if ch.IsDir() {
			// Queued commits below it name their paths when they run.
			n.m.wb.drain()
		} else if cn, ok := ch.Operations().(*node); ok {
			// Queued and unflushed writes go out under the old name.
			if err := cn.settle(ctx); err != nil {
				return errno(ctx, err)
			}
			if err := cn.flush(ctx); err != nil {
				return errno(ctx, err)
			}
		}
	}
	var held *node
	if ch := np.GetChild(newName); ch != nil && !ch.IsDir() && ch != n.GetChild(name) {
		if cn, ok := ch.Operations().(*node); ok {
			cn.settle(ctx) // the replaced file's queue must not run after
			if flags&unix.RENAME_NOREPLACE == 0 && cn.openCount() > 0 {
				// Open here: it keeps its data until the last close,
				// as if unlinked (see Unlink).
				held = cn
			}
		}
	}
	req := &metapb.RenameRequest{Ns: n.ns, From: from, To: to, NoReplace: flags&unix.RENAME_NOREPLACE != 0}
	if held != nil {
		req.HeldIno = held.StableAttr().Ino
	}
	var moved *node
	if ch := n.GetChild(name); ch != nil {
		moved, _ = ch.Operations().(*node)
	}
	done := n.m.sess.mutating(n.ns, from, to)
	a, err := n.m.meta.Rename(ctx, req)
	if err != nil {
		done(0)
		return errno(ctx, err)
	}
	defer done(a.Seq)
	if moved != nil && moved.StableAttr().Ino == a.Ino {
		moved.renamed(a.CtimeNs)
	}
	n.removed(name)
	np.added(newName, a)
	np.dirChanged(a.CtimeNs)
	switch {
	case movedDir && np != n:
		n.linksChanged(-1)
		if !replacedDir {
			np.linksChanged(1)
		}
	case replacedDir:
		n.linksChanged(-1)
	}
	if held != nil && held.StableAttr().Ino != a.Ino {
		held.f.gone.Store(true)
	}
	if ch := np.GetChild(newName); ch != nil && ch.StableAttr().Ino != a.Ino {
		if cn, ok := ch.Operations().(*node); ok {
			cn.unlinked()
			cn.invalidate() // replaced
		}
	}
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.begin(ctx, "create")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return nil, nil, 0, errno(ctx, err)
	}
	uid, gid := caller(ctx)
	if _, err := childPath(p, name); err != nil {
		return nil, nil, 0, errno(ctx, err) // answered here: meta sees the name only later
	}
	if n.m.wb.enabled() {
		if ch, h, ok := n.createBehind(ctx, p, name, flags, mode, uid, gid, out); ok {
			return ch, h, 0, 0
		}
	}
	epoch := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, join(p, name))
	a, err := n.m.meta.Commit(ctx, &metapb.CommitRequest{
		Ns: n.ns, Path: join(p, name), Etag: emptyETag, Mode: mode & 07777, ModeExact: true, Uid: uid, Gid: gid, IfNoneMatch: true,
	})
	if err != nil {
		done(0)
		return nil, nil, 0, kernelErr(ctx, err)
	}
	defer done(a.Seq)
	n.added(name, a)
	n.dirChanged(a.CtimeNs)
	ch := n.child(ctx, name, a, epoch, out)
	cn := ch.Operations().(*node)
	cn.mu.Lock()
	cn.f.exts, cn.f.extsOK = nil, true
	cn.mu.Unlock()
	h := cn.open(flags)
	return ch, h, 0, 0
}

// createBehind creates a file here and leaves its commit behind: the
// kernel gets an inode number meta reserved for this mount, other mounts
// drop the name (their next look reaches meta, which recalls the commit),
// and the first commit creates the file with that number. The name was
// free: the kernel looked it up first, and a create elsewhere since would
// have dropped this mount's entry before it was acknowledged.
func (n *node) createBehind(ctx context.Context, p, name string, flags, mode, uid, gid uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, bool) {
	ino, err := n.m.wb.allocIno(ctx)
	if err != nil {
		return nil, nil, false
	}
	now := time.Now().UnixNano()
	a := &metapb.Inode{
		Ino: ino, Type: metapb.FileType_REGULAR, Mode: mode & 07777, Uid: uid, Gid: gid,
		MtimeNs: now, CtimeNs: now, AtimeNs: now, Nlink: 1, Etag: emptyETag,
	}
	cn := n.m.newNode(n.ns, a)
	cn.f.creating, cn.f.extsOK = true, true
	// The record is the whole truth while the session is live: no other
	// client can have the file before its create reaches meta (a look
	// there recalls it first). So the session vouches for it from now on,
	// as for an answer of meta: the commit's answer is then trusted
	// (answerEpoch) and the next open of the file on this mount asks meta
	// nothing, until an event about it says otherwise (invalidate). It
	// was never vouched for, and every open after a write and close paid
	// a Resolve (bench mount small: reading back 5,000 files just written
	// ran at 1/6 of the speed it had).
	cn.valid, cn.gen = n.m.sess.live(), n.m.sess.generation()
	if !n.m.wb.enqueueAt(ctx, cn, join(p, name), work{create: true, in: n}) {
		return nil, nil, false
	}
	ch := n.NewInode(ctx, cn, stableOf(a))
	n.m.track(cn)
	n.madeHere(name, cn, a, out)
	return ch, cn.open(flags), true
}

// ---- all namespaces, one directory each ---------------------------------

// nsList is the root when every visible namespace is mounted.
type nsList struct {
	fs.Inode
	m *Mount
}

var (
	_ fs.NodeLookuper  = (*nsList)(nil)
	_ fs.NodeReaddirer = (*nsList)(nil)
	_ fs.NodeGetattrer = (*nsList)(nil)
)

func (l *nsList) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	return 0
}

func (l *nsList) visible(ns *metapb.Namespace) bool {
	return l.m.cfg.Visible == nil || l.m.cfg.Visible(ns)
}

func (l *nsList) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = l.m.begin(ctx, "lookup")
	defer end(ctx)
	ns, err := l.m.meta.GetNamespace(ctx, &metapb.NamespaceRequest{Name: name})
	if err != nil {
		if errors.Is(errors.Invalid, err) {
			return nil, syscall.ENOENT
		}
		return nil, errno(ctx, err)
	}
	if !l.visible(ns) {
		return nil, syscall.ENOENT
	}
	epoch := l.m.sess.epoch()
	r, err := l.m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: name})
	if err != nil {
		return nil, errno(ctx, err)
	}
	// The namespace's root node stays the one paths are computed from:
	// reuse it while the kernel knows it (go-fuse would otherwise keep
	// the old inode and drop a new node).
	l.m.mu.Lock()
	n := l.m.nsRoot[name]
	var ch *fs.Inode
	if n != nil && n.StableAttr().Ino == r.Inode.Ino && !n.Forgotten() {
		ch = &n.Inode
	} else {
		n = l.m.newNode(name, r.Inode)
		ch = l.NewInode(ctx, n, stableOf(r.Inode))
		l.m.nsRoot[name] = n
	}
	l.m.mu.Unlock()
	n.setAttr(r.Inode, epoch)
	n.fill(r.Inode, &out.Attr)
	out.SetEntryTimeout(0) // namespaces come and go without events to the tree
	out.SetAttrTimeout(l.m.timeout())
	return ch, 0
}

func (l *nsList) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx = l.m.begin(ctx, "readdir")
	defer end(ctx)
	r, err := l.m.meta.ListNamespaces(ctx, &metapb.Empty{})
	if err != nil {
		return nil, errno(ctx, err)
	}
	var ents []fuse.DirEntry
	for _, ns := range r.Namespaces {
		if l.visible(ns) {
			ents = append(ents, fuse.DirEntry{Name: ns.Name, Ino: ns.RootIno, Mode: syscall.S_IFDIR})
		}
	}
	return fs.NewListDirStream(ents), 0
}
