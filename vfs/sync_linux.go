package vfs

import (
	"os"
	"syscall"
)

// datasync flushes a file's data and the metadata needed to read it back
// (its size) but not its timestamps: one journal write fewer than fsync.
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
