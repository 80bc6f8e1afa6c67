package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"cairn/bench"
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

// floorFS mounts an in-memory FUSE file system that does nothing else
// (bench.MemFS): FUSE's own cost, the floor under the mount's ratios.
func floorFS(b *testing.B) string {
	dir := b.TempDir()
	unmount, err := bench.MemFS(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unmount() })
	return dir
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
		smallFiles := func(root string) (w, r float64) {
			w, r, err := bench.SmallFiles(filepath.Join(root, fmt.Sprint(i)), n, 64<<10)
			if err != nil {
				b.Fatal(err)
			}
			return w, r
		}
		lw, lr := smallFiles(localDir(b))
		fw, fr := smallFiles(loop)
		flw, flr := smallFiles(floorFS(b))
		mw, mr := smallFiles(dir)
		b.ReportMetric(fw/lw, "loopback-write-ratio")
		b.ReportMetric(fr/lr, "loopback-read-ratio")
		b.ReportMetric(flw/lw, "floor-write-ratio")
		b.ReportMetric(flr/lr, "floor-read-ratio")
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
