package fusefs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Packing. An untar creates thousands of small files and closes each at
// once. Committed one by one, every file costs a needle upload (a write
// and an fsync on each replica) and a meta Commit, and on a small machine
// that work, not the kernel's round trips, is what a tar waits for. The
// packer commits small files created on this mount in groups instead:
// their bytes go into one needle and one CommitBatch creates them all (one
// upload, one meta round trip, one fsync each side). Meta counts each file
// as an owner of the needle, so removing one leaves the others' bytes
// alone; the needle's space returns when the last of them goes, as with
// Haystack's packed photos.
//
// Grouping is natural, as in a group commit: a chain that arrives while a
// group is on its way waits and goes with the next one, so a lone file
// waits for nothing and a burst fills groups by itself. A queue longer
// than one group (a writer closing files faster than one group at a time
// commits them) gets more leaders, up to packLeaders groups on their way
// at once: one at a time, 64 KB files were committed at some 1,000 a
// second, and a writer closing them faster filled the write-behind queue
// (its closes then commit synchronously, and reads after it wait for the
// backlog).
const (
	packMaxFile  = 256 << 10 // a larger file gets a needle of its own
	packMaxBytes = 4 << 20   // one group's needle
	packMaxFiles = 256       // one group's CommitBatch
	packLeaders  = 4         // groups on their way at most
)

type packer struct {
	w *writeBehind

	mu      sync.Mutex
	queue   []*packReq
	leading int // goroutines committing groups
}

type packReq struct {
	n     *node
	mtime int64
	done  chan bool // true: committed; false: the caller commits it alone
}

// commit commits n (a file created here, not committed yet) with others
// waiting at the same time. It returns false when n did not go with a
// group (it no longer qualifies, or the group failed): the caller then
// commits it alone, which also reports the error precisely.
func (p *packer) commit(n *node, mtime int64) bool {
	r := &packReq{n: n, mtime: mtime, done: make(chan bool, 1)}
	p.mu.Lock()
	p.queue = append(p.queue, r)
	if p.leading == 0 {
		p.leading++
		go p.lead()
	}
	p.mu.Unlock()
	return <-r.done
}

// lead commits groups until the queue is empty.
func (p *packer) lead() {
	ctx, finish := p.w.chainContext("pack")
	defer finish()
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.leading--
			p.mu.Unlock()
			return
		}
		// One namespace per group (one upload goes to one namespace's
		// volumes); the others wait for a later group.
		ns := p.queue[0].n.ns
		var group, rest []*packReq
		for _, r := range p.queue {
			if r.n.ns == ns && len(group) < packMaxFiles {
				group = append(group, r)
			} else {
				rest = append(rest, r)
			}
		}
		p.queue = rest
		p.mu.Unlock()
		files, buf, over := p.form(ctx, group)
		p.mu.Lock()
		// What did not fit in the group's needle goes first in the next
		// group; a queue left for another group gets its own leader.
		p.queue = append(over, p.queue...)
		if len(p.queue) > 0 && p.leading < packLeaders {
			p.leading++
			go p.lead()
		}
		p.mu.Unlock()
		p.send(ctx, ns, files, buf)
	}
}

// packed is a file of a group: its request, its path and what its commit
// carries, taken under its lock when the group was formed.
type packed struct {
	r      *packReq
	path   string
	off    int // its bytes' place in the group's needle
	size   int
	attr   *metapb.Inode // its record then (records are replaced, never changed)
	wrote  int64         // its last write's time then
	epoch  uint64        // the session epoch for the commit's answer (answerEpoch, taken just before it)
	writes uint64        // its write count then (fileState.writes)
	over   uint64        // the version its writes were laid over
}

