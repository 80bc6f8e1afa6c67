package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// node is a file, directory or symlink of one namespace. Its identity is
// the Cairn inode number; its path (which meta's API takes) is where the
// kernel last found it.
type node struct {
	fs.Inode
	m  *Mount
	ns string

	mu sync.Mutex
	// attr is the last inode record seen; valid says the session has not
	// invalidated it since (and gen that no session reset has).
	attr  *metapb.Inode
	valid bool
	gen   uint64
	// Directories: the children seen by a complete listing, trusted
	// like attr (a lookup of a name not in it is answered locally).
	kids     map[string]*metapb.Inode
	complete bool
	listGen  uint64
	// Regular files: see file.go.
	f fileState
	// Commits left behind by close and attribute changes (writeback.go).
	wb chain
	// mkdirTicket orders the commit of a directory made here (mkdirGate).
	mkdirTicket uint64
	// A file or directory created here, its create queued: the
	// directory it was made in and its place in the order of creates
	// (writeBehind.made). A directory: its children so made, and the
	// last create before its mtime was set (commitTimes).
	madeIn     *node
	madeTicket uint64
	queuedKids map[*node]uint64
	timesAfter uint64
}

var (
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
)

func (m *Mount) newNode(ns string, ino *metapb.Inode) *node {
	return &node{m: m, ns: ns, attr: ino}
}

func stableOf(ino *metapb.Inode) fs.StableAttr {
	return fs.StableAttr{Mode: typeBits(ino.Type), Ino: ino.Ino}
}

func typeBits(t metapb.FileType) uint32 {
	switch t {
	case metapb.FileType_DIRECTORY:
		return syscall.S_IFDIR
	case metapb.FileType_SYMLINK:
		return syscall.S_IFLNK
	case metapb.FileType_FIFO:
		return syscall.S_IFIFO
	case metapb.FileType_CHAR_DEVICE:
		return syscall.S_IFCHR
	case metapb.FileType_BLOCK_DEVICE:
		return syscall.S_IFBLK
	case metapb.FileType_SOCKET:
		return syscall.S_IFSOCK
	}
	return syscall.S_IFREG
}

func (n *node) isDir() bool { return n.StableAttr().Mode == syscall.S_IFDIR }

