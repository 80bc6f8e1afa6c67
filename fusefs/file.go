package fusefs

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"cairn/client"
	"cairn/errors"
	"cairn/proto/metapb"
)

// fileState is a regular file's write-back state, guarded by node.mu.
//
// Writes land in dirty, sorted non-overlapping spans (a sequential writer
// grows one span in place). Flush (close, fsync, a full buffer) uploads the
// spans as needles and commits the old extents overlaid by the new ones in
// one meta call: readers elsewhere see the old file or the new one.
type fileState struct {
	exts   []*metapb.Extent // committed extents of node.attr's version
	extsOK bool
	dirty  []span
	nDirty int64 // bytes in dirty
	size   int64 // the file's size including unflushed writes (when dirty)
	sized  bool  // size was set by a write since the last flush
	commit uint64
	opens  int
	// gone: unlinked (or renamed over) here while open; held: open here
	// and announced to meta, which keeps it by inode number (open.go).
	gone atomic.Bool
	held atomic.Bool
	// queuedAt is the path work was last queued for: the node's path when
	// the kernel has not linked it into the tree yet (a create's commit
	// may run before Create returns) or has already forgotten it (queued
	// work outlives the kernel's inode). Renames wait for queued work.
	queuedAt atomic.Pointer[string]
	// pageVersion is the inode version the kernel's page cache holds.
	pageVersion uint64
	// creating: created by this mount and not yet committed (the first
	// commit creates it with the inode number the kernel was given).
	creating bool
	// writes counts the writes recorded (write), and packing, while a
	// packer's group commits the file's bytes (pack.go), is closed when it
	// is done: another flush waits for it, and a write made meanwhile
	// stays unflushed over the group's commit.
	writes  uint64
	packing chan struct{}
	// wroteAt is the time of the last write (unix ns): the mtime stat
	// shows while writes are unflushed and the one their commit stores,
	// so the file's mtime does not move when a commit left behind lands.
	wroteAt atomic.Int64
}

type span struct {
	off  int64
	data []byte
}

func (s span) end() int64 { return s.off + int64(len(s.data)) }

func (f *fileState) hasDirty() bool { return f.sized }

// write records data at off, merging it with the spans it overlaps or
// touches.
func (f *fileState) write(off int64, data []byte, size int64) {
	f.wroteAt.Store(time.Now().UnixNano())
	f.writes++
	if !f.sized {
		f.size, f.sized = size, true
	}
	end := off + int64(len(data))
	i := sort.Search(len(f.dirty), func(i int) bool { return f.dirty[i].end() >= off })
	j := sort.Search(len(f.dirty), func(i int) bool { return f.dirty[i].off > end })
	if i == j {
		// Sized to the write (page-rounded): a 4 KB file must not hold
		// 64 KiB until its commit; a sequential writer grows the span by
		// doubling below.
		s := span{off: off, data: append(make([]byte, 0, (len(data)+4095)&^4095), data...)}
		f.dirty = append(f.dirty, span{})
		copy(f.dirty[i+1:], f.dirty[i:])
		f.dirty[i] = s
		f.nDirty += int64(len(data))
	} else {
		lo, hi := min(f.dirty[i].off, off), max(f.dirty[j-1].end(), end)
		var old int64
		for _, s := range f.dirty[i:j] {
			old += int64(len(s.data))
		}
		first := f.dirty[i]
		var buf []byte
		if lo == first.off && int64(cap(first.data)) >= hi-lo {
			buf = first.data[:hi-lo]
		} else {
			buf = make([]byte, hi-lo, max(hi-lo, 2*int64(cap(first.data))))
			copy(buf[first.off-lo:], first.data)
		}
		for _, s := range f.dirty[i+1 : j] {
			copy(buf[s.off-lo:], s.data)
		}
		copy(buf[off-lo:], data)
		f.dirty[i] = span{off: lo, data: buf}
		f.dirty = append(f.dirty[:i+1], f.dirty[j:]...)
		f.nDirty += hi - lo - old
	}
	f.size = max(f.size, end)
}

