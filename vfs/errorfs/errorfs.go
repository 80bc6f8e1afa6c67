// Package errorfs is a failing disk for tests: a vfs.FS over another one
// whose calls fail on cue (EIO on a chosen fdatasync, read, write or open,
// ENOSPC once a byte budget is spent, a write torn after N bytes) and which
// can crash, losing what was written since the last sync.
//
// The crash model: a file's data and size as of its last Sync or Datasync
// survive; each write since is kept or lost (Crash with a rand decides, one
// write at a time; without one, all are lost). Directory entries are not
// modelled: creates, renames and removes are durable at once.
package errorfs

import (
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"

	"cairn/vfs"
)

// Op names the kind of call a Rule is asked about.
type Op uint8

const (
	Open Op = iota
	Read
	Write
	Sync // Sync and Datasync
	Truncate
	Remove
	Rename
)

// Call is one call on its way to the disk.
type Call struct {
	Op   Op
	Name string // the file's path
	Off  int64  // Read, Write
	Len  int    // Read, Write: bytes asked for
}

// Fault is what a Rule makes of a call: Err is returned; a write first
// writes Tear bytes of its buffer (a torn write).
type Fault struct {
	Err  error
	Tear int
}

// Rule decides the fate of each call: nil lets it through. Rules are called
// one at a time, so they may keep counts without locks.
type Rule func(Call) *Fault

// FS is the failing file system. Its zero value is not usable; see New.
type FS struct {
	under vfs.FS

	// mu serializes every call: a crash then falls between two calls.
	mu    sync.Mutex
	rule  Rule
	files map[string]*state
	epoch uint64 // bumped by Crash: handles of an older epoch fail
}

// state is what the crash model keeps of one file: how to undo each write
// since its last sync.
type state struct {
	undo []undo
}

// undo restores a file as it was before one write or truncate: its size,
// then the bytes the call overwrote.
type undo struct {
	size int64
	off  int64
	old  []byte
}

var _ vfs.FS = (*FS)(nil)

// New returns a failing file system over under, with no rule yet.
func New(under vfs.FS) *FS {
	return &FS{under: under, files: map[string]*state{}}
}

// SetRule replaces the rule (nil: every call goes through).
func (fs *FS) SetRule(r Rule) {
	fs.mu.Lock()
	fs.rule = r
	fs.mu.Unlock()
}

// fault asks the rule about c. Called with mu held.
func (fs *FS) fault(c Call) *Fault {
	if fs.rule == nil {
		return nil
	}
	return fs.rule(c)
}

func (fs *FS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.fault(Call{Op: Open, Name: name}); f != nil {
		return nil, pathErr("open", name, f.Err)
	}
	var before []byte
	var size int64
	if flag&os.O_TRUNC != 0 { // truncation is a write the crash may undo
		if b, err := vfs.ReadFile(fs.under, name); err == nil {
			before, size = b, int64(len(b))
		}
	}
	f, err := fs.under.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	st := fs.files[name]
	if st == nil {
		st = &state{}
		fs.files[name] = st
	}
	if size > 0 {
		st.undo = append(st.undo, undo{size: size, off: 0, old: before})
	}
	return &file{fs: fs, name: name, f: f, epoch: fs.epoch}, nil
}

func (fs *FS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.fault(Call{Op: Remove, Name: name}); f != nil {
		return pathErr("remove", name, f.Err)
	}
	delete(fs.files, name)
	return fs.under.Remove(name)
}

func (fs *FS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.fault(Call{Op: Rename, Name: oldname}); f != nil {
		return pathErr("rename", oldname, f.Err)
	}
	if err := fs.under.Rename(oldname, newname); err != nil {
		return err
	}
	fs.files[newname] = fs.files[oldname]
	delete(fs.files, oldname)
	return nil
}

func (fs *FS) Stat(name string) (os.FileInfo, error) { return fs.under.Stat(name) }

func (fs *FS) SyncDir(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.fault(Call{Op: Sync, Name: dir}); f != nil {
		return pathErr("sync", dir, f.Err)
	}
	return fs.under.SyncDir(dir)
}