// form takes the files of one group that still qualify (send commits
// them), and returns the ones that did not fit in its needle: they go
// with the next group (sent back to commit alone, a backlog of 64 KB
// files was committed one by one past the first 4 MiB of each group).
//
// A file's lock is held only while its bytes are copied and its record
// taken, and again while the commit's answer is installed, never across
// the upload and the CommitBatch: a getattr or read of a file in the
// group does not wait for them (reading back files just written waited
// for the groups still committing). Meanwhile the file is marked packing
// (fileState.packing): its bytes stay unflushed, so reads see them, and
// another flush of it waits for the group. A write that lands meanwhile
// stays unflushed over the group's commit (its close queues the flush
// that commits it). Locks are only tried: a file whose lock is taken (a
// reader waiting for its queued work, say) is sent back to commit alone,
// so the group never waits on a holder that waits on it.
func (p *packer) form(ctx context.Context, reqs []*packReq) (files []*packed, buf []byte, over []*packReq) {
	for i, r := range reqs {
		n := r.n
		if !n.mu.TryLock() {
			r.done <- false
			continue
		}
		data, ok := n.packable()
		if ok && len(files) > 0 && len(buf)+len(data) > packMaxBytes {
			n.mu.Unlock()
			over = reqs[i:]
			break
		}
		var path string
		if ok {
			var err error
			path, err = n.path()
			ok = err == nil
		}
		if !ok {
			n.mu.Unlock()
			r.done <- false
			continue
		}
		files = append(files, &packed{
			r: r, path: path, off: len(buf), size: len(data),
			attr: n.attr, wrote: n.f.wroteAt.Load(), writes: n.f.writes, over: n.attr.Version,
		})
		buf = append(buf, data...)
		n.f.packing = make(chan struct{})
		n.mu.Unlock()
	}
	return files, buf, over
}

// send commits a group formed (form): one upload, one CommitBatch.
func (p *packer) send(ctx context.Context, ns string, files []*packed, buf []byte) {
	if len(files) == 0 {
		return
	}
	// release ends the group: each file's answer (na, when committed) is
	// installed and its packing mark cleared.
	release := func(ok bool, exts []*metapb.Extent, req *metapb.CommitBatchRequest, inodes []*metapb.Inode) {
		for i, f := range files {
			n := f.r.n
			n.mu.Lock()
			if ok {
				inodes[i] = n.packCommitted(inodes[i], req.Commits[i].Extents, f)
			}
			close(n.f.packing)
			n.f.packing = nil
			n.mu.Unlock()
			f.r.done <- ok
		}
	}
	var exts []*metapb.Extent
	if len(buf) > 0 {
		var err error
		if exts, err = p.w.m.upload(ctx, ns, buf); err != nil {
			release(false, nil, nil, nil)
			return
		}
		for _, e := range exts {
			p.w.m.blocks.insert(e.Volume, e.Key, buf[e.Offset:e.Offset+e.Length])
		}
	}
	for _, f := range files {
		// Just before the commit, as a flush takes it: an event applied
		// since makes its answer untrusted (the next open asks meta), so
		// the upload's time is not counted in.
		f.r.n.mu.Lock()
		f.epoch = f.r.n.answerEpoch(ctx)
		f.r.n.mu.Unlock()
	}
	now := time.Now().UnixNano()
	req := &metapb.CommitBatchRequest{Commits: make([]*metapb.CommitRequest, len(files))}
	dones := make([]func(uint64) bool, len(files))
	for i, f := range files {
		a := f.attr
		etag := emptyETag
		if f.size > 0 {
			etag = fmt.Sprintf("%x-m%x", a.Ino, now)
		}
		req.Commits[i] = &metapb.CommitRequest{
			Ns: ns, Path: f.path, Size: uint64(f.size), Extents: cut(exts, f.off, f.off+f.size),
			Etag: etag, ContentType: a.ContentType, UserMeta: a.UserMeta, Mode: a.Mode, ModeExact: true, Uid: a.Uid, Gid: a.Gid,
			IfNoneMatch: true, Ino: a.Ino, MtimeNs: f.r.mtime, AtimeNs: a.AtimeNs,
		}
		if f.r.mtime == 0 { // the last write's time, which stat showed
			req.Commits[i].MtimeNs = max(a.MtimeNs, f.wrote)
		}
		req.Commits[i].CtimeNs = max(a.CtimeNs, req.Commits[i].MtimeNs) // what stat showed (fill)
		dones[i] = p.w.m.sess.mutating(ns, f.path)
	}
	resp, err := p.w.m.meta.CommitBatch(ctx, req)
	if err != nil {
		for _, done := range dones {
			done(0)
		}
		if !ambiguous(err) {
			// Rejected whole: nothing points at the needle.
			p.w.m.cl.Discard(exts)
		}
		// Each file is committed alone next (a create that did apply is
		// repeated safely: meta knows its reserved inode number).
		release(false, nil, nil, nil)
		return
	}
	release(true, exts, req, resp.Inodes)
	for i, f := range files {
		f.r.n.tellParent(resp.Inodes[i])
		dones[i](resp.Inodes[i].Seq)
	}
}

