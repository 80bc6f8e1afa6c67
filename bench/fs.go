package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// File-system workloads: the mount's speed figures, run on any directory
// (a Cairn mount, the local disk beside it, another FUSE file system) so
// that `cairn bench mount` and the fusefs benchmarks measure the same
// thing and report ratios from one run.

// BestOf runs the two measurements in turn, rounds times (the machine is
// shared: alternating spreads the noise over both), and keeps each one's
// fastest round.
func BestOf(rounds int, a, b func() (time.Duration, error)) (ta, tb time.Duration, err error) {
	for i := 0; i < rounds; i++ {
		x, err := a()
		if err != nil {
			return 0, 0, err
		}
		y, err := b()
		if err != nil {
			return 0, 0, err
		}
		if i == 0 || x < ta {
			ta = x
		}
		if i == 0 || y < tb {
			tb = y
		}
	}
	return ta, tb, nil
}

// LstatPath creates root/a/b/c/d/file and returns its path.
func LstatPath(root string) (string, error) {
	p := filepath.Join(root, "a", "b", "c", "d", "file")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, []byte("x"), 0o644)
}

// Lstat returns the mean time of n lstat calls of p.
func Lstat(p string, n int) (time.Duration, error) {
	var st syscall.Stat_t
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := syscall.Lstat(p, &st); err != nil {
			return 0, err
		}
	}
	return time.Since(t0) / time.Duration(n), nil
}

// SmallFiles writes n files of size bytes in 4-deep paths under root, then
// reads them back; it returns the files/s of each phase.
func SmallFiles(root string, n, size int) (write, read float64, err error) {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	path := func(i int) string {
		return filepath.Join(root, fmt.Sprintf("a%d", i%10), fmt.Sprintf("b%d", i/10%10), fmt.Sprintf("c%d", i/100%5), "d", fmt.Sprintf("f%05d", i))
	}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		p := path(i)
		if i%1000 < 10 || i < 1000 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return 0, 0, err
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return 0, 0, err
		}
	}
	write = float64(n) / time.Since(t0).Seconds()
	t0 = time.Now()
	for i := 0; i < n; i++ {
		got, err := os.ReadFile(path(i))
		if err != nil {
			return 0, 0, err
		}
		if len(got) != size {
			return 0, 0, fmt.Errorf("read %s: %d bytes, want %d", path(i), len(got), size)
		}
	}
	read = float64(n) / time.Since(t0).Seconds()
	return write, read, nil
}

// Creates runs one writer per entry of dirs at once, each creating n
// files of size bytes (create, write, close) under names of its own in
// that directory, and returns the creates per second of all of them. Two
// entries may name one directory, directly or through two mounts.
func Creates(dirs []string, n, size int) (float64, error) {
	data := make([]byte, size)
	errs := make(chan error, len(dirs))
	t0 := time.Now()
	for w, dir := range dirs {
		go func() {
			for i := 0; i < n; i++ {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("w%d-f%05d", w, i)), data, 0o644); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range dirs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return 0, first
	}
	return float64(len(dirs)*n) / time.Since(t0).Seconds(), nil
}

// MakeTree writes to p a tar of files files of about size bytes spread
// over dirs directories (the untar workload: 17,477 files of 4 KB in
// 1,000 directories).
func MakeTree(p string, files, dirs, size int) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	now := time.Now()
	for d := 0; d < dirs; d++ {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("src/m%02d/d%03d/", d/100, d), Mode: 0o755, ModTime: now}); err != nil {
			return err
		}
	}
	for i := 0; i < files; i++ {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("src/m%02d/d%03d/f%05d.c", i%dirs/100, i%dirs, i), Mode: 0o644, Size: int64(len(data)), ModTime: now}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// Untar extracts tarball into dir with GNU tar and returns the time taken.
func Untar(tarball, dir string) (time.Duration, error) {
	t0 := time.Now()
	out, err := exec.Command("tar", "-xf", tarball, "-C", dir).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("tar: %v: %s", err, out)
	}
	return time.Since(t0), nil
}

// SeqRead reads p with 1 MiB reads and returns MB/s.
func SeqRead(p string) (float64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	t0 := time.Now()
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	return float64(total) / 1e6 / time.Since(t0).Seconds(), nil
}

// SeqReadVs reads the ceiling file and then p, each rounds times in
// turn, dropping both from the kernel's page cache before each read,
// and returns the best throughput of each (MB/s). Taking turns and the
// best of several runs keeps a shared machine's noise out of the ratio.
func SeqReadVs(ceiling, p string, rounds int) (c, m float64, err error) {
	for range max(rounds, 1) {
		if err := DropCached(ceiling); err != nil {
			return 0, 0, err
		}
		ct, err := SeqRead(ceiling)
		if err != nil {
			return 0, 0, err
		}
		if err := DropCached(p); err != nil {
			return 0, 0, err
		}
		mt, err := SeqRead(p)
		if err != nil {
			return 0, 0, err
		}
		if os.Getenv("CAIRN_BENCH_VERBOSE") != "" {
			fmt.Fprintf(os.Stderr, "seq read: ceiling %.0f MB/s, mount %.0f MB/s\n", ct, mt)
		}
		c, m = max(c, ct), max(m, mt)
	}
	return c, m, nil
}

// DropCached drops p's pages from the kernel's page cache, so that the
// read that follows is served by the file system.
func DropCached(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// RandomRead returns the mean time of n 4 KiB reads at random aligned
// offsets of f (the same offsets on every call).
func RandomRead(f *os.File, size int64, n int) (time.Duration, error) {
	buf := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(1, 1))
	t0 := time.Now()
	for i := 0; i < n; i++ {
		off := rng.Int64N(size/4096) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			return 0, err
		}
	}
	return time.Since(t0) / time.Duration(n), nil
}

// Patterned is an endless reader of incompressible bytes.
type Patterned struct{ rng *rand.ChaCha8 }

func NewPatterned(seed byte) Patterned {
	return Patterned{rand.NewChaCha8([32]byte{seed})}
}

func (p Patterned) Read(b []byte) (int, error) { return p.rng.Read(b) }

// CeilingFS mounts at dir a do-nothing FUSE file system holding one file,
// "file", of size bytes whose reads return a preallocated buffer: the
// ceiling of any FUSE file system's streaming on this machine, with the
// kernel settings a Cairn mount uses.
func CeilingFS(dir string, size int64) (unmount func() error, err error) {
	srv, err := fs.Mount(dir, &nullFS{size: size}, &fs.Options{MountOptions: fuse.MountOptions{
		MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DisableSplice: true, MaxBackground: 64, ExplicitDataCacheControl: true,
	}})
	if err != nil {
		return nil, err
	}
	return srv.Unmount, nil
}

type nullFS struct {
	fs.Inode
	size int64
}

var zeros1M = make([]byte, 1<<20)

func (n *nullFS) OnAdd(ctx context.Context) {
	ch := n.NewPersistentInode(ctx, &nullFile{size: n.size}, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
	n.AddChild("file", ch, false)
}

type nullFile struct {
	fs.Inode
	size int64
}

func (f *nullFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = 0o444, uint64(f.size)
	return 0
}

func (f *nullFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *nullFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := max(0, min(int64(len(dest)), f.size-off))
	return fuse.ReadResultData(zeros1M[:n]), 0
}