// path is n's path inside its namespace ("" for the root), from the
// kernel's view of the tree. An inode no longer reachable (unlinked while
// open, here or by another mount) answers "": meta is asked by inode
// number (open.go).
func (n *node) path() (string, error) {
	if n.f.gone.Load() {
		return "", nil // by inode number (open.go)
	}
	n.m.mu.Lock()
	root := n.m.nsRoot[n.ns]
	n.m.mu.Unlock()
	var parts []string
	cur := &n.Inode
	for cur != &root.Inode {
		name, parent := cur.Parent()
		if parent == nil {
			if q := n.f.queuedAt.Load(); q != nil && n.busy() {
				return *q, nil
			}
			if n.f.held.Load() {
				return "", nil // open, its name gone: by inode number
			}
			return "", syscall.ESTALE
		}
		parts = append(parts, name)
		cur = parent
	}
	p := ""
	for i := len(parts) - 1; i >= 0; i-- {
		if p != "" {
			p += "/"
		}
		p += parts[i]
	}
	return p, nil
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// cached returns n's attributes if the session vouches for them.
func (n *node) cached() *metapb.Inode {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.valid && n.gen == n.m.sess.generation() && n.attr != nil && n.m.sess.live() {
		return n.attr
	}
	return nil
}

// unvouched is an epoch the session never reaches: a record set with it
// is kept but not trusted (setAttrLocked).
const unvouched = ^uint64(0)

// answerEpoch returns the epoch to record the answer of a call about n,
// made with ctx and starting now, with (n.mu held). A write-behind commit
// (chainContext: meta's DrainHeader) is served without recalling the other
// mounts, so its answer does not hold what another mount closed and has
// not committed yet. The notice of that close (MountDirty) already made n
// invalid here, once per path and dirty epoch of the other mount, and
// such an answer must not make n valid again: it did, and a read on this
// mount after every writer's close had returned used the commit's extents
// without asking meta, which would have recalled the other mount first
// (TestConcurrentWritersTwoMounts: the other mount's writers' ranges held
// older rounds). So it keeps n as valid as it was.
func (n *node) answerEpoch(ctx context.Context) uint64 {
	if ctx.Value(inChainKey{}) != nil && !n.vouched() {
		return unvouched
	}
	return n.m.sess.epoch()
}

// vouched reports whether the session vouches for n's record (n.mu held).
func (n *node) vouched() bool {
	return n.valid && n.gen == n.m.sess.generation() && n.m.sess.live()
}

// localAhead reports whether n's own record answers although the session
// does not vouch for it, because work of this mount is queued for it:
// then the local record is newer than meta's (a create meta does not
// have yet, writes not committed yet). Not when another mount's change
// made it invalid while the session is live: the other mount may have
// closed writes of its own, which only meta's recall brings, so the
// caller settles this mount's queue and asks meta. The write-behind
// chain itself keeps using the local record (it lays its writes over the
// newest version with a conditional commit anyway).
func (n *node) localAhead(ctx context.Context) bool {
	if !n.busy() {
		return false
	}
	if ctx.Value(inChainKey{}) != nil || !n.m.sess.live() {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gen != n.m.sess.generation() // a reset: meta may not have it yet
}

// setAttr records an inode record fetched or returned by a call that
// started at session epoch ep: it is trusted only if no event came since.
func (n *node) setAttr(ino *metapb.Inode, ep uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.setAttrLocked(ino, ep)
}

func (n *node) setAttrLocked(ino *metapb.Inode, ep uint64) {
	if n.attr != nil && n.attr.Ino == ino.Ino && n.attr.Version > ino.Version {
		return // an older answer arriving late
	}
	if n.attr != nil && n.attr.Version != ino.Version {
		// The extents belong to the old version; a read that started on
		// them must start again (see base).
		n.f.exts, n.f.extsOK = nil, false
		n.f.commit++
	}
	n.attr = ino
	n.valid = ep == n.m.sess.epoch() && n.m.sess.live()
	n.gen = n.m.sess.generation()
}

// tellParent updates the parent's listing with n's new record (the
// mount's own changes: their events are not applied to it).
func (n *node) tellParent(a *metapb.Inode) {
	if n.f.gone.Load() {
		return // its name is another file's, or none
	}
	if name, parent := n.Parent(); parent != nil {
		if pn, ok := parent.Operations().(*node); ok {
			pn.added(name, a)
		}
	}
}

// listed reports whether n's complete listing may answer (n.mu held).
func (n *node) listed() bool {
	return n.complete && n.listGen == n.m.sess.generation() && n.m.sess.live()
}

// invalidate drops what the session vouched for.
func (n *node) invalidate() {
	n.mu.Lock()
	n.valid = false
	n.complete = false
	n.kids = nil
	n.mu.Unlock()
}

// stat returns n's attributes, from the cache or with one Resolve.
func (n *node) stat(ctx context.Context) (*metapb.Inode, error) {
	if a := n.cached(); a != nil {
		return a, nil
	}
	if n.localAhead(ctx) {
		// Changes of this mount are queued for meta: the local record is
		// the newer one.
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.attr, nil
	}
	// This mount's queued commits first: meta's record is older until
	// they land (an error is left for the next close or fsync).
	n.waitQueue()
	p, err := n.path()
	if err == syscall.ESTALE {
		// No longer reachable by a name (replaced while being opened):
		// a descriptor's fstat shows the file it has, as last seen.
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.attr != nil {
			return n.attr, nil
		}
	}
	if err != nil {
		return nil, err
	}
	ep := n.m.sess.epoch()
	var r *metapb.ResolveResponse
	err = retry(ctx, func() (err error) {
		r, err = n.m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: n.ns, Path: p})
		return err
	})
	if err == nil && r.Inode.Ino != n.StableAttr().Ino || errors.Is(errors.NotExist, err) {
		// The name was removed or now names another file (renamed over
		// on this or another mount): never take that file's record for
		// this one; show this file as last seen, as a descriptor's
		// fstat must.
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.attr != nil {
			return n.attr, nil
		}
		if err == nil {
			err = errors.E(errors.Stale, errors.Path(n.ns+"/"+p), "the path names another file now")
		}
	}
	if err != nil {
		return nil, err
	}
	n.setAttr(r.Inode, ep)
	return r.Inode, nil
}

