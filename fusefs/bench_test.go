package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The benchmarks compare the mount with a local directory (t.TempDir, on
// the machine's own file system) in the same run and report the ratio:
//
//	go test -run '^$' -bench . -benchtime 1x ./fusefs/

// localDir is where the local side of each comparison runs.
func localDir(b *testing.B) string {
	if d := os.Getenv("CAIRN_BENCH_LOCAL"); d != "" {
		dir, err := os.MkdirTemp(d, "local")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// loopback mounts go-fuse's pass-through file system over a local
// directory: every operation makes the same kernel round trips as through
// the mount, and then simply does it on the local disk. It is the ceiling
// of any FUSE file system on this machine for metadata-heavy work, with
// the mount's kernel settings (attributes and entries cached 10 minutes,
// as the mount caches them while its session is live).
func loopback(b *testing.B) string {
	under, dir := localDir(b), b.TempDir()
	root, err := fs.NewLoopbackRoot(under)
	if err != nil {
		b.Fatal(err)
	}
	long := 10 * time.Minute
	srv, err := fs.Mount(dir, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20, MaxBackground: 64, DisableSplice: true,
			Options: []string{"default_permissions"},
		},
		EntryTimeout: &long, AttrTimeout: &long,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Unmount() })
	return dir
}

// smallFiles writes n files of size bytes in 4-deep paths under root and
// reads them back; it returns files/s of each phase.
func smallFiles(b *testing.B, root string, n, size int) (write, read float64) {
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
			os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write = float64(n) / time.Since(t0).Seconds()
	t0 = time.Now()
	for i := 0; i < n; i++ {
		got, err := os.ReadFile(path(i))
		if err != nil || len(got) != size {
			b.Fatalf("read %s: %d bytes, %v", path(i), len(got), err)
		}
	}
	read = float64(n) / time.Since(t0).Seconds()
	return
}

// BenchmarkSmallFiles: 5,000 files of 64 KB in 4-deep paths, create+write
// then read back (aim: at least 0.3x local files/s).
func BenchmarkSmallFiles(b *testing.B) {
	srv := store(b)
	dir, m := mount(b, srv, "data", nil)
	loop := loopback(b)
	n := 5000
	if s := os.Getenv("CAIRN_BENCH_FILES"); s != "" {
		fmt.Sscan(s, &n)
	}
	for i := 0; i < b.N; i++ {
		lw, lr := smallFiles(b, filepath.Join(localDir(b), fmt.Sprint(i)), n, 64<<10)
		fw, fr := smallFiles(b, filepath.Join(loop, fmt.Sprint(i)), n, 64<<10)
		mw, mr := smallFiles(b, filepath.Join(dir, fmt.Sprint(i)), n, 64<<10)
		b.ReportMetric(fw/lw, "loopback-write-ratio")
		b.ReportMetric(fr/lr, "loopback-read-ratio")
		t0 := time.Now()
		m.Sync()
		b.ReportMetric(time.Since(t0).Seconds(), "then-commit-s")
		b.ReportMetric(mw, "mount-write-files/s")
		b.ReportMetric(lw, "local-write-files/s")
		b.ReportMetric(mw/lw, "write-ratio")
		b.ReportMetric(mr, "mount-read-files/s")
		b.ReportMetric(lr, "local-read-files/s")
		b.ReportMetric(mr/lr, "read-ratio")
	}
	b.Log("\n" + m.Stats().String())
}
