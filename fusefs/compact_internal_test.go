package fusefs

import (
	"math/rand/v2"
	"testing"

	"cairn/proto/metapb"
)

// byteSource maps each byte of a file to the needle byte it reads
// (key, needle offset); key 0 is a hole.
type byteSource struct{ key, noff uint64 }

func sources(exts []*metapb.Extent, size int) []byteSource {
	out := make([]byteSource, size)
	for _, e := range exts {
		for i := uint64(0); i < e.Length; i++ {
			out[e.Offset+i] = byteSource{e.Key, e.NeedleOffset + i}
		}
	}
	return out
}

// TestOverlayExtentsRandom lays random writes over random lists and checks
// every byte against a flat model, and that the result is sorted, disjoint
// and has no two neighbours that continue one needle.
func TestOverlayExtentsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const size = 4096
	var exts []*metapb.Extent
	model := make([]byteSource, size)
	key := uint64(0)
	for round := 0; round < 3000; round++ {
		var upd []*metapb.Extent
		at := uint64(rng.IntN(64))
		for at < size && len(upd) < 4 {
			n := 1 + uint64(rng.IntN(200))
			if at+n > size {
				n = size - at
			}
			key++
			// Sometimes one needle for two writes: the second continues it.
			if len(upd) > 0 && rng.IntN(4) == 0 {
				p := upd[len(upd)-1]
				upd = append(upd, ext(p.Offset+p.Length, n, p.Key, p.NeedleOffset+p.Length))
			} else {
				upd = append(upd, ext(at, n, key, uint64(rng.IntN(10))))
			}
			last := upd[len(upd)-1]
			for i := uint64(0); i < last.Length; i++ {
				model[last.Offset+i] = byteSource{last.Key, last.NeedleOffset + i}
			}
			at = last.Offset + last.Length + uint64(rng.IntN(300))
		}
		exts = overlayExtents(exts, upd, size)
		got := sources(exts, size)
		for i := range model {
			if got[i] != model[i] {
				t.Fatalf("round %d: byte %d reads %v, want %v", round, i, got[i], model[i])
			}
		}
		for i := 1; i < len(exts); i++ {
			a, b := exts[i-1], exts[i]
			if a.Offset+a.Length > b.Offset {
				t.Fatalf("round %d: extents %d and %d overlap", round, i-1, i)
			}
			if continues(a, b) {
				t.Fatalf("round %d: extents %d and %d continue one needle", round, i-1, i)
			}
		}
	}
}

func TestCompactRuns(t *testing.T) {
	small := func(n int, from uint64, gapAt int) []*metapb.Extent {
		var out []*metapb.Extent
		at := from
		for i := range n {
			if i == gapAt {
				at += 10
			}
			out = append(out, ext(at, 1000, uint64(i+1), 0))
			at += 1000
		}
		return out
	}
	big := ext(0, compactSmall, 99, 0)
	for _, c := range []struct {
		name string
		exts []*metapb.Extent
		want [][2]int
	}{
		{"short list", small(compactAbove, 0, -1), nil},
		{"one run", small(compactAbove+1, 0, -1), [][2]int{{0, compactAbove + 1}}},
		{"a hole splits", small(compactAbove+1, 0, 10), [][2]int{{0, 10}, {10, compactAbove + 1}}},
		{"a big extent splits", append(append([]*metapb.Extent{ext(0, 1000, 1, 0)}, big), small(compactAbove, 1000+compactSmall, -1)...),
			[][2]int{{2, compactAbove + 2}}},
	} {
		if c.name == "a big extent splits" {
			c.exts[1].Offset = 1000
		}
		got := compactRuns(c.exts)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
	// A run stops at compactRun bytes.
	var many []*metapb.Extent
	for i := range 2 * compactRun / (200 << 10) {
		many = append(many, ext(uint64(i)*(200<<10), 200<<10, uint64(i+1), 0))
	}
	runs := compactRuns(many)
	if len(runs) < 2 {
		t.Fatalf("%d extents of 200 KiB: runs %v", len(many), runs)
	}
	for _, r := range runs {
		var n uint64
		for _, e := range many[r[0]:r[1]] {
			n += e.Length
		}
		if n > compactRun {
			t.Fatalf("run %v holds %d bytes", r, n)
		}
	}
}
