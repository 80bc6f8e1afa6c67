package ec

import (
	"io"
	"sort"

	"cairn/errors"
)

// Segment says that N bytes of a source, from Src, appear at At in a
// packed file.
type Segment struct{ At, Src, N int64 }

// Packed is a file made of segments of another (what compaction encodes:
// the live needles of an encoded volume, read through a Reader of its
// shards, laid end to end). Bytes no segment covers read as zeros.
type Packed struct {
	src  io.ReaderAt
	segs []Segment // by At, not overlapping
	size int64
}

// NewPacked is the packed file of size bytes made of segs (in At order,
// not overlapping, within size) of src.
func NewPacked(src io.ReaderAt, segs []Segment, size int64) (*Packed, error) {
	var end int64
	for _, s := range segs {
		if s.At < end || s.N < 0 || s.Src < 0 || s.At+s.N > size {
			return nil, errors.Errorf("ec.NewPacked", errors.Invalid, "segment %+v out of order or past %d", s, size)
		}
		end = s.At + s.N
	}
	return &Packed{src: src, segs: segs, size: size}, nil
}

// ReadAt reads the packed file; one read of the source per segment (or
// part of one) the range covers.
func (p *Packed) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.Errorf("ec.Packed.ReadAt", errors.Range, "offset %d", off)
	}
	var eof error
	if off+int64(len(b)) > p.size {
		b = b[:max(0, p.size-off)]
		eof = io.EOF
	}
	i := sort.Search(len(p.segs), func(i int) bool { return p.segs[i].At+p.segs[i].N > off })
	pos := off
	end := off + int64(len(b))
	for pos < end {
		if i >= len(p.segs) || p.segs[i].At >= end {
			clear(b[pos-off:])
			break
		}
		s := p.segs[i]
		if s.At > pos {
			clear(b[pos-off : s.At-off])
			pos = s.At
		}
		hi := min(end, s.At+s.N)
		if _, err := p.src.ReadAt(b[pos-off:hi-off], s.Src+(pos-s.At)); err != nil {
			return int(pos - off), err
		}
		pos = hi
		i++
	}
	return len(b), eof
}
