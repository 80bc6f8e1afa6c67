package meta

import (
	"encoding/binary"

	"google.golang.org/protobuf/proto"

	"cairn/proto/metapb"
)

// A file's extent list is rewritten under a new generation each time it
// changes other than by appending: f/{ino}{gen}{offset} → metapb.Extent,
// with the generation in Inode.extent_gen. Rewriting in place (the first
// layout, e/{ino}{offset}, still read for files whose gen is 0) left every
// overwritten and deleted key in Pebble's memtable and young tables until
// compaction, and every later read of the list stepped over all of them:
// a file rewritten by thousands of small random writes took longer to
// commit and to resolve with each commit. Under generations a read seeks
// straight past the deleted generations, so a commit costs what the
// file's current list holds, whatever its history; the mount keeps that
// list short (coalescing, compaction of fragmented files, fusefs/file.go).
const pExtentGen = 'f'

func extentGenPrefix(ino, gen uint64) []byte {
	k := make([]byte, 2, 26)
	k[0], k[1] = pExtentGen, '/'
	k = binary.BigEndian.AppendUint64(k, ino)
	return binary.BigEndian.AppendUint64(k, gen)
}

// extentsAt is the key prefix under which n's current extents live.
func extentsAt(n *metapb.Inode) []byte {
	if n.ExtentGen == 0 {
		return extentPrefix(n.Ino)
	}
	return extentGenPrefix(n.Ino, n.ExtentGen)
}

func extentAt(n *metapb.Inode, off uint64) []byte {
	return binary.BigEndian.AppendUint64(extentsAt(n), off)
}

// coalesce joins neighbours that continue each other in one needle (a
// range split by a write that a later write or truncate undid). exts is
// sorted and disjoint; it is reused.
func coalesce(exts []*metapb.Extent) []*metapb.Extent {
	out := exts[:0]
	for _, e := range exts {
		if k := len(out); k > 0 {
			p := out[k-1]
			if p.Volume == e.Volume && p.Key == e.Key && p.Offset+p.Length == e.Offset && p.NeedleOffset+p.Length == e.NeedleOffset {
				c := proto.Clone(p).(*metapb.Extent)
				c.Length += e.Length
				out[k-1] = c
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

// replaceExtents makes exts (sorted, disjoint) the extents of n, as a new
// generation, and releases each needle of the old list that keep does not
// name. n's record must be written by the caller (it carries the
// generation). The old list stays in place until this batch commits, so
// readers see the old file or the new one; the released needles reach the
// garbage collector in the same batch, never before.
func (t *txn) replaceExtents(n *metapb.Inode, exts []*metapb.Extent, keep map[needle]bool) error {
	old, err := t.v.extents(n)
	if err != nil {
		return err
	}
	released := map[needle]bool{}
	for _, e := range old {
		if err := t.del(extentAt(n, e.Offset)); err != nil {
			return err
		}
		if nd := (needle{e.Volume, e.Key}); !keep[nd] && !released[nd] {
			released[nd] = true
			if err := t.release(nd); err != nil {
				return err
			}
		}
	}
	n.ExtentGen++
	return t.appendExtents(n, 0, coalesce(append([]*metapb.Extent(nil), exts...)))
}

// appendExtents writes exts, shifted by base, into n's current generation.
func (t *txn) appendExtents(n *metapb.Inode, base uint64, exts []*metapb.Extent) error {
	for _, e := range exts {
		c := proto.Clone(e).(*metapb.Extent)
		c.Offset += base
		if err := t.put(extentAt(n, c.Offset), c); err != nil {
			return err
		}
	}
	return nil
}

// cutExtents returns the extents of exts below size, the one that
// straddles it shortened.
func cutExtents(exts []*metapb.Extent, size uint64) []*metapb.Extent {
	var out []*metapb.Extent
	for _, e := range exts {
		if e.Offset >= size {
			break
		}
		if e.Offset+e.Length > size {
			e = proto.Clone(e).(*metapb.Extent)
			e.Length = size - e.Offset
		}
		out = append(out, e)
	}
	return out
}

// needlesOf is the set of needles exts point into.
func needlesOf(exts []*metapb.Extent) map[needle]bool {
	m := make(map[needle]bool, len(exts))
	for _, e := range exts {
		m[needle{e.Volume, e.Key}] = true
	}
	return m
}
