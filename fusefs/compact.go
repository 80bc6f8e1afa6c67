package fusefs

import (
	"context"

	"cairn/proto/metapb"
)

// Compaction of a fragmented file. Random small writes leave a file as
// many small extents, each a piece of its own needle; every commit ships
// the whole list to meta and every read walks it. When a flush would
// commit more than compactAbove extents, it also rewrites runs of small
// extents that touch each other (no hole between: holes stay holes) into
// one new needle per run, read back through the block cache, and commits
// the runs' new extents in place of the old in the same Commit. The old
// needles stay readable until that commit applies; meta then releases the
// ones no extent points into any more, and the garbage collector takes
// them as it takes any overwritten data. A commit that fails discards the
// new needles and keeps the old list.
const (
	compactAbove = 64        // extents in a list that make a flush compact
	compactSmall = 256 << 10 // an extent shorter than this is small
	compactRun   = 8 << 20   // at most this many bytes per new needle
	compactMax   = 64 << 20  // at most this many bytes rewritten per flush
)

// compactRuns returns the runs of exts worth rewriting, as index ranges
// [i, j): at least two small extents, each beginning where the previous
// ends, at most compactRun bytes, compactMax in all.
func compactRuns(exts []*metapb.Extent) [][2]int {
	if len(exts) <= compactAbove {
		return nil
	}
	var runs [][2]int
	var total uint64
	for i := 0; i < len(exts) && total < compactMax; {
		if exts[i].Length >= compactSmall {
			i++
			continue
		}
		j, bytes := i+1, exts[i].Length
		for j < len(exts) && exts[j].Length < compactSmall && exts[j].Offset == exts[j-1].Offset+exts[j-1].Length &&
			bytes+exts[j].Length <= compactRun && total+bytes+exts[j].Length <= compactMax {
			bytes += exts[j].Length
			j++
		}
		if j-i >= 2 {
			runs = append(runs, [2]int{i, j})
			total += bytes
		}
		i = j
	}
	return runs
}

// compact returns exts with its small-extent runs rewritten into new
// needles (see above), and the new needles' extents, which the caller
// commits or discards. A run that cannot be read or stored is left as it
// was: compaction is an optimization, never a reason to fail a flush.
func (m *Mount) compact(ctx context.Context, ns string, exts []*metapb.Extent) (out, packed []*metapb.Extent) {
	runs := compactRuns(exts)
	if runs == nil {
		return exts, nil
	}
	out = make([]*metapb.Extent, 0, len(exts))
	at := 0
	for _, r := range runs {
		out = append(out, exts[at:r[0]]...)
		at = r[1]
		run := exts[r[0]:r[1]]
		lo := int64(run[0].Offset)
		hi := int64(run[len(run)-1].Offset + run[len(run)-1].Length)
		buf := make([]byte, hi-lo)
		if err := m.blocks.read(ctx, run, hi, lo, buf); err != nil {
			out = append(out, run...)
			continue
		}
		stored, err := m.upload(ctx, ns, buf)
		if err != nil {
			out = append(out, run...)
			continue
		}
		for _, e := range stored {
			m.blocks.insert(e.Volume, e.Key, buf[e.Offset:e.Offset+e.Length])
			e.Offset += uint64(lo)
		}
		out = append(out, stored...)
		packed = append(packed, stored...)
	}
	return append(out, exts[at:]...), packed
}
