package fusefs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

func TestErrnoTable(t *testing.T) {
	for k := errors.Other; k <= errors.BadDigest; k++ {
		if _, ok := kindErrno[k]; !ok {
			t.Errorf("kind %v has no errno", k)
		}
	}
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{errors.E(errors.NotExist, "x"), syscall.ENOENT},
		{errors.E(errors.Op("a"), errors.E(errors.NotEmpty, "x")), syscall.ENOTEMPTY},
		{syscall.EXDEV, syscall.EXDEV},
		{errors.New("plain"), syscall.EIO},
	} {
		if got := errno(context.Background(), c.err); got != c.want {
			t.Errorf("errno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A call the kernel interrupted: what the store could not answer is
	// EINTR, what it did answer stands.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{errors.E(errors.Unavailable, "not the meta leader"), syscall.EINTR},
		{errors.E(errors.Canceled, "x"), syscall.EINTR},
		{errors.New("plain"), syscall.EINTR},
		{errors.E(errors.NotExist, "x"), syscall.ENOENT},
		{errors.E(errors.Exist, "x"), syscall.EEXIST},
	} {
		if got := errno(cancelled, c.err); got != c.want {
			t.Errorf("errno(interrupted, %v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func ext(off, n uint64, key uint64, noff uint64) *metapb.Extent {
	return &metapb.Extent{Offset: off, Length: n, Volume: 1, Key: key, NeedleOffset: noff}
}

func TestOverlayExtents(t *testing.T) {
	base := []*metapb.Extent{ext(0, 100, 1, 0), ext(100, 100, 2, 0)}
	for _, c := range []struct {
		name string
		upd  []*metapb.Extent
		size int64
		want []*metapb.Extent
	}{
		{"middle", []*metapb.Extent{ext(50, 100, 3, 0)}, 200,
			[]*metapb.Extent{ext(0, 50, 1, 0), ext(50, 100, 3, 0), ext(150, 50, 2, 50)}},
		{"inside one", []*metapb.Extent{ext(10, 10, 3, 0)}, 200,
			[]*metapb.Extent{ext(0, 10, 1, 0), ext(10, 10, 3, 0), ext(20, 80, 1, 20), ext(100, 100, 2, 0)}},
		{"past the end", []*metapb.Extent{ext(250, 10, 3, 0)}, 260,
			[]*metapb.Extent{ext(0, 100, 1, 0), ext(100, 100, 2, 0), ext(250, 10, 3, 0)}},
		{"cut", nil, 150, []*metapb.Extent{ext(0, 100, 1, 0), ext(100, 50, 2, 0)}},
	} {
		got := overlayExtents(base, c.upd, c.size)
		if len(got) != len(c.want) {
			t.Errorf("%s: got %v", c.name, got)
			continue
		}
		for i := range got {
			g, w := got[i], c.want[i]
			if g.Offset != w.Offset || g.Length != w.Length || g.Key != w.Key || g.NeedleOffset != w.NeedleOffset {
				t.Errorf("%s: extent %d = %v, want %v", c.name, i, g, w)
			}
		}
	}
}

// TestDirtySpans checks the write-back buffer against a flat reference.
func TestDirtySpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var f fileState
	ref := make([]byte, 0)
	written := make([]bool, 0)
	for i := 0; i < 2000; i++ {
		off := rng.IntN(1 << 16)
		data := make([]byte, 1+rng.IntN(3000))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		f.write(int64(off), data, 0)
		for len(ref) < off+len(data) {
			ref = append(ref, 0)
			written = append(written, false)
		}
		copy(ref[off:], data)
		for j := range data {
			written[off+j] = true
		}
	}
	if f.size != int64(len(ref)) {
		t.Fatalf("size %d, want %d", f.size, len(ref))
	}
	var total int64
	for i, s := range f.dirty {
		if i > 0 && f.dirty[i-1].end() >= s.off {
			t.Fatalf("spans %d and %d overlap or touch", i-1, i)
		}
		total += int64(len(s.data))
	}
	if total != f.nDirty {
		t.Fatalf("nDirty %d, spans hold %d", f.nDirty, total)
	}
	got := make([]byte, len(ref))
	f.overlay(0, got)
	for i := range ref {
		if !written[i] {
			ref[i] = 0
		}
	}
	if !bytes.Equal(got, ref) {
		t.Fatal("overlay differs from the reference")
	}
}

// FuzzBlockName: a disk-tier file name parses only into a block range
// that names the same file again, so an adopted file is read back under
// the key and range it was written for.
func FuzzBlockName(f *testing.F) {
	d := &diskCache{dir: "."}
	f.Add(filepath.Base(d.path(&diskEnt{k: blockKey{vol: 3, key: 0xabc, idx: 2}, lo: 131072, hi: 196608})))
	f.Add("1-1-0")
	f.Add("tmp-123456")
	f.Add("4294967296-1-0-0-1")
	f.Fuzz(func(t *testing.T, name string) {
		e, ok := parseBlockName(name)
		if !ok {
			return
		}
		if e.hi <= e.lo || e.lo < 0 || e.k.idx < 0 {
			t.Fatalf("%q parsed to a bad range %+v", name, e)
		}
		again, ok := parseBlockName(filepath.Base(d.path(e)))
		if !ok || again.k != e.k || again.lo != e.lo || again.hi != e.hi {
			t.Fatalf("%q: %+v named %q, which parses to %+v", name, e, d.path(e), again)
		}
	})
}
