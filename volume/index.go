package volume

import (
	"slices"
	"sort"
)

// slot is one index entry: 16 bytes. seq and cookie are the halves of the
// needle's key (format.go); off is the record offset in 8-byte units (0
// never holds a record: the superblock is there, so off == 0 marks a
// deleted slot); size is the needle's data length.
type slot struct {
	seq    uint32
	cookie uint32
	off    uint32
	size   uint32
}

func (s slot) key() uint64 { return joinKey(s.seq, s.cookie) }

// newSlot is the slot of needle key's record at byte offset off.
func newSlot(key uint64, off int64, size uint32) slot {
	seq, cookie := splitKey(key)
	return slot{seq: seq, cookie: cookie, off: uint32(off / 8), size: size}
}

// index maps needle sequence numbers to records. Sequence numbers
// assigned by Append grow monotonically, so nearly every insert is an
// append to a sorted slice and a lookup is a binary search: 16 bytes per
// needle, no per-entry pointers for the garbage collector to scan. Those
// that arrive out of order (a caller-chosen key below the largest seen) go
// to a small map.
type index struct {
	sorted []slot
	extra  map[uint32]slot
	live   int
}

func (x *index) find(seq uint32) (int, bool) {
	return slices.BinarySearchFunc(x.sorted, seq, func(s slot, k uint32) int {
		switch {
		case s.seq < k:
			return -1
		case s.seq > k:
			return 1
		}
		return 0
	})
}

// lookup returns the record of sequence number seq, whatever its cookie.
func (x *index) lookup(seq uint32) (slot, bool) {
	if n := len(x.sorted); n > 0 && seq <= x.sorted[n-1].seq {
		if i, ok := x.find(seq); ok {
			s := x.sorted[i]
			return s, s.off != 0
		}
	}
	s, ok := x.extra[seq]
	return s, ok
}

// get returns the record of needle key: its sequence number must be held
// and its cookie must match. A wrong cookie is not found, exactly like a
// missing needle, so a caller learns nothing from guessing.
func (x *index) get(key uint64) (slot, bool) {
	seq, cookie := splitKey(key)
	s, ok := x.lookup(seq)
	if !ok || s.cookie != cookie {
		return slot{}, false
	}
	return s, true
}

// put sets key's record and returns the one it replaces, if any.
func (x *index) put(s slot) (old slot, replaced bool) {
	n := len(x.sorted)
	if n == 0 || s.seq > x.sorted[n-1].seq {
		if old, replaced = x.extra[s.seq]; replaced {
			delete(x.extra, s.seq)
		} else {
			x.live++
		}
		x.sorted = append(x.sorted, s)
		return old, replaced
	}
	if i, ok := x.find(s.seq); ok {
		old = x.sorted[i]
		x.sorted[i] = s
		if old.off == 0 {
			x.live++
			return old, false
		}
		return old, true
	}
	if x.extra == nil {
		x.extra = map[uint32]slot{}
	}
	old, replaced = x.extra[s.seq]
	if !replaced {
		x.live++
	}
	x.extra[s.seq] = s
	return old, replaced
}

// del removes needle key (its cookie must match) and returns its record,
// if it had one.
func (x *index) del(key uint64) (slot, bool) {
	seq, cookie := splitKey(key)
	if n := len(x.sorted); n > 0 && seq <= x.sorted[n-1].seq {
		if i, ok := x.find(seq); ok && x.sorted[i].off != 0 && x.sorted[i].cookie == cookie {
			old := x.sorted[i]
			x.sorted[i].off = 0
			x.live--
			return old, true
		}
	}
	if old, ok := x.extra[seq]; ok && old.cookie == cookie {
		delete(x.extra, seq)
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
