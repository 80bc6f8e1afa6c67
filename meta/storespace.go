package meta

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"cairn/errors"
)

// storeSpace keeps meta answering when the disk under its store fills.
// Pebble cannot go on after a failed log write (it stops the process), so
// meta keeps a reserve on that disk: a file of Config.StoreReserve bytes,
// the ballast. When a store write meets ENOSPC, Pebble's OnDiskFull hook
// removes the ballast and the write is retried in the space it freed;
// from then on calls that change the tree are refused with NoSpace (507
// at the HTTP edges), while reads go on. A refused call first looks
// whether the disk has room again (twice the reserve): then the ballast
// is laid down again and the call goes ahead.
//
// Writes that reach the store while it is full (meta's own: a heartbeat's
// volume change, the collector's and repairs' bookkeeping, key rotation;
// and calls that passed the door just before it closed) share a budget of
// a quarter of the reserve, counted in the bytes of their log records
// (admit). Past it they too are refused with NoSpace, and the loops that
// made them try again later, so however long the disk stays full the
// reserve keeps room for the log writes in flight and a flush: the second
// ENOSPC, which would stop Pebble, does not come.
type storeSpace struct {
	path string // the ballast
	size int64
	log  *slog.Logger

	full  atomic.Bool
	spent atomic.Int64 // bytes admitted since the disk was found full
	mu    sync.Mutex   // one restore at a time
}

// DefaultStoreReserve is the reserve cairn meta and cairn server keep: room
// for the log writes in flight when the disk fills, and for a memtable
// flush.
const DefaultStoreReserve = 64 << 20

// ballastName is the reserve's file in Config.Dir.
const ballastName = "store.reserve"

func newStoreSpace(dir string, size int64, log *slog.Logger) *storeSpace {
	return &storeSpace{path: filepath.Join(dir, ballastName), size: size, log: log}
}

// fs returns Pebble's file system: the OS's, with the disk-full hook when
// there is a reserve. It lays the ballast down if it is missing.
func (sp *storeSpace) fs() vfs.FS {
	if sp == nil || sp.size <= 0 {
		return vfs.Default
	}
	if err := sp.layBallast(); err != nil {
		// No room for the reserve at start: meta starts refusing changes.
		sp.log.Warn("meta's disk has no room for its reserve; changes are refused until it has", "reserve", sp.size, "err", err)
		sp.full.Store(true)
	}
	return vfs.OnDiskFull(vfs.Default, sp.onDiskFull)
}

// onDiskFull frees the reserve for the write that met ENOSPC (Pebble
// retries it once) and turns changes away until space returns.
func (sp *storeSpace) onDiskFull() {
	if err := os.Remove(sp.path); err != nil && !os.IsNotExist(err) {
		sp.log.Error("meta's disk is full and its reserve could not be freed", "err", err)
	}
	if !sp.full.Swap(true) {
		sp.spent.Store(0)
		sp.log.Error("meta's disk is full: changes are refused (NoSpace) until space is freed; reads go on", "dir", filepath.Dir(sp.path))
	}
}

// check returns NoSpace while the disk is full. When the disk has room
// again, it lays the reserve down again and lets changes through.
func (sp *storeSpace) check() error {
	if sp == nil || !sp.full.Load() {
		return nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !sp.full.Load() {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(sp.path), &st); err == nil && int64(st.Bavail)*st.Bsize >= 2*sp.size {
		if err := sp.layBallast(); err == nil {
			sp.full.Store(false)
			sp.log.Info("meta's disk has room again: changes are accepted")
			return nil
		}
	}
	return errors.E(errors.Op("meta"), errors.NoSpace, "meta's disk is full: free space on it; reads still work")
}

// admit is asked before n bytes of log records go to the store. While
// the disk is full (and has not got room again) it lets through writes up
// to a quarter of the reserve in all, then answers NoSpace.
func (sp *storeSpace) admit(n int) error {
	if sp == nil || !sp.full.Load() {
		return nil
	}
	if err := sp.check(); err == nil {
		return nil // room again: the reserve is back in place
	}
	if sp.spent.Add(int64(n)) > sp.size/4 {
		sp.spent.Add(-int64(n))
		return errors.E(errors.Op("meta"), errors.NoSpace, "meta's disk is full: its own writes wait for space too, so that its reserve lasts; free space on it")
	}
	return nil
}

// layBallast makes the reserve file, allocated (not sparse) and synced.
func (sp *storeSpace) layBallast() error {
	if fi, err := os.Stat(sp.path); err == nil && fi.Size() == sp.size {
		return nil
	}
	f, err := os.OpenFile(sp.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, sp.size)
	if err == unix.EOPNOTSUPP {
		err = writeZeros(f, sp.size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(sp.path)
	}
	return err
}

func writeZeros(f *os.File, n int64) error {
	buf := make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf[:min(int64(len(buf)), n-off)], off); err != nil {
			return err
		}
	}
	return nil
}
