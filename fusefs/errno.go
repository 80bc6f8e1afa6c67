package fusefs

import (
	"context"
	"syscall"

	"cairn/errors"
)

// kindErrno is the one table from error Kind to errno at the FUSE edge.
// Kinds that mean "the store could not be reached" become EIO only after
// the retries in call have given up.
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

// errno translates err for the kernel; nil is 0 (success).
func errno(err error) syscall.Errno {
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
