package fusefs

import (
	"context"
	"syscall"

	"cairn/errors"
)

// kindErrno is the one table from error Kind to errno at the FUSE edge.
// Kinds that mean "the store could not be reached" become EIO only after
// the retries (retry, meta's failover) have given up, and only for a
// call the kernel did not interrupt (see errno).
var kindErrno = map[errors.Kind]syscall.Errno{
	errors.Other:           syscall.EIO,
	errors.Invalid:         syscall.EINVAL,
	errors.NotExist:        syscall.ENOENT,
	errors.Exist:           syscall.EEXIST,
	errors.NotEmpty:        syscall.ENOTEMPTY,
	errors.IsDir:           syscall.EISDIR,
	errors.NotDir:          syscall.ENOTDIR,
	errors.Permission:      syscall.EACCES,
	errors.Unauthenticated: syscall.EACCES,
	errors.Precondition:    syscall.EEXIST, // If-None-Match on create: the name was taken
	errors.TooLarge:        syscall.EFBIG,
	errors.Range:           syscall.EINVAL,
	errors.Corrupt:         syscall.EIO,
	errors.IO:              syscall.EIO,
	errors.Unavailable:     syscall.EIO,
	errors.ReadOnly:        syscall.EROFS,
	errors.NameTooLong:     syscall.ENAMETOOLONG,
	errors.Stale:           syscall.ESTALE,
	errors.Canceled:        syscall.EINTR,
	errors.BadDigest:       syscall.EIO,
	errors.NoSpace:         syscall.ENOSPC,
	errors.DataLoss:        syscall.EIO,
}

// errno translates err, the outcome of the FUSE operation whose context
// is ctx, for the kernel; nil is 0 (success).
//
// A call the kernel interrupted (the process got a signal: ctx is
// cancelled) that failed for want of the store answers EINTR, not EIO,
// whatever its last attempt met on the way out: a follower's "not the
// leader", a timed-out wait for meta. The kernel then fails the
// process's call with EINTR (lock calls it restarts under SA_RESTART),
// as a slow device's driver would; EIO would say the file system failed.
// A SIGCHLD landing on a thread that waited through a meta leader change
// made os.WriteFile fail so (TestMountCallsInterruptedWithoutMetaLeader).
// An answer the store did give (ENOENT, EEXIST...) stands. Any other
// EIO is logged with its operation and cause.
func errno(ctx context.Context, err error) syscall.Errno {
	e := errnoOf(err)
	if e != syscall.EIO || ctx == nil {
		return e
	}
	if ctx.Err() == context.Canceled {
		return syscall.EINTR
	}
	if c, ok := ctx.Value(opKey{}).(call); ok && c.log != nil {
		// The one answer that says the file system failed: say why.
		c.log.Warn("mount: answering EIO", "op", c.name, "err", err)
	}
	return e
}

// errnoOf is the table's answer for err alone.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	if errors.IsErr(err, context.Canceled) {
		return syscall.EINTR
	}
	if e, ok := kindErrno[errors.KindOf(err)]; ok {
		return e
	}
	return syscall.EIO
}