// overlay copies the dirty bytes that fall in [off, off+len(buf)) into buf.
func (f *fileState) overlay(off int64, buf []byte) {
	end := off + int64(len(buf))
	for _, s := range f.dirty {
		if s.end() <= off || s.off >= end {
			continue
		}
		lo, hi := max(s.off, off), min(s.end(), end)
		copy(buf[lo-off:hi-off], s.data[lo-s.off:hi-s.off])
	}
}

func (n *node) openCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.f.opens
}

// extents returns the committed extents and size of the file's current
// version, with one Resolve when they are not known.
func (n *node) extents(ctx context.Context) ([]*metapb.Extent, *metapb.Inode, error) {
	b, err := n.baseBy(ctx, false)
	return b.exts, b.attr, err
}

// base is one committed version of a file: its extents and inode record,
// and the flush counter they belong to. A reader compares commit with
// node.f.commit under node.mu to know whether a flush (a write-behind one
// may finish at any time) swapped the base since: trusting an old record's
// size would answer a short read, which the kernel takes as the new end of
// the file.
type base struct {
	exts   []*metapb.Extent
	attr   *metapb.Inode
	commit uint64
}

func (n *node) base(ctx context.Context) (base, error) { return n.baseBy(ctx, false) }

// baseBy is base; byPath looks the file up by its path only, as an open
// must (the name may have been given to another file: the kernel then
// looks it up again), not through an open descriptor's inode number.
func (n *node) baseBy(ctx context.Context, byPath bool) (base, error) {
	for attempt := 0; ; attempt++ {
		ahead := n.localAhead(ctx)
		n.mu.Lock()
		if n.f.extsOK && (n.vouched() || ahead) {
			defer n.mu.Unlock()
			return base{n.f.exts, n.attr, n.f.commit}, nil
		}
		n.mu.Unlock()
		if err := n.settle(ctx); err != nil {
			return base{}, err
		}
		p, err := n.path()
		if err != nil {
			return base{}, err
		}
		epoch := n.m.sess.epoch()
		ino := n.openIno()
		if byPath {
			ino = 0
		}
		r, err := n.resolveExtentsOf(ctx, p, ino)
		if err != nil {
			return base{}, err
		}
		if r.ByIno {
			n.f.gone.Store(true) // its name went elsewhere: by inode from now
		}
		if r.Inode.Ino != n.StableAttr().Ino {
			// Another client put another file (or a symlink) at the path
			// since the kernel looked it up: never serve it as this one.
			// ESTALE makes the kernel look the path up again on open.
			return base{}, errors.E(errors.Stale, errors.Path(n.ns+"/"+p), "the path names another file now")
		}
		n.mu.Lock()
		if n.attr != nil && n.attr.Ino == r.Inode.Ino && n.attr.Version > r.Inode.Version {
			// A commit of a newer version landed while the Resolve was
			// out: its extents, if known, are the ones; else ask again
			// (installing the older ones would pair them with the newer
			// record).
			if n.f.extsOK {
				defer n.mu.Unlock()
				return base{n.f.exts, n.attr, n.f.commit}, nil
			}
			n.mu.Unlock()
			if attempt == 8 {
				return base{}, errors.E(errors.Stale, "meta keeps answering an older version than this mount holds")
			}
			continue
		}
		n.setAttrLocked(r.Inode, epoch)
		n.f.exts, n.f.extsOK = r.Extents, true
		defer n.mu.Unlock()
		return base{r.Extents, r.Inode, n.f.commit}, nil
	}
}

// resolveExtents fetches the file at p with its extents, riding through a
// meta restart.
func (n *node) resolveExtents(ctx context.Context, p string) (*metapb.ResolveResponse, error) {
	return n.resolveExtentsOf(ctx, p, n.openIno())
}

