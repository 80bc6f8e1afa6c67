package fusefs_test

import (
	"runtime"
	"syscall"
	"testing"
)

// asUser runs f on a thread whose file-system uid and gid are uid, so the
// kernel checks permissions as that user; the thread is discarded after.
func asUser(t *testing.T, uid int, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(uid), 0, 0); e != 0 {
			ch <- e
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0); e != 0 {
			ch <- e
			return
		}
		ch <- f()
	}()
	return <-ch
}
