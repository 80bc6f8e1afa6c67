// Package vfs is the file-system seam under the storage code (volume, the
// mount's disk cache): the few calls they make, as an interface, so that a
// test can put a failing disk under them (package errorfs) where production
// has the operating system (Default).
package vfs

import (
	"io"
	"os"
)

// FS is what the storage code asks of a file system.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Rename(oldname, newname string) error
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes the directory's entries (creates, renames, removes)
	// durable.
	SyncDir(dir string) error
}

// File is an open file.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Sync flushes data and metadata (fsync).
	Sync() error
	// Datasync flushes data and what is needed to read it back, such as
	// the size (fdatasync): the commit point of the volume's writes.
	Datasync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
	// OS is the operating system's file under this one, or nil: what must
	// have a real descriptor (handing it to another process) asks for it
	// and does without when there is none.
	OS() *os.File
}

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error              { return os.Remove(name) }
func (osFS) Rename(oldname, newname string) error  { return os.Rename(oldname, newname) }
func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// osFile embeds *os.File for ReadAt, WriteAt, Sync, Truncate, Stat, Close.
type osFile struct{ *os.File }

func (f osFile) Datasync() error { return datasync(f.File) }
func (f osFile) OS() *os.File    { return f.File }

// ReadFile reads the whole of name.
func ReadFile(fs FS, name string) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	n, err := f.ReadAt(b, 0)
	if err == io.EOF && int64(n) == fi.Size() {
		err = nil
	}
	return b[:n], err
}

// WriteFileSync writes name whole and fsyncs it before returning.
func WriteFileSync(fs FS, name string, b []byte, perm os.FileMode) error {
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
