package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"cairn/client"
	"cairn/errors"
	"cairn/proto/metapb"
)

// handle is an open regular file. Data and write-back state live on the
// node (shared by every handle of the inode); the handle keeps its open
// mode and its readahead state.
type handle struct {
	n      *node
	append bool

	mu     sync.Mutex
	next   int64 // where a sequential reader reads next
	streak int   // sequential reads in a row
	ahead  int64 // file offset up to which readahead was started

	locks handleLocks // lock owners that locked through it (lock.go)
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
	_ fs.NodeOpener   = (*node)(nil)
)

func (n *node) open(flags uint32) *handle {
	n.mu.Lock()
	n.f.opens++
	if n.f.opens == 1 {
		n.m.opening(n)
	}
	n.mu.Unlock()
	n.m.track(n) // used: the last to be dropped from the kernel's cache
	return &handle{n: n, append: flags&syscall.O_APPEND != 0}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.begin(ctx, "open")
	defer end(ctx)
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		if err := n.m.readOnly(); err != nil {
			return nil, 0, errno(ctx, err)
		}
	}
	if !n.isFile() {
		return nil, 0, syscall.EISDIR
	}
	// Announced before it is checked (open.go): an unlink by another
	// mount that this check does not see yet keeps the file for it.
	h := n.open(flags)
	// Close-to-open: the attributes and extents must be current, which
	// the session vouches for when they are cached (no meta call) and a
	// Resolve establishes otherwise.
	b, err := n.baseBy(ctx, true)
	a := b.attr
	if err != nil {
		n.closed()
	}
	if errors.Is(errors.Stale, err) {
		// The name the kernel looked up was renamed over meanwhile (the
		// kernel's own retry of an ESTALE open can lose the same race
		// again): this file is no longer there, and the other must not be
		// opened as this one.
		return nil, 0, syscall.ENOENT
	}
	if err != nil {
		return nil, 0, errno(ctx, err)
	}
	var fuseFlags uint32
	n.mu.Lock()
	if n.f.pageVersion == a.Version {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	n.f.pageVersion = a.Version
	n.mu.Unlock()
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && !n.m.locks.holds(n.ns, n.StableAttr().Ino, 0) {
		// Nothing to flush at the close of a read-only descriptor: the
		// kernel skips the round trip (a quarter of a small file's
		// open, read, close). A failed background commit is still
		// reported by the next close of a writer or fsync. Unless a
		// POSIX lock is held on the file here: a close by its owner
		// releases it (lock.go). (A lock taken after this open is
		// released by its unlock, or by the close of another
		// descriptor.)
		fuseFlags |= fuse.FOPEN_NOFLUSH
	}
	return h, fuseFlags, 0
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	ctx = h.n.m.begin(ctx, "read")
	defer end(ctx)
	h.n.m.cl.NoteReadIno(h.n.ns, h.n.StableAttr().Ino) // for tiering: reads served by the mount's caches (client/readnotes.go)
	if b, ok, err := h.n.readDirect(ctx, h, off, int64(len(dest))); err != nil {
		return nil, errno(ctx, err)
	} else if ok {
		h.n.accessed(ctx)
		return fuse.ReadResultData(b), 0
	}
	k, err := h.n.readAt(ctx, h, dest, off)
	if err != nil {
		return nil, errno(ctx, err)
	}
	h.n.accessed(ctx)
	return fuse.ReadResultData(dest[:k]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx = h.n.m.begin(ctx, "write")
	defer end(ctx)
	if err := h.n.dropSetID(ctx); err != nil {
		return 0, errno(ctx, err)
	}
	if h.append {
		// O_APPEND is atomic across mounts: the data goes to meta's
		// Append, which places it at the end as of the commit.
		if err := h.n.appendData(ctx, data); err != nil {
			return 0, errno(ctx, err)
		}
		return uint32(len(data)), 0
	}
	if err := h.n.writeAt(ctx, data, off); err != nil {
		return 0, errno(ctx, err)
	}
	return uint32(len(data)), 0
}

func (n *node) appendData(ctx context.Context, data []byte) error {
	if err := n.settle(ctx); err != nil {
		return err
	}
	if err := n.flush(ctx); err != nil {
		return err
	}
	ino := n.openIno()
	p, err := n.path()
	if err != nil && ino == 0 {
		return err
	}
	if err != nil {
		p = "" // unlinked: by inode alone
	}
	exts, err := n.m.upload(ctx, n.ns, data)
	if err != nil {
		return err
	}
	epoch := n.m.sess.epoch()
	done := n.m.sess.mutating(n.ns, p)
	// By inode while the file is open here (it always is: O_APPEND is an
	// open flag): another mount may have renamed or unlinked its name.
	a, err := n.m.meta.Append(ctx, &metapb.AppendRequest{Ns: n.ns, Path: p, Extents: exts, OpenIno: ino})
	if err != nil {
		done(0)
		if client.Refused(err) { // otherwise it may have applied (file.go flush)
			n.m.cl.Discard(exts)
		}
		return err
	}
	defer done(a.Seq)
	n.mu.Lock()
	n.setAttrLocked(a, epoch)
	n.f.exts, n.f.extsOK = nil, false
	n.f.pageVersion = a.Version
	n.mu.Unlock()
	n.tellParent(a)
	return nil
}

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	ctx = h.n.m.begin(ctx, "flush")
	defer end(ctx)
	err := h.n.flushBehind(ctx)
	h.dropLocks(ctx, false)
	return errno(ctx, err)
}

