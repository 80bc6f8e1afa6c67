package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"cairn/proto/metapb"
)

// Locks (flock and fcntl record locks) are meta's, not the kernel's, so
// that processes on two mounts exclude each other (meta/locks.go). The
// kernel hands every lock call to the mount (EnableLocks). A lock is a
// consistency point, as on NFS: before a lock is released the file's
// writes are committed, so whoever takes it next (on any mount) reads
// them.
//
// The kernel does not tell a FUSE file system which lock owner closes a
// file (go-fuse passes no owner to Flush and Release), so the locks taken
// through a handle are recorded on it: a flush of the handle (a close)
// releases its POSIX locks, the release of the handle (the last close of
// the open file) its flock locks too. A process that locks through one
// descriptor and closes another descriptor of the same file keeps its
// locks until the first is closed.

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
		return errno(err)
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
			return errno(err)
		}
		if err := n.flush(ctx); err != nil {
			return errno(err)
		}
	}
	if req.Wait {
		// A wait lasts as long as the holder keeps the lock; the kernel
		// interrupts it (cancelling ctx) when the process gets a signal.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 365*24*time.Hour)
		defer cancel()
	}
	r, err := n.lockCall(ctx, req)
	if err != nil {
		return errno(err)
	}
	if !r.Granted {
		return syscall.EAGAIN
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

// lockCall asks meta, riding through a meta restart.
func (n *node) lockCall(ctx context.Context, req *metapb.MountLockRequest) (r *metapb.MountLockResponse, err error) {
	err = retry(ctx, func() error {
		r, err = n.m.meta.MountLock(ctx, req)
		return err
	})
	return r, err
}

// dropLocks releases the locks taken through h: its POSIX locks at a
// close (flush), and its flock locks too at the last close (release).
func (h *handle) dropLocks(ctx context.Context, last bool) {
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
