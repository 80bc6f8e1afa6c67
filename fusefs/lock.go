package fusefs

import (
	"context"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// Locks (flock and fcntl record locks) are meta's, not the kernel's, so
// that processes on two mounts exclude each other (meta/locks.go). The
// kernel hands every lock call to the mount (EnableLocks). A lock is a
// consistency point, as on NFS: before a lock is released the file's
// writes are committed, so whoever takes it next (on any mount) reads
// them.
//
// A close (a flush) releases the POSIX locks of the lock owner that
// closes, on every handle of the file, as close(2) does; the release of a
// handle (the last close of the open file) releases every lock taken
// through it, flock locks too. The kernel names the owner in the flush,
// but go-fuse does not pass it on to Flush, so the mount reads it from
// the raw request (flushOwners). Before, a flush released every POSIX lock
// of its handle whoever closed: a process that forked and exec'd (the
// child closes its inherited close-on-exec descriptors) lost its locks.

var (
	_ fs.NodeGetlker  = (*node)(nil)
	_ fs.NodeSetlker  = (*node)(nil)
	_ fs.NodeSetlkwer = (*node)(nil)
)

// handleLocks are the lock owners that took locks through a handle.
type handleLocks struct {
	mu     sync.Mutex
	owners map[uint64]bool // owner -> flock
}

func (n *node) lockRequest(f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) *metapb.MountLockRequest {
	return &metapb.MountLockRequest{
		Session: n.m.sess.id, Ns: n.ns, Ino: n.StableAttr().Ino, Owner: owner,
		Flock: flags&fuse.FUSE_LK_FLOCK != 0, Start: lk.Start, End: lk.End, Type: lk.Typ, Pid: lk.Pid,
	}
}

func (n *node) Getlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	ctx = n.m.begin(ctx, "getlk")
	defer end(ctx)
	req := n.lockRequest(f, owner, lk, flags)
	req.Test = true
	r, err := n.lockCall(ctx, req)
	if err != nil {
		return errno(ctx, err)
	}
	out.Typ, out.Start, out.End, out.Pid = r.Type, r.Start, r.End, r.Pid
	return 0
}

func (n *node) Setlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	ctx = n.m.begin(ctx, "setlk")
	defer end(ctx)
	return n.setLock(ctx, f, n.lockRequest(f, owner, lk, flags))
}

func (n *node) Setlkw(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	ctx = n.m.begin(ctx, "setlkw")
	defer end(ctx)
	req := n.lockRequest(f, owner, lk, flags)
	req.Wait = true
	return n.setLock(ctx, f, req)
}

// setLock takes or releases a lock in meta.
func (n *node) setLock(ctx context.Context, f fs.FileHandle, req *metapb.MountLockRequest) syscall.Errno {
	if req.Type == syscall.F_UNLCK && n.isFile() {
		// Whoever takes the lock next reads what was written under it.
		if err := n.settle(ctx); err != nil {
			return errno(ctx, err)
		}
		if err := n.flush(ctx); err != nil {
			return errno(ctx, err)
		}
	}
	if req.Type == syscall.F_UNLCK {
		// Forgotten before meta is asked: a session that reopens
		// meanwhile must not bring the lock back after the unlock.
		n.m.locks.set(req)
	}
	if req.Wait {
		// A wait lasts as long as the holder keeps the lock; the kernel
		// interrupts it (cancelling ctx) when the process gets a signal.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 365*24*time.Hour)
		defer cancel()
	}
	if req.Type == syscall.F_UNLCK {
		if _, err := n.lockCall(ctx, req); err != nil {
			return errno(ctx, err)
		}
		return 0
	}
	if e := n.takeLock(ctx, req); e != 0 {
		return e
	}
	if h, ok := f.(*handle); ok && req.Type != syscall.F_UNLCK {
		h.locks.mu.Lock()
		if h.locks.owners == nil {
			h.locks.owners = map[uint64]bool{}
		}
		h.locks.owners[req.Owner] = req.Flock
		h.locks.mu.Unlock()
	}
	return 0
}

// takeLock asks meta for req and records the grant, so that the mount's
// session hands it to a new meta leader. A session reopened between
// meta's answer and the record sent its locks without this one (the
// answer may even be a former leader's): then the same request goes again
// (meta takes a lock again by the same owner as a replace), until an
// answer lands with no reopening in between, so the grant the kernel gets
// is one the leader of the session's locks knows. If the ask again is
// refused, the owner's locks over the range are put back as they were.
func (n *node) takeLock(ctx context.Context, req *metapb.MountLockRequest) syscall.Errno {
	hello := n.m.locks.hellos()
	for {
		r, err := n.lockCall(ctx, req)
		if err == nil && !r.Granted {
			err = errLockRefused
		}
		if err != nil {
			return lockErrno(ctx, err)
		}
		prev, same := n.m.locks.grant(req, hello)
		if same {
			return 0
		}
		n.m.log.Info("mount: a lock was granted while the session reopened: asking its leader again", "ino", req.Ino)
		hello = n.m.locks.hellos()
		r, err = n.lockCall(ctx, req)
		if err == nil && !r.Granted {
			err = errLockRefused
		}
		if err != nil {
			n.m.locks.restore(req, prev)
			return lockErrno(ctx, err)
		}
		if n.m.locks.hellos() == hello {
			return 0
		}
		// Reopened again meanwhile: once more.
	}
}

