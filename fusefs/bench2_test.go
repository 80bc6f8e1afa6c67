package fusefs_test

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
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/meta"
)

// bestOf interleaves rounds of the local and the mount measurement (the
// machine is shared: alternating spreads the noise over both) and keeps
// each side's fastest round.
func bestOf(rounds int, local, mount func() time.Duration) (l, m time.Duration) {
	for i := 0; i < rounds; i++ {
		a, b := local(), mount()
		if i == 0 || a < l {
			l = a
		}
		if i == 0 || b < m {
			m = b
		}
	}
	return l, m
}

// BenchmarkLstatWarm: lstat of a cached 4-deep path (aim: at most 1.2x
// local).
func BenchmarkLstatWarm(b *testing.B) {
	srv := store(b)
	dir, mnt := mount(b, srv, "data", nil)
	const rel = "a/b/c/d/file"
	prep := func(root string) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		return p
	}
	lat := func(p string) func() time.Duration {
		return func() time.Duration {
			var st syscall.Stat_t
			const n = 50_000
			t0 := time.Now()
			for i := 0; i < n; i++ {
				if err := syscall.Lstat(p, &st); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0) / n
		}
	}
	lp, mp, fp := prep(localDir(b)), prep(dir), prep(loopback(b))
	lat(mp)() // warm
	lat(fp)()
	calls, _, _ := mnt.Stats().Totals()
	for i := 0; i < b.N; i++ {
		_, f := bestOf(7, lat(lp), lat(fp))
		l, m := bestOf(7, lat(lp), lat(mp))
		b.ReportMetric(float64(f.Nanoseconds()), "loopback-ns/lstat")
		b.ReportMetric(float64(f)/float64(l), "loopback-ratio")
		after, _, _ := mnt.Stats().Totals()
		b.ReportMetric(float64(after-calls), "fuse-ops")
		b.ReportMetric(float64(l.Nanoseconds()), "local-ns/lstat")
		b.ReportMetric(float64(m.Nanoseconds()), "mount-ns/lstat")
		b.ReportMetric(float64(m)/float64(l), "ratio")
	}
}

// makeTree writes a tar of files of about size bytes spread over dirs
// directories.
func makeTree(b *testing.B, files, dirs, size int) string {
	p := filepath.Join(b.TempDir(), "tree.tar")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	tw := tar.NewWriter(f)
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	now := time.Now()
	for d := 0; d < dirs; d++ {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("src/m%02d/d%03d/", d/100, d), Mode: 0o755, ModTime: now})
	}
	for i := 0; i < files; i++ {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("src/m%02d/d%03d/f%05d.c", i%dirs/100, i%dirs, i), Mode: 0o644, Size: int64(len(data)), ModTime: now}
		if err := tw.WriteHeader(hdr); err != nil {
			b.Fatal(err)
		}
		tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return p
}

func untar(b *testing.B, tarball, dir string) time.Duration {
	t0 := time.Now()
	out, err := exec.Command("tar", "-xf", tarball, "-C", dir).CombinedOutput()
	if err != nil {
		b.Fatalf("tar: %v: %s", err, out)
	}
	return time.Since(t0)
}

// BenchmarkUntar: GNU tar extracting 17,477 files of 4 KB in 1,000
// directories (aim: at most 3x the local time). CAIRN_BENCH_FILES scales
// the file count down for a quick run.
func BenchmarkUntar(b *testing.B) {
	srv := store(b)
	dir, m := mount(b, srv, "data", nil)
	files, dirs := 17_477, 1000
	if s := os.Getenv("CAIRN_BENCH_FILES"); s != "" {
		fmt.Sscan(s, &files)
		dirs = max(1, files/17)
	}
	tarball := makeTree(b, files, dirs, 4096)
	loop := loopback(b)
	for i := 0; i < b.N; i++ {
		// The local disk's time swings 10x between runs on a shared
		// machine (writeback of other work): its best of three is the
		// baseline, which only makes the ratio less flattering.
		l := untar(b, tarball, localDir(b))
		for range 2 {
			l = min(l, untar(b, tarball, localDir(b)))
		}
		f := untar(b, tarball, loop)
		b.ReportMetric(f.Seconds(), "loopback-s")
		b.ReportMetric(f.Seconds()/l.Seconds(), "loopback-ratio")
		d := filepath.Join(dir, fmt.Sprint(i))
		os.Mkdir(d, 0o755)
		mt := untar(b, tarball, d)
		t0 := time.Now()
		m.Sync() // what close left behind, committed
		drain := time.Since(t0)
		b.ReportMetric(l.Seconds(), "local-s")
		b.ReportMetric(mt.Seconds(), "mount-s")
		b.ReportMetric(mt.Seconds()/l.Seconds(), "ratio")
		b.ReportMetric(drain.Seconds(), "then-commit-s")
	}
	b.Log("\n" + m.Stats().String())
}

