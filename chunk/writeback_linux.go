package chunk

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback has the kernel begin writing n bytes of f from off to
// disk, without waiting for it (sync_file_range SYNC_FILE_RANGE_WRITE).
// It makes nothing durable: that is fsync's job; it only moves the disk
// work earlier. A failure is of no consequence for the same reason.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