// resolveExtentsOf is resolveExtents; ino (0: none) names the open file
// meant when p names another one or none.
func (n *node) resolveExtentsOf(ctx context.Context, p string, ino uint64) (*metapb.ResolveResponse, error) {
	var r *metapb.ResolveResponse
	err := retry(ctx, func() (err error) {
		r, err = n.m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: n.ns, Path: p, WantExtents: true, Ino: ino})
		return err
	})
	return r, err
}

// readAt fills dest from off: committed content through the block cache,
// then the unflushed writes on top. It returns the bytes read (short at
// the end of the file).
func (n *node) readAt(ctx context.Context, h *handle, dest []byte, off int64) (int, error) {
	gone := 0
	for {
		b, err := n.base(ctx)
		if err != nil {
			return 0, err
		}
		exts, a, commit := b.exts, b.attr, b.commit
		n.mu.Lock()
		if n.f.commit != commit {
			n.mu.Unlock()
			continue
		}
		size := int64(a.Size)
		if n.f.sized {
			size = n.f.size
		}
		n.mu.Unlock()
		if off >= size {
			return 0, nil
		}
		buf := dest[:min(int64(len(dest)), size-off)]
		if err := n.m.blocks.read(ctx, exts, int64(a.Size), off, buf); err != nil {
			if (errors.Is(errors.NotExist, err) || capRefused(err)) && gone < 3 {
				// Another mount replaced the content and the garbage
				// collector took the old needles before this mount heard
				// of it: read the current version. Or the client evicted
				// the needles' capabilities (it keeps a bounded number):
				// the lookup brings them back.
				gone++
				n.mu.Lock()
				if n.f.commit == commit {
					n.f.extsOK = false
				}
				n.mu.Unlock()
				continue
			}
			return 0, err
		}
		if h != nil {
			h.readahead(n, exts, int64(a.Size), off, int64(len(buf)))
		}
		n.mu.Lock()
		if n.f.commit != commit {
			// A flush swapped the base under us: read again.
			n.mu.Unlock()
			continue
		}
		n.f.overlay(off, buf)
		n.mu.Unlock()
		return len(buf), nil
	}
}

// readDirect serves a read from one cached block without copying it, when
// the file has no unflushed writes and the range lies in one block.
func (n *node) readDirect(ctx context.Context, h *handle, off, length int64) ([]byte, bool, error) {
	v, err := n.base(ctx)
	if err != nil {
		return nil, false, err
	}
	exts, commit := v.exts, v.commit
	n.mu.Lock()
	dirty := n.f.sized || n.f.commit != commit
	n.mu.Unlock()
	size := int64(v.attr.Size)
	if dirty || off >= size {
		return nil, false, nil
	}
	length = min(length, size-off)
	b, ok, err := n.m.blocks.slice(ctx, exts, off, length)
	if errors.Is(errors.NotExist, err) || capRefused(err) {
		return nil, false, nil // readAt reads the current version
	}
	if !ok || err != nil {
		return nil, false, err
	}
	h.readahead(n, exts, size, off, length)
	n.mu.Lock()
	same := !n.f.sized && n.f.commit == commit
	n.mu.Unlock()
	return b, same, nil
}

// capRefused says whether a data server refused a read's capability
// (evicted by the client, or expired past renewal).
func capRefused(err error) bool {
	return errors.Is(errors.Permission, err) || errors.Is(errors.Unauthenticated, err)
}

// writeAt buffers a write.
func (n *node) writeAt(ctx context.Context, data []byte, off int64) error {
	if _, _, err := n.extents(ctx); err != nil { // the size to grow from
		return err
	}
	n.mu.Lock()
	n.f.write(off, data, int64(n.attr.Size))
	full := n.f.nDirty >= n.m.cfg.DirtyMax
	n.mu.Unlock()
	if full {
		return n.flush(ctx)
	}
	return nil
}

// flush commits the unflushed writes, if any. It holds node.mu across the
// upload and the commit: reads and writes of this one file wait for it,
// which keeps a read from ever seeing a half-swapped base. A store that is
// away (meta restarting, no data server placeable yet) is waited for, as
// every other operation waits: close() and fsync() must not turn a
// restart into EIO. A retry is safe: the writes stay dirty until a commit
// succeeds, and one that did apply unseen makes the next attempt's
// condition fail, which lays them over the new version again.
func (n *node) flush(ctx context.Context) error {
	return retry(ctx, func() error {
		_, err := n.flushAt(ctx, 0)
		return err
	})
}