// fill writes a's attributes to out, with the size a file's unflushed
// writes give it. The record and the dirty state are read together: a
// flush that lands between a caller's look at the record and this one
// takes the writes out of the dirty state and puts the record that holds
// them in n.attr, and answering with the older record's size then would
// shrink the file in the kernel. So the newer of a and n.attr answers.
func (n *node) fill(a *metapb.Inode, out *fuse.Attr) {
	n.mu.Lock()
	if n.attr != nil && n.attr.Ino == a.Ino && n.attr.Version >= a.Version {
		a = n.attr
	}
	size := a.Size
	mtime, ctime := a.MtimeNs, a.CtimeNs
	if n.f.hasDirty() {
		size = uint64(n.f.size)
		w := n.f.wroteAt.Load()
		mtime, ctime = max(mtime, w), max(ctime, w)
	}
	n.mu.Unlock()
	out.Ino = a.Ino
	out.Mode = typeBits(a.Type) | a.Mode&07777
	out.Nlink = n.nlink(a)
	out.Rdev = a.Rdev
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Size = size
	if a.Type == metapb.FileType_SYMLINK {
		out.Size = uint64(len(a.SymlinkTarget))
	}
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	at := time.Unix(0, atimeOf(a))
	mt := time.Unix(0, mtime)
	ct := time.Unix(0, ctime)
	out.SetTimes(&at, &mt, &ct)
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx = n.m.begin(ctx, "getattr")
	defer end(ctx)
	a, err := n.stat(ctx)
	if err != nil {
		return errno(ctx, err)
	}
	n.fill(a, &out.Attr)
	out.SetTimeout(n.m.timeout())
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = n.m.begin(ctx, "setattr")
	defer end(ctx)
	p, err := n.writable()
	if err != nil {
		return errno(ctx, err)
	}
	req := &metapb.SetAttrRequest{Ns: n.ns, Path: p, OpenIno: n.openIno()}
	if m, ok := in.GetMode(); ok {
		m &= 07777
		req.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		req.Uid = &u
	}
	if g, ok := in.GetGID(); ok {
		req.Gid = &g
	}
	if t, ok := in.GetMTime(); ok {
		ns := t.UnixNano()
		req.MtimeNs = &ns
		n.f.wroteAt.Store(ns) // unflushed writes now show (and commit) this mtime
	}
	if t, ok := in.GetATime(); ok {
		ns := t.UnixNano()
		req.AtimeNs = &ns
	}
	if req.Mode == nil && !n.isDir() {
		// The kernel leaves dropping set-ID bits to us (fs.go): on a
		// change of owner, and on an unprivileged truncate.
		chown := req.Uid != nil || req.Gid != nil
		if chown || in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
			if m, drop, err := n.setIDDropped(ctx); err != nil {
				return errno(ctx, err)
			} else if drop {
				req.Mode = &m
			}
		}
	}
	if sz, ok := in.GetSize(); ok {
		// Unflushed writes first, so the cut applies to them too.
		if err := n.flush(ctx); err != nil {
			return errno(ctx, err)
		}
		req.Size = &sz
	}
	if req.Mode == nil && req.Uid == nil && req.Gid == nil && req.MtimeNs == nil && req.AtimeNs == nil && req.Size == nil {
		return n.Getattr(ctx, fh, out)
	}
	if req.Size == nil && (n.isFile() || n.isDir()) && n.setAttrBehind(ctx, req, out) {
		return 0
	}
	if req.MtimeNs != nil && n.isDir() {
		n.m.wb.kidsQueued(n) // their creates move the mtime: before it is set
	}
	if err := n.settle(ctx); err != nil {
		return errno(ctx, err)
	}
	ep := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, p)
	a, err := n.m.meta.SetAttr(ctx, req)
	if err != nil {
		done(0)
		return errno(ctx, err)
	}
	n.mu.Lock()
	exts, ok := n.f.exts, n.f.extsOK
	n.setAttrLocked(a, ep)
	if req.Size == nil {
		n.f.exts, n.f.extsOK = exts, ok // attributes only: the content is as it was
	}
	n.mu.Unlock()
	n.tellParent(a)
	done(a.Seq)
	n.fill(a, &out.Attr)
	out.SetTimeout(n.m.timeout())
	return 0
}

// setIDDropped returns n's permission bits without set-user-ID, and
// without set-group-ID if the file is group-executable, as a local file
// system leaves them after a change of owner or of content; drop says
// there was something to drop.
func (n *node) setIDDropped(ctx context.Context) (mode uint32, drop bool, err error) {
	a, err := n.stat(ctx)
	if err != nil {
		return 0, false, err
	}
	m := a.Mode & 07777
	mode = m &^ syscall.S_ISUID
	if m&syscall.S_IXGRP != 0 {
		mode &^= syscall.S_ISGID
	}
	return mode, mode != m, nil
}

