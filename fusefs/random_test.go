package fusefs_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"cairn/fusefs"
)

// TestRandomOps applies random reads, writes, truncates, reopens and
// fsyncs to one file on the mount and to a local reference file, and
// compares the two after every step. A reopen followed by a read races the
// close's write-behind commit, which once made a read answer short (and
// the kernel shrink the file): several seeds give that race more chances.
func TestRandomOps(t *testing.T) {
	// Reads take two paths: in place from the volume files of a data
	// server on this host, or over HTTP through the block cache.
	for _, remote := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "remote"}[remote], func(t *testing.T) {
			srv := startStore(t, remote)
			dir, _ := mount(t, srv, "data", func(c *fusefs.Config) { c.BlockSize = 64 << 10; c.DirtyMax = 1 << 20 })
			for seed := uint64(1); seed <= 3; seed++ {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { randomOps(t, dir, seed) })
			}
		})
	}
}

func randomOps(t *testing.T, dir string, seed uint64) {
	ref := filepath.Join(t.TempDir(), "ref")
	p := filepath.Join(dir, fmt.Sprint("random", seed))
	open := func(name string) *os.File {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
		must(t, err)
		return f
	}
	mf, rf := open(p), open(ref)
	defer func() { mf.Close(); rf.Close() }()
	rng := rand.New(rand.NewPCG(seed, 2))
	const maxSize = 3 << 20
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(10); {
		case op < 4: // write
			off := rng.Int64N(maxSize)
			buf := make([]byte, 1+rng.IntN(200<<10))
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			_, err1 := mf.WriteAt(buf, off)
			_, err2 := rf.WriteAt(buf, off)
			if err1 != nil || err2 != nil {
				t.Fatalf("step %d write: %v / %v", step, err1, err2)
			}
		case op < 7: // read
			off := rng.Int64N(maxSize)
			n := 1 + rng.IntN(300<<10)
			b1, b2 := make([]byte, n), make([]byte, n)
			n1, _ := mf.ReadAt(b1, off)
			n2, _ := rf.ReadAt(b2, off)
			if n1 != n2 || !bytes.Equal(b1[:n1], b2[:n2]) {
				t.Fatalf("step %d read at %d: %d vs %d bytes, differ=%v", step, off, n1, n2, !bytes.Equal(b1[:n1], b2[:n2]))
			}
		case op == 7: // truncate
			sz := rng.Int64N(maxSize)
			must(t, mf.Truncate(sz))
			must(t, rf.Truncate(sz))
		case op == 8: // close and reopen: a commit, then a read from meta's extents
			must(t, mf.Close())
			mf = open(p)
		default:
			must(t, mf.Sync())
		}
		s1, err := mf.Stat()
		must(t, err)
		s2, err := rf.Stat()
		must(t, err)
		if s1.Size() != s2.Size() {
			t.Fatalf("step %d: size %d, reference %d", step, s1.Size(), s2.Size())
		}
	}
	must(t, mf.Close())
	got, err := os.ReadFile(p)
	must(t, err)
	want, err := os.ReadFile(ref)
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("final content differs (%d vs %d bytes)", len(got), len(want))
	}
}