// errLockRefused is a conflicting lock's answer, for takeLock.
var errLockRefused = errors.E(errors.Op("fusefs.lock"), errors.Exist, "lock held by another owner")

func lockErrno(ctx context.Context, err error) syscall.Errno {
	if err == errLockRefused {
		return syscall.EAGAIN
	}
	return errno(ctx, err)
}

// lockCall asks meta, riding through a meta restart or a change of
// leader (a wait that began long before it too: unlike retry, the time
// allowed runs from the first failure, not from the call).
func (n *node) lockCall(ctx context.Context, req *metapb.MountLockRequest) (*metapb.MountLockResponse, error) {
	delay := 20 * time.Millisecond
	var deadline time.Time
	for {
		r, err := n.lockAttempt(ctx, req)
		// A member killed under a call may end it with a transport
		// error (a stream reset: IO, or no kind at all) rather than
		// Unavailable; meta's lock table itself fails no other way, and
		// taking or releasing the same lock twice leaves the same state.
		lost := errors.Is(errors.Unavailable, err) || errors.Is(errors.IO, err) || errors.Is(errors.Other, err)
		if err != nil && ctx.Err() != nil {
			// The kernel interrupted the call (the process got a
			// signal): EINTR, which the kernel turns into a restart of
			// the lock call. The attempt's own error (a member that
			// died under it: EIO) would reach the process instead.
			return r, errors.E(errors.Op("fusefs.lock"), errors.Canceled, ctx.Err())
		}
		if err == nil || !lost {
			if err != nil && ctx.Err() == nil {
				n.m.log.Warn("mount: lock call failed", "ino", req.Ino, "err", err)
			}
			return r, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(30*time.Second + meta.LockGrace)
		} else if time.Now().After(deadline) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, errors.E(errors.Op("fusefs.lock"), errors.Canceled, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// lockAttempt is one MountLock call. Without a deadline of its own (all
// but F_SETLKW) it may take CallTimeout and a new leader's grace, during
// which meta holds lock calls back.
func (n *node) lockAttempt(ctx context.Context, req *metapb.MountLockRequest) (*metapb.MountLockResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, CallTimeout+meta.LockGrace)
		defer cancel()
	}
	return n.m.meta.MountLock(ctx, req)
}

// heldLocks mirrors the locks meta granted this mount, so that its
// session can hand them to a new meta leader (meta/locks.go): by file,
// each owner's ranges, merged and split as meta does.
type heldLocks struct {
	mu    sync.Mutex
	files map[heldFile][]*metapb.MountLockRequest
	sent  uint64 // sessions' first messages made (all)
}

// hellos counts the sessions' first messages made so far.
func (h *heldLocks) hellos() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent
}

// grant records a granted lock and reports whether no session's first
// message was made since hello (a count from hellos) — if one was, it may
// lack this lock. prev is what req's owner held over req's range before,
// for restore.
func (h *heldLocks) grant(req *metapb.MountLockRequest, hello uint64) (prev []*metapb.MountLockRequest, same bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	start, end := req.Start, req.End
	if req.Flock {
		start, end = 0, math.MaxUint64
	}
	for _, l := range h.files[heldFile{req.Ns, req.Ino}] {
		if l.Owner != req.Owner || l.Flock != req.Flock || l.End < start || l.Start > end {
			continue
		}
		c := proto.Clone(l).(*metapb.MountLockRequest)
		c.Start, c.End = max(c.Start, start), min(c.End, end)
		prev = append(prev, c)
	}
	h.setLocked(req)
	return prev, h.sent == hello
}

// restore puts back prev, what req's owner held over req's range before
// a grant that did not hold.
func (h *heldLocks) restore(req *metapb.MountLockRequest, prev []*metapb.MountLockRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	un := proto.Clone(req).(*metapb.MountLockRequest)
	un.Type = syscall.F_UNLCK
	h.setLocked(un)
	for _, l := range prev {
		h.setLocked(l)
	}
}

type heldFile struct {
	ns  string
	ino uint64
}

// set records a granted lock, or an unlock, of req's owner over its range.
func (h *heldLocks) set(req *metapb.MountLockRequest) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setLocked(req)
}