// flushAt is flush with the commit's mtime (0: now); committed reports
// whether there was anything to commit.
func (n *node) flushAt(ctx context.Context, mtime int64) (committed bool, err error) {
	if !n.isFile() {
		return false, nil
	}
	p, err := n.path()
	if err != nil {
		return false, err
	}
	if _, _, err := n.extents(ctx); err != nil {
		return false, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.f.packing != nil {
		// A packer's group is committing the file (pack.go): after it.
		ch := n.f.packing
		n.mu.Unlock()
		<-ch
		n.mu.Lock()
	}
	if !n.f.sized {
		return false, nil
	}
	if mtime == 0 {
		mtime = n.f.wroteAt.Load()
	}
	size := n.f.size
	var dirtyEnd int64
	if k := len(n.f.dirty); k > 0 {
		dirtyEnd = n.f.dirty[k-1].end()
	}
	var upd []*metapb.Extent
	for _, s := range n.f.dirty {
		exts, err := n.m.upload(ctx, n.ns, s.data)
		if err != nil {
			n.m.cl.Discard(upd) // the spans stored so far: never committed
			return false, err
		}
		for _, e := range exts {
			n.m.blocks.insert(e.Volume, e.Key, s.data[e.Offset:e.Offset+e.Length])
			e.Offset += uint64(s.off)
		}
		upd = append(upd, exts...)
	}
	// The writes are laid over the version they were made on, and the
	// commit is conditional on that version (its etag: every content
	// change makes a new one). Another mount's commit in between makes it
	// fail; the writes then go over the new version. Unconditionally, the
	// old version's extents would be committed again, pointing at needles
	// the newer commit had already given to the garbage collector.
	base, tag, over := n.f.exts, n.attr.Etag, n.attr.Version
	refetch := func() error {
		r, err := n.resolveExtents(ctx, p)
		if err != nil {
			return err
		}
		base, tag, over = r.Extents, r.Inode.Etag, r.Inode.Version
		size = max(int64(r.Inode.Size), dirtyEnd)
		return nil
	}
	if !n.f.extsOK && !n.f.creating {
		if err := refetch(); err != nil {
			n.m.cl.Discard(upd)
			return false, err
		}
	}
	var (
		na     *metapb.Inode
		merged []*metapb.Extent
		packed []*metapb.Extent // needles of a compaction, committed or discarded
		epoch  uint64
		done   func(uint64) bool
	)
	for attempt := 0; ; attempt++ {
		// Holes stay holes (sparse): meta keeps gaps between extents
		// and readers fill them with zeros, so a hole costs nothing.
		merged = overlayExtents(base, upd, size)
		if attempt == 0 {
			// Only over the version the writes were made on: a retry lays
			// them over another mount's version, whose bytes this mount
			// has not read.
			merged, packed = n.m.compact(ctx, n.ns, merged)
		}
		a := n.attr
		req := &metapb.CommitRequest{
			IfNoneMatch: n.f.creating, Ino: createdIno(n),
			Ns: n.ns, Path: p, Size: uint64(size), Extents: merged,
			Etag:        fmt.Sprintf("%x-m%x", a.Ino, time.Now().UnixNano()),
			ContentType: a.ContentType, UserMeta: a.UserMeta, Mode: a.Mode, ModeExact: true, Uid: a.Uid, Gid: a.Gid,
			MtimeNs: mtime, AtimeNs: a.AtimeNs}
		if n.f.creating {
			req.CtimeNs = max(a.CtimeNs, mtime) // what stat showed (fill)
		} else {
			req.OpenIno = n.openIno()
		}
		if !n.f.creating {
			req.IfMatch = tag
		}
		epoch = n.answerEpoch(ctx)
		done = n.m.sess.mutating(n.ns, p)
		na, err = n.m.meta.Commit(ctx, req)
		if err == nil {
			break
		}
		done(0)
		// Only a refusal says meta applied nothing: after any other
		// failure (the answer lost, meta gone mid-commit) the commit may
		// stand, and discarding its needles would lose the file
		// (client.Refused). Those needles are then leaked, never lost.
		if !client.Refused(err) {
			return false, err
		}
		n.m.cl.Discard(packed)
		packed = nil
		if errors.Is(errors.Precondition, err) && !n.f.creating && attempt < 8 {
			if err := refetch(); err != nil {
				n.m.cl.Discard(upd)
				return false, err
			}
			continue
		}
		n.m.cl.Discard(upd)
		return false, err
	}
	seq := na.Seq
	na = n.committed(na, merged, epoch, over)
	if done(seq) {
		// Another client changed the file after this commit, and its
		// call may have returned already: the record just installed is
		// not the newest, and the event saying so is applied a moment
		// later (not under n.mu, which is held here).
		n.valid = false
	}
	defer n.tellParent(na) // after n.mu is released
	return true, nil
}

// createdIno is the inode number a commit creating n must use (n.mu held).
func createdIno(n *node) uint64 {
	if n.f.creating {
		return n.attr.Ino
	}
	return 0
}

func (n *node) isFile() bool { return n.StableAttr().Mode == 0o100000 }

// upload stores data as needles, charging the data-plane requests.
func (m *Mount) upload(ctx context.Context, ns string, data []byte) ([]*metapb.Extent, error) {
	if o := opOf(ctx); o != nil {
		o.Data.Add(1 + int64(len(data))/(8<<20))
	}
	return m.cl.Upload(ctx, ns, data)
}

// overlayExtents returns base with the ranges of upd (sorted, disjoint)
// replaced by upd, cut at size, sorted by offset. What upd covers of base
// is dropped (a fully shadowed extent disappears, and meta releases its
// needle when no extent points into it any more); the rest of base is kept
// in pieces, and pieces that continue each other in one needle are joined
// again. It costs O((len(base)+len(upd)) log), not their product.
func overlayExtents(base, upd []*metapb.Extent, size int64) []*metapb.Extent {
	out := make([]*metapb.Extent, 0, len(base)+len(upd))
	for _, e := range base {
		lo, hi := e.Offset, e.Offset+e.Length
		k := sort.Search(len(upd), func(k int) bool { return upd[k].Offset+upd[k].Length > lo })
		for ; k < len(upd) && upd[k].Offset < hi; k++ {
			if ul := upd[k].Offset; ul > lo {
				out = append(out, piece(e, lo, ul))
			}
			lo = max(lo, upd[k].Offset+upd[k].Length)
		}
		if lo < hi {
			out = append(out, piece(e, lo, hi))
		}
	}
	out = append(out, upd...)
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	end := uint64(size)
	cut := out[:0]
	for _, e := range out {
		if e.Offset >= end {
			continue
		}
		if e.Offset+e.Length > end {
			e = piece(e, e.Offset, end)
		}
		if k := len(cut); k > 0 && continues(cut[k-1], e) {
			cut[k-1] = piece(cut[k-1], cut[k-1].Offset, e.Offset+e.Length)
			continue
		}
		cut = append(cut, e)
	}
	return cut
}

// continues reports whether b takes up where a ends, in the file and in
// the same needle.
func continues(a, b *metapb.Extent) bool {
	return a.Volume == b.Volume && a.Key == b.Key && a.Offset+a.Length == b.Offset && a.NeedleOffset+a.Length == b.NeedleOffset
}

// piece is the part [lo, hi) (file offsets) of extent e.
func piece(e *metapb.Extent, lo, hi uint64) *metapb.Extent {
	return &metapb.Extent{
		Offset: lo, Length: hi - lo, Volume: e.Volume, Key: e.Key,
		NeedleOffset: e.NeedleOffset + (lo - e.Offset),
	}
}