// nullFS is the ceiling of a FUSE file system on this machine: one file
// whose reads return a preallocated buffer, no work at all.
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

// readAll reads p with 1 MiB reads and returns MB/s.
func readAll(b *testing.B, p string) float64 {
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
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
			b.Fatal(err)
		}
	}
	return float64(total) / 1e6 / time.Since(t0).Seconds()
}

// patterned is an endless reader of incompressible-looking bytes.
type patterned struct{ rng *rand.ChaCha8 }

func (p patterned) Read(b []byte) (int, error) { return p.rng.Read(b) }

// BenchmarkSeqRead: a 2 GB file read sequentially through the mount vs a
// do-nothing go-fuse file system (aim: at least 0.85x of that ceiling).
// CAIRN_BENCH_SEQ_MB sets the size.
func BenchmarkSeqRead(b *testing.B) {
	srv := store(b)
	dir, m := mount(b, srv, "data", func(c *fusefs.Config) {
		if s := os.Getenv("CAIRN_BENCH_BLOCK_KB"); s != "" {
			fmt.Sscan(s, &c.BlockSize)
			c.BlockSize <<= 10
		}
		if s := os.Getenv("CAIRN_BENCH_READAHEAD"); s != "" {
			fmt.Sscan(s, &c.Readahead, &c.Parallel)
		}
	})
	mb := int64(2000)
	if s := os.Getenv("CAIRN_BENCH_SEQ_MB"); s != "" {
		fmt.Sscan(s, &mb)
	}
	size := mb * 1e6
	if _, err := srv.Client().Put(context.Background(), "data", "big", io.LimitReader(patterned{rand.NewChaCha8([32]byte{})}, size), client.PutOptions{SizeHint: size}); err != nil {
		b.Fatal(err)
	}
	ceilDir := b.TempDir()
	ceil, err := fs.Mount(ceilDir, &nullFS{size: size}, &fs.Options{MountOptions: fuse.MountOptions{
		MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, DisableSplice: true, MaxBackground: 64, ExplicitDataCacheControl: true,
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ceil.Unmount() })
	fusefs.SetReadahead(ceilDir, 1<<20) // as the mount does: same kernel settings
	if s := os.Getenv("CAIRN_BENCH_BDI"); s != "" {
		b.Logf("bdi: %s", s)
	}
	// The data plane alone, over HTTP as the mount reads it: what the
	// mount could at most deliver if FUSE cost nothing.
	mc, conn, err := meta.Dial(srv.Addr("meta"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemote(a) }, NoWatch: true})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < b.N; i++ {
		f, err := cl.Stat(context.Background(), "data", "big")
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := cl.ReadTo(context.Background(), f, 0, f.Size(), io.Discard); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(size)/1e6/time.Since(t0).Seconds(), "dataplane-MB/s")
		c := readAll(b, filepath.Join(ceilDir, "file"))
		mt := readAll(b, filepath.Join(dir, "big"))
		b.ReportMetric(c, "ceiling-MB/s")
		b.ReportMetric(mt, "mount-MB/s")
		b.ReportMetric(mt/c, "ratio")
	}
	b.Log("\n" + m.Stats().String())
}

// BenchmarkRandomRead4K: 4 KB preads at random offsets of a 64 MiB file
// already read once (cached), mount vs local (aim: close to local).
func BenchmarkRandomRead4K(b *testing.B) {
	srv := store(b)
	dir, m := mount(b, srv, "data", nil)
	defer func() { b.Log("\n" + m.Stats().String()) }()
	data := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{1}).Read(data)
	open := func(p string) *os.File {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		readAll(b, p)
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	lat := func(f *os.File) func() time.Duration {
		return func() time.Duration {
			buf := make([]byte, 4096)
			rng := rand.New(rand.NewPCG(1, 1))
			const n = 20_000
			t0 := time.Now()
			for i := 0; i < n; i++ {
				off := rng.Int64N(int64(len(data))/4096) * 4096
				if _, err := f.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
			}
			return time.Since(t0) / n
		}
	}
	lf, mf := open(filepath.Join(localDir(b), "f")), open(filepath.Join(dir, "f"))
	for i := 0; i < b.N; i++ {
		l, mt := bestOf(7, lat(lf), lat(mf))
		b.ReportMetric(float64(l.Nanoseconds()), "local-ns/read")
		b.ReportMetric(float64(mt.Nanoseconds()), "mount-ns/read")
		b.ReportMetric(float64(mt)/float64(l), "ratio")
	}
}
