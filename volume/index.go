package volume

import (
	"slices"
	"sort"
)

// slot is one index entry: 16 bytes. off is the record offset in 8-byte
// units (0 never holds a record: the superblock is there, so off == 0 marks
// a deleted slot); size is the needle's data length.
type slot struct {
	key  uint64
	off  uint32
	size uint32
}

// index maps needle keys to records. Keys assigned by Append grow
// monotonically, so nearly every insert is an append to a sorted slice and
// a lookup is a binary search: 16 bytes per needle, no per-entry pointers
// for the garbage collector to scan. Keys that arrive out of order (a
// caller-chosen key below the largest seen) go to a small map.
type index struct {
	sorted []slot
	extra  map[uint64]slot
	live   int
}

func (x *index) find(key uint64) (int, bool) {
	return slices.BinarySearchFunc(x.sorted, key, func(s slot, k uint64) int {
		switch {
		case s.key < k:
			return -1
		case s.key > k:
			return 1
		}
		return 0
	})
}

func (x *index) get(key uint64) (slot, bool) {
	if n := len(x.sorted); n > 0 && key <= x.sorted[n-1].key {
		if i, ok := x.find(key); ok {
			s := x.sorted[i]
			return s, s.off != 0
		}
	}
	s, ok := x.extra[key]
	return s, ok
}

// put sets key's record and returns the one it replaces, if any.
func (x *index) put(s slot) (old slot, replaced bool) {
	n := len(x.sorted)
	if n == 0 || s.key > x.sorted[n-1].key {
		if old, replaced = x.extra[s.key]; replaced {
			delete(x.extra, s.key)
		} else {
			x.live++
		}
		x.sorted = append(x.sorted, s)
		return old, replaced
	}
	if i, ok := x.find(s.key); ok {
		old = x.sorted[i]
		x.sorted[i] = s
		if old.off == 0 {
			x.live++
			return old, false
		}
		return old, true
	}
	if x.extra == nil {
		x.extra = map[uint64]slot{}
	}
	old, replaced = x.extra[s.key]
	if !replaced {
		x.live++
	}
	x.extra[s.key] = s
	return old, replaced
}

// del removes key and returns its record, if it had one.
func (x *index) del(key uint64) (slot, bool) {
	if n := len(x.sorted); n > 0 && key <= x.sorted[n-1].key {
		if i, ok := x.find(key); ok && x.sorted[i].off != 0 {
			old := x.sorted[i]
			x.sorted[i].off = 0
			x.live--
			return old, true
		}
	}
	if old, ok := x.extra[key]; ok {
		delete(x.extra, key)
		x.live--
		return old, true
	}
	return slot{}, false
}

// byOffset returns the live entries below end (a byte offset), in file order.
func (x *index) byOffset(end int64) []slot {
	out := make([]slot, 0, x.live)
	for _, s := range x.sorted {
		if s.off != 0 && int64(s.off)*8 < end {
			out = append(out, s)
		}
	}
	for _, s := range x.extra {
		if int64(s.off)*8 < end {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return out
}