// flushBehind commits n's unflushed writes in the background when it can
// (writeback.go), else now. An earlier background failure is reported.
func (n *node) flushBehind(ctx context.Context) error {
	n.wb.mu.Lock()
	err := n.wb.err
	n.wb.err = nil
	n.wb.mu.Unlock()
	if err != nil {
		return err
	}
	n.mu.Lock()
	dirty := n.f.sized || n.f.creating // a close also starts a parked create
	bytes := n.f.nDirty
	n.mu.Unlock()
	if !dirty {
		return nil
	}
	if n.m.wb.enqueue(ctx, n, work{flush: true, bytes: bytes}) {
		return nil
	}
	err = n.flush(ctx)
	// A create parked here (the queue was full for this close's bytes)
	// is in meta now: its chain has nothing left but to say so.
	n.m.wb.unpark(n)
	return err
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	// Commit is durable when meta answers (data servers fsync needles,
	// meta syncs its WAL before it acknowledges).
	ctx = h.n.m.begin(ctx, "fsync")
	defer end(ctx)
	if err := h.n.settle(ctx); err != nil {
		return errno(ctx, err)
	}
	return errno(ctx, h.n.flush(ctx))
}

// Fsync of a node: a file's goes to its handle; a directory's makes its
// entries durable: everything queued here is committed, then meta syncs
// its log (mkdir answers before that sync).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	if !n.isDir() {
		return (&handle{n: n}).Fsync(ctx, flags)
	}
	ctx = n.m.begin(ctx, "fsyncdir")
	defer end(ctx)
	n.m.wb.drain()
	return errno(ctx, retry(ctx, func() error {
		_, err := n.m.meta.Sync(ctx, &metapb.Empty{})
		return err
	}))
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = h.n.m.begin(ctx, "release")
	defer end(ctx)
	n := h.n
	err := n.flushBehind(ctx)
	h.dropLocks(ctx, true)
	n.closed()
	return errno(ctx, err)
}

// readahead notices sequential (or nearly sequential) reading and starts
// background fetches of the blocks ahead, the window doubling with the
// streak up to Config.Readahead blocks.
func (h *handle) readahead(n *node, exts []*metapb.Extent, committed, off, length int64) {
	bs := n.m.cfg.BlockSize
	h.mu.Lock()
	d := off - h.next
	if d >= -2*bs && d <= 2*bs {
		h.streak++
	} else {
		h.streak, h.ahead = 0, 0
	}
	h.next = off + length
	if h.streak < 2 {
		h.mu.Unlock()
		return
	}
	window := min(int64(1)<<min(h.streak, 20), int64(n.m.cfg.Readahead)) * bs
	from := max(h.ahead, off+length)
	to := min(off+length+window, committed)
	if from >= to {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	started := n.m.blocks.prefetch(exts, committed, from, to)
	h.mu.Lock()
	h.ahead = max(h.ahead, started)
	h.mu.Unlock()
}