// dropSetID drops n's set-ID bits before a change of content by a caller
// without CAP_FSETID (anyone but root, here), as the kernel does for a
// local file system and leaves to us (fs.go).
func (n *node) dropSetID(ctx context.Context) error {
	if uid, _ := caller(ctx); uid == 0 {
		return nil
	}
	m, drop, err := n.setIDDropped(ctx)
	if err != nil || !drop {
		return err
	}
	var out fuse.AttrOut
	if e := n.Setattr(ctx, nil, &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{Valid: fuse.FATTR_MODE, Mode: m}}, &out); e != 0 {
		return e
	}
	return nil
}

// setAttrBehind applies an attribute change locally and queues it for
// meta (tar sets owner, mode and times of every file right after writing
// it, and of every directory at the end: three synchronous commits each
// otherwise).
func (n *node) setAttrBehind(ctx context.Context, req *metapb.SetAttrRequest, out *fuse.AttrOut) bool {
	n.mu.Lock()
	if n.attr == nil {
		n.mu.Unlock()
		return false
	}
	a := proto.Clone(n.attr).(*metapb.Inode)
	if req.Mode != nil {
		a.Mode = *req.Mode
	}
	if req.Uid != nil {
		a.Uid = *req.Uid
	}
	if req.Gid != nil {
		a.Gid = *req.Gid
	}
	if req.MtimeNs != nil {
		a.MtimeNs = *req.MtimeNs
	}
	if req.AtimeNs != nil {
		a.AtimeNs = *req.AtimeNs
	}
	a.CtimeNs = time.Now().UnixNano()
	old := n.attr
	n.attr = a
	n.mu.Unlock()
	queued := n.m.wb.enqueue(ctx, n, work{attrs: req})
	if !queued {
		n.mu.Lock()
		if n.attr == a {
			n.attr = old
		}
		n.mu.Unlock()
		return false
	}
	n.fill(a, &out.Attr)
	out.SetTimeout(n.m.timeout())
	return true
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	// Capacity is not reported by meta yet: show a large, mostly free
	// file system so that tools that check free space proceed.
	const bs = 1 << 20
	out.Bsize, out.Frsize = bs, bs
	out.Blocks = 1 << 30
	out.Bfree, out.Bavail = 1<<30, 1<<30
	out.Files, out.Ffree = 1<<40, 1<<40
	out.NameLen = 255
	return 0
}

// child returns the node for a child inode record, creating or reusing
// the kernel-facing inode, and fills out.
func (n *node) child(ctx context.Context, name string, a *metapb.Inode, ep uint64, out *fuse.EntryOut) *fs.Inode {
	ch := n.GetChild(name)
	var cn *node
	if ch != nil && ch.StableAttr().Ino == a.Ino {
		cn = ch.Operations().(*node)
	} else if kn := n.m.wb.revive(a.Ino); kn != nil && kn.ns == n.ns {
		ch = n.NewInode(ctx, kn, stableOf(a)) // forgotten with work queued: the same node again
		cn = kn
		// Its record is newer than meta's; a directory's listing, though,
		// was out of the tree's reach of invalidations: ask again.
		cn.mu.Lock()
		cn.complete, cn.kids = false, nil
		cn.mu.Unlock()
	} else {
		cn = n.m.newNode(n.ns, a)
		ch = n.NewInode(ctx, cn, stableOf(a))
		cn = ch.Operations().(*node) // an inode already known (hard link) is reused
	}
	n.m.track(cn)
	cn.mu.Lock()
	if cn.attr != nil && cn.attr.Ino == a.Ino && (cn.attr.Version > a.Version || cn.busy()) {
		a = cn.attr // the listing that answered is older than what the node knows
	} else {
		cn.setAttrLocked(proto.Clone(a).(*metapb.Inode), ep)
	}
	cn.mu.Unlock()
	cn.fill(a, &out.Attr)
	t := n.m.timeout()
	out.SetEntryTimeout(t)
	out.SetAttrTimeout(t)
	return ch
}

// kernelErr is errno for a meta error about a name in n.
func kernelErr(ctx context.Context, err error) syscall.Errno {
	if errors.Is(errors.Precondition, err) {
		return syscall.EEXIST
	}
	return errno(ctx, err)
}
