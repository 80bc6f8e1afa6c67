package ec

import (
	"encoding/binary"
	"hash/crc32"
	"io"

	"cairn/errors"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	shardMagic = "CAIRNEC1"
	headerSize = 32
)

// Header is what a shard file says of itself.
type Header struct {
	Volume uint32
	Layout Layout
	Index  int // 0..K-1 data, K..K+M-1 parity
}

func (h Header) marshal() []byte {
	b := make([]byte, headerSize)
	copy(b, shardMagic)
	binary.LittleEndian.PutUint32(b[8:], h.Volume)
	b[12], b[13], b[14] = byte(h.Layout.K), byte(h.Layout.M), byte(h.Index)
	binary.LittleEndian.PutUint32(b[16:], uint32(h.Layout.Cell))
	binary.LittleEndian.PutUint64(b[20:], uint64(h.Layout.Size))
	binary.LittleEndian.PutUint32(b[28:], crc32.Checksum(b[:28], castagnoli))
	return b
}

// ParseHeader reads a shard file's header; every field is checked, since
// a header names the layout every later offset is computed from.
func ParseHeader(b []byte) (Header, error) {
	const op = errors.Op("ec.ParseHeader")
	if len(b) < headerSize {
		return Header{}, errors.Errorf(op, errors.Corrupt, "shard header: %d bytes, want %d", len(b), headerSize)
	}
	if string(b[:8]) != shardMagic {
		return Header{}, errors.E(op, errors.Corrupt, "not a shard file (bad magic)")
	}
	if got, want := crc32.Checksum(b[:28], castagnoli), binary.LittleEndian.Uint32(b[28:]); got != want {
		return Header{}, errors.E(op, errors.Corrupt, "shard header checksum mismatch")
	}
	if b[15] != 0 {
		return Header{}, errors.E(op, errors.Corrupt, "shard header: reserved byte set")
	}
	size := binary.LittleEndian.Uint64(b[20:])
	h := Header{
		Volume: binary.LittleEndian.Uint32(b[8:]),
		Layout: Layout{K: int(b[12]), M: int(b[13]), Cell: int64(binary.LittleEndian.Uint32(b[16:])), Size: int64(size)},
		Index:  int(b[14]),
	}
	if size > 1<<62 {
		return Header{}, errors.Errorf(op, errors.Corrupt, "shard header: size %d", size)
	}
	if err := h.Layout.Validate(); err != nil {
		return Header{}, errors.E(op, errors.Corrupt, err)
	}
	if h.Index >= h.Layout.K+h.Layout.M {
		return Header{}, errors.Errorf(op, errors.Corrupt, "shard index %d of a %d+%d code", h.Index, h.Layout.K, h.Layout.M)
	}
	return h, nil
}

// footerSize is the length of a shard's cell checksums and their own CRC.
func (l Layout) footerSize() int64 { return 4*l.Rows() + 4 }

// FileSize is the length of every shard file of the layout.
func (l Layout) FileSize() int64 { return headerSize + l.ShardSize() + l.footerSize() }

// Shard is one open shard file: its header, and its cells as a ReaderAt
// in shard offsets (the header skipped).
type Shard struct {
	Header
	f io.ReaderAt
}

// OpenShard reads and checks the header of a shard file of size bytes.
func OpenShard(f io.ReaderAt, size int64) (*Shard, error) {
	b := make([]byte, headerSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, errors.E(errors.Op("ec.OpenShard"), errors.IO, err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if want := h.Layout.FileSize(); size != want {
		return nil, errors.Errorf("ec.OpenShard", errors.Corrupt, "shard %d is %d bytes, its layout needs %d", h.Index, size, want)
	}
	return &Shard{Header: h, f: f}, nil
}

// ReadAt reads cell bytes at a shard offset.
func (s *Shard) ReadAt(p []byte, off int64) (int, error) {
	at, err := s.FileOffset(off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	return s.f.ReadAt(p, at)
}

// A Lender lends n bytes at offset off of what it holds in place (a
// mapped file), for a reader to use without a copy until it calls done;
// ok false: read them instead. The bytes must not be written to.
type Lender interface {
	Lend(off, n int64) (b []byte, done func(), ok bool)
}

// Lend lends n cell bytes at shard offset off when the shard file is a
// Lender (see there).
func (s *Shard) Lend(off, n int64) ([]byte, func(), bool) {
	l, ok := s.f.(Lender)
	if !ok {
		return nil, nil, false
	}
	at, err := s.FileOffset(off, n)
	if err != nil {
		return nil, nil, false
	}
	return l.Lend(at, n)
}

// FileOffset is where n cell bytes at shard offset off lie in the shard
// file, for a caller that copies them file to socket itself.
func (s *Shard) FileOffset(off, n int64) (int64, error) {
	if off < 0 || n < 0 || off+n > s.Layout.ShardSize() {
		return 0, errors.Errorf("ec.Shard.ReadAt", errors.Range, "shard range %d+%d past %d", off, n, s.Layout.ShardSize())
	}
	return headerSize + off, nil
}

// Scrub reads every cell and checks it against the footer. It returns the
// rows whose cell is damaged (empty when the shard is whole); a footer
// that does not verify is an error, since then no cell can be judged.
func (s *Shard) Scrub() (bad []int64, err error) {
	const op = errors.Op("ec.Shard.Scrub")
	l := s.Layout
	foot := make([]byte, l.footerSize())
	if _, err := s.f.ReadAt(foot, headerSize+l.ShardSize()); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	n := len(foot) - 4
	if crc32.Checksum(foot[:n], castagnoli) != binary.LittleEndian.Uint32(foot[n:]) {
		return nil, errors.E(op, errors.Corrupt, "shard footer checksum mismatch")
	}
	cell := make([]byte, l.Cell)
	for r := int64(0); r < l.Rows(); r++ {
		if _, err := s.ReadAt(cell, r*l.Cell); err != nil {
			return nil, errors.E(op, errors.IO, err)
		}
		if crc32.Checksum(cell, castagnoli) != binary.LittleEndian.Uint32(foot[4*r:]) {
			bad = append(bad, r)
		}
	}
	return bad, nil
}