func (h *heldLocks) setLocked(req *metapb.MountLockRequest) {
	if h.files == nil {
		h.files = map[heldFile][]*metapb.MountLockRequest{}
	}
	start, end := req.Start, req.End
	if req.Flock {
		start, end = 0, math.MaxUint64
	}
	f := heldFile{req.Ns, req.Ino}
	var kept []*metapb.MountLockRequest
	for _, l := range h.files[f] {
		if l.Owner != req.Owner || l.Flock != req.Flock || l.End < start || l.Start > end {
			kept = append(kept, l)
			continue
		}
		if l.Start < start {
			left := proto.Clone(l).(*metapb.MountLockRequest)
			left.End = start - 1
			kept = append(kept, left)
		}
		if l.End > end {
			right := proto.Clone(l).(*metapb.MountLockRequest)
			right.Start = end + 1
			kept = append(kept, right)
		}
	}
	if req.Type != syscall.F_UNLCK {
		kept = append(kept, &metapb.MountLockRequest{
			Ns: req.Ns, Ino: req.Ino, Owner: req.Owner, Flock: req.Flock,
			Start: start, End: end, Type: req.Type, Pid: req.Pid,
		})
	}
	if len(kept) == 0 {
		delete(h.files, f)
	} else {
		h.files[f] = kept
	}
}

// all returns every lock held, for a session's first message (counted:
// a grant recorded after it is asked again, see takeLock).
func (h *heldLocks) all() []*metapb.MountLockRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent++
	var out []*metapb.MountLockRequest
	for _, ls := range h.files {
		out = append(out, ls...)
	}
	return out
}

// flushOwners wraps the kernel side of the mount to learn the lock owner
// of each flush, which go-fuse's Flush does not pass on: by the thread
// that closes (a thread is in one close at a time), while the flush runs.
type flushOwners struct {
	fuse.RawFileSystem
	mu     sync.Mutex
	owners map[uint32]uint64 // the closing thread -> the lock owner
}

func (f *flushOwners) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	f.mu.Lock()
	if f.owners == nil {
		f.owners = map[uint32]uint64{}
	}
	f.owners[in.Caller.Pid] = in.LockOwner
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.owners, in.Caller.Pid)
		f.mu.Unlock()
	}()
	return f.RawFileSystem.Flush(cancel, in)
}

// closing returns the lock owner of the flush ctx serves.
func (f *flushOwners) closing(ctx context.Context) (uint64, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.owners[c.Pid]
	return o, ok
}

// serve mounts root as fs.Mount does, with the flush owners wrapped in.
func (m *Mount) serve(root fs.InodeEmbedder, opts *fs.Options) (*fuse.Server, error) {
	m.flushes.RawFileSystem = fs.NewNodeFS(root, opts)
	srv, err := fuse.NewServer(&m.flushes, m.cfg.Mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, err
	}
	return srv, nil
}

// flushLocks releases, at a close, the POSIX locks of the owner closing
// on h's file (see above). Only an owner that holds one costs a call.
func (h *handle) flushLocks(ctx context.Context, owner uint64) {
	n := h.n
	if !n.m.locks.holds(n.ns, n.StableAttr().Ino, owner) {
		return
	}
	h.locks.mu.Lock()
	if fl, ok := h.locks.owners[owner]; ok && !fl {
		delete(h.locks.owners, owner)
	}
	h.locks.mu.Unlock()
	lk := &fuse.FileLock{Start: 0, End: 1<<63 - 1, Typ: syscall.F_UNLCK}
	if e := n.setLock(ctx, h, n.lockRequest(h, owner, lk, 0)); e != 0 {
		n.m.log.Warn("mount: releasing a lock at close failed", "ino", n.StableAttr().Ino, "err", e)
	}
}

// holds reports whether owner (any, if 0) holds a POSIX lock on ns/ino
// here.
func (h *heldLocks) holds(ns string, ino, owner uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.files[heldFile{ns, ino}] {
		if (owner == 0 || l.Owner == owner) && !l.Flock {
			return true
		}
	}
	return false
}

// dropLocks releases the locks taken through h: its POSIX locks at a
// close (flush) whose owner the mount could not learn, and every lock
// taken through it at the last close (release).
func (h *handle) dropLocks(ctx context.Context, last bool) {
	if !last {
		if owner, ok := h.n.m.flushes.closing(ctx); ok {
			h.flushLocks(ctx, owner)
			return
		}
	}
	h.locks.mu.Lock()
	var owners []uint64
	var flocks []bool
	for o, fl := range h.locks.owners {
		if fl && !last {
			continue
		}
		owners, flocks = append(owners, o), append(flocks, fl)
		delete(h.locks.owners, o)
	}
	h.locks.mu.Unlock()
	n := h.n
	for i, o := range owners {
		lk := &fuse.FileLock{Start: 0, End: 1<<63 - 1, Typ: syscall.F_UNLCK}
		flags := uint32(0)
		if flocks[i] {
			flags = fuse.FUSE_LK_FLOCK
		}
		if e := n.setLock(ctx, h, n.lockRequest(h, o, lk, flags)); e != 0 {
			n.m.log.Warn("mount: releasing a lock at close failed", "ino", n.StableAttr().Ino, "err", e)
		}
	}
}
