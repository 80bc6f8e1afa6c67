package fusefs_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn"
	"cairn/bench"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/meta"
	"cairn/server/servertest"
)

// BenchmarkLstatWarm: lstat of a cached 4-deep path (aim: at most 1.2x
// local).
func BenchmarkLstatWarm(b *testing.B) {
	srv := store(b)
	dir, mnt := mount(b, srv, "data", nil)
	prep := func(root string) string {
		p, err := bench.LstatPath(root)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	lat := func(p string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return bench.Lstat(p, 50_000) }
	}
	lp, mp, fp := prep(localDir(b)), prep(dir), prep(loopback(b))
	lat(mp)() // warm
	lat(fp)()
	calls, _, _ := mnt.Stats().Totals()
	for i := 0; i < b.N; i++ {
		_, f, err := bench.BestOf(7, lat(lp), lat(fp))
		if err != nil {
			b.Fatal(err)
		}
		l, m, err := bench.BestOf(7, lat(lp), lat(mp))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(f.Nanoseconds()), "loopback-ns/lstat")
		b.ReportMetric(float64(f)/float64(l), "loopback-ratio")
		after, _, _ := mnt.Stats().Totals()
		b.ReportMetric(float64(after-calls), "fuse-ops")
		b.ReportMetric(float64(l.Nanoseconds()), "local-ns/lstat")
		b.ReportMetric(float64(m.Nanoseconds()), "mount-ns/lstat")
		b.ReportMetric(float64(m)/float64(l), "ratio")
	}
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
	tarball := filepath.Join(b.TempDir(), "tree.tar")
	if err := bench.MakeTree(tarball, files, dirs, 4096); err != nil {
		b.Fatal(err)
	}
	untar := func(dir string) time.Duration {
		d, err := bench.Untar(tarball, dir)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	loop := loopback(b)
	for i := 0; i < b.N; i++ {
		// The local disk's time swings 10x between runs on a shared
		// machine (writeback of other work): its best of three is the
		// baseline, which only makes the ratio less flattering.
		l := untar(localDir(b))
		for range 2 {
			l = min(l, untar(localDir(b)))
		}
		f := untar(loop)
		b.ReportMetric(f.Seconds(), "loopback-s")
		b.ReportMetric(f.Seconds()/l.Seconds(), "loopback-ratio")
		fl := untar(floorFS(b))
		b.ReportMetric(fl.Seconds(), "floor-s")
		b.ReportMetric(fl.Seconds()/l.Seconds(), "floor-ratio")
		d := filepath.Join(dir, fmt.Sprint(i))
		os.Mkdir(d, 0o755)
		mt := untar(d)
		t0 := time.Now()
		m.Sync() // what close left behind, committed
		drain := time.Since(t0)
		b.ReportMetric(l.Seconds(), "local-s")
		b.ReportMetric(mt.Seconds(), "mount-s")
		b.ReportMetric(mt.Seconds()/l.Seconds(), "ratio")
		b.ReportMetric(mt.Seconds()/fl.Seconds(), "mount-vs-floor")
		b.ReportMetric(drain.Seconds(), "then-commit-s")
	}
	b.Log("\n" + m.Stats().String())
}

// BenchmarkSeqRead: a 2 GB file read sequentially through the mount vs a
// do-nothing go-fuse file system (aim: at least 0.85x of that ceiling).
// CAIRN_BENCH_SEQ_MB sets the size, CAIRN_BENCH_ROUNDS the runs of
// each (best taken; default 3).
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
	mb, rounds := int64(2000), 3
	if s := os.Getenv("CAIRN_BENCH_SEQ_MB"); s != "" {
		fmt.Sscan(s, &mb)
	}
	if s := os.Getenv("CAIRN_BENCH_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds)
	}
	size := mb * 1e6
	if _, err := srv.Client().Put(context.Background(), "data", "big", io.LimitReader(bench.NewPatterned(0), size), client.PutOptions{SizeHint: size}); err != nil {
		b.Fatal(err)
	}
	ceilDir := b.TempDir()
	unmount, err := bench.CeilingFS(ceilDir, size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unmount() })
	fusefs.SetReadahead(ceilDir, 1<<20) // as the mount does: same kernel settings
	if s := os.Getenv("CAIRN_BENCH_BDI"); s != "" {
		b.Logf("bdi: %s", s)
	}
	// The data plane alone, over HTTP as the mount reads it: what the
	// mount could at most deliver if FUSE cost nothing.
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl, err := client.New(client.Config{Meta: mc, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, srv.UserTLS()) }, NoWatch: true})
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
		c, mt, err := bench.SeqReadVs(filepath.Join(ceilDir, "file"), filepath.Join(dir, "big"), rounds)
		if err != nil {
			b.Fatal(err)
		}
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
		if _, err := bench.SeqRead(p); err != nil { // cached
			b.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	lat := func(f *os.File) func() (time.Duration, error) {
		return func() (time.Duration, error) { return bench.RandomRead(f, int64(len(data)), 20_000) }
	}
	lf, mf := open(filepath.Join(localDir(b), "f")), open(filepath.Join(dir, "f"))
	for i := 0; i < b.N; i++ {
		l, mt, err := bench.BestOf(7, lat(lf), lat(mf))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(l.Nanoseconds()), "local-ns/read")
		b.ReportMetric(float64(mt.Nanoseconds()), "mount-ns/read")
		b.ReportMetric(float64(mt)/float64(l), "ratio")
	}
}