// Crash loses what was written since each file's last sync (a write at a
// time, each lost or kept as r decides; every one when r is nil) and makes
// every file opened before it fail with EIO: the process that had them is
// gone. Files opened after it see the disk as the crash left it.
func (fs *FS) Crash(r *rand.Rand) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.epoch++
	for name, st := range fs.files {
		if len(st.undo) == 0 {
			continue
		}
		f, err := fs.under.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		for i := len(st.undo) - 1; i >= 0; i-- {
			u := st.undo[i]
			if r != nil && r.IntN(2) == 0 {
				continue // this write reached the disk
			}
			if err := f.Truncate(u.size); err != nil {
				f.Close()
				return err
			}
			if _, err := f.WriteAt(u.old, u.off); err != nil {
				f.Close()
				return err
			}
		}
		st.undo = nil
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

func pathErr(op, name string, err error) error {
	return &os.PathError{Op: op, Path: name, Err: err}
}

// file is an open file of the failing file system.
type file struct {
	fs    *FS
	name  string
	f     vfs.File
	epoch uint64
}

// gone reports a handle from before a crash. Called with fs.mu held.
func (f *file) gone() bool { return f.epoch != f.fs.epoch }

func (f *file) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.gone() {
		return 0, pathErr("read", f.name, syscall.EIO)
	}
	if ft := f.fs.fault(Call{Op: Read, Name: f.name, Off: off, Len: len(b)}); ft != nil {
		return 0, pathErr("read", f.name, ft.Err)
	}
	return f.f.ReadAt(b, off)
}

func (f *file) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.gone() {
		return 0, pathErr("write", f.name, syscall.EIO)
	}
	ft := f.fs.fault(Call{Op: Write, Name: f.name, Off: off, Len: len(b)})
	w := b
	if ft != nil {
		w = b[:min(max(ft.Tear, 0), len(b))]
	}
	if len(w) > 0 {
		if err := f.remember(off, int64(len(w))); err != nil {
			return 0, err
		}
		if n, err := f.f.WriteAt(w, off); err != nil {
			return n, err
		}
	}
	if ft != nil {
		return len(w), pathErr("write", f.name, ft.Err)
	}
	return len(w), nil
}

// remember records how to undo a write of n bytes at off. Called with
// fs.mu held.
func (f *file) remember(off, n int64) error {
	fi, err := f.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	var old []byte
	if off < size {
		old = make([]byte, min(n, size-off))
		if _, err := f.f.ReadAt(old, off); err != nil && err != io.EOF {
			return err
		}
	}
	st := f.fs.files[f.name]
	if st == nil { // removed and still open
		return nil
	}
	st.undo = append(st.undo, undo{size: size, off: off, old: old})
	return nil
}

func (f *file) sync(do func() error) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.gone() {
		return pathErr("sync", f.name, syscall.EIO)
	}
	if ft := f.fs.fault(Call{Op: Sync, Name: f.name}); ft != nil {
		// A failed sync makes no promise: what it covered stays at the
		// crash's mercy.
		return pathErr("sync", f.name, ft.Err)
	}
	if err := do(); err != nil {
		return err
	}
	if st := f.fs.files[f.name]; st != nil {
		st.undo = nil
	}
	return nil
}

func (f *file) Sync() error     { return f.sync(f.f.Sync) }
func (f *file) Datasync() error { return f.sync(f.f.Datasync) }

func (f *file) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.gone() {
		return pathErr("truncate", f.name, syscall.EIO)
	}
	if ft := f.fs.fault(Call{Op: Truncate, Name: f.name, Off: size}); ft != nil {
		return pathErr("truncate", f.name, ft.Err)
	}
	fi, err := f.f.Stat()
	if err != nil {
		return err
	}
	if size < fi.Size() {
		if err := f.remember(size, fi.Size()-size); err != nil {
			return err
		}
	} else if st := f.fs.files[f.name]; st != nil {
		st.undo = append(st.undo, undo{size: fi.Size(), off: fi.Size()})
	}
	return f.f.Truncate(size)
}

func (f *file) Stat() (os.FileInfo, error) { return f.f.Stat() }
func (f *file) Close() error               { return f.f.Close() }

// OS is nil: a descriptor handed out would bypass the faults.
func (f *file) OS() *os.File { return nil }