// packCommitted installs a group's commit of n (n.mu held). The writes
// it committed are flushed; writes made since the group took n's bytes
// stay unflushed, laid over the commit.
func (n *node) packCommitted(na *metapb.Inode, exts []*metapb.Extent, f *packed) *metapb.Inode {
	if n.f.writes == f.writes {
		return n.committed(na, exts, f.epoch, f.over)
	}
	dirty, nDirty, size, sized := n.f.dirty, n.f.nDirty, n.f.size, n.f.sized
	na = n.committed(na, exts, f.epoch, f.over)
	n.f.dirty, n.f.nDirty, n.f.size, n.f.sized = dirty, nDirty, size, sized
	return na
}

// ambiguous reports whether a failed call may have applied all the same
// (its answer was lost).
func ambiguous(err error) bool {
	return errors.Is(errors.Unavailable, err) || errors.Is(errors.Canceled, err) ||
		errors.Is(errors.IO, err) || errors.Is(errors.Other, err)
}

// packable returns the bytes of a file the packer may commit: created
// here and not committed yet, written from 0 in one piece, small (n.mu
// held).
func (n *node) packable() ([]byte, bool) {
	f := &n.f
	if !f.creating || n.attr == nil || f.gone.Load() {
		return nil, false
	}
	if !f.sized {
		return nil, true // created empty
	}
	if len(f.dirty) != 1 || f.dirty[0].off != 0 || int64(len(f.dirty[0].data)) != f.size || f.size > packMaxFile {
		return nil, false
	}
	return f.dirty[0].data, true
}

// committed installs the answer to a commit of all of n's unflushed
// writes (n.mu held), as flushAt does.
func (n *node) committed(na *metapb.Inode, exts []*metapb.Extent, epoch, over uint64) *metapb.Inode {
	na = n.keepQueued(na)
	// The kernel's pages are the new version's only if they were the
	// version the writes were laid over (the writes went through them): a
	// commit that had to go over another mount's newer version leaves
	// pages of the older one in the other ranges, which the next open
	// must drop, not keep.
	if n.f.creating || n.f.pageVersion == over {
		n.f.pageVersion = na.Version
	}
	n.f.creating = false
	n.setAttrLocked(na, epoch)
	n.f.exts, n.f.extsOK = exts, true
	n.f.dirty, n.f.nDirty, n.f.sized = nil, 0, false
	n.f.commit++
	return na
}

// cut returns the parts of exts (offsets into one buffer) that cover
// [lo, hi), with offsets from lo.
func cut(exts []*metapb.Extent, lo, hi int) []*metapb.Extent {
	var out []*metapb.Extent
	for _, e := range exts {
		el, eh := max(e.Offset, uint64(lo)), min(e.Offset+e.Length, uint64(hi))
		if el >= eh {
			continue
		}
		c := piece(e, el, eh)
		c.Offset -= uint64(lo)
		out = append(out, c)
	}
	return out
}
