package ec

import (
	"cairn/errors"
)

// DefaultCell is the cell size: large enough that most needles lie in
// one cell (one request to one shard: a needle of size s crosses a cell
// boundary about s/Cell of the time unless the encoder moves it), small
// enough that the encoder holds only K+M cells at a time. The last row's
// padding (up to K cells per volume) is small next to 8 GiB volumes.
const DefaultCell = 4 << 20

// MaxShards bounds K+M: the code's Galois field has 256 elements, and
// placement needs a server per shard anyway.
const MaxShards = 64

// Layout says where the bytes of an encoded volume file lie.
type Layout struct {
	K, M int   // data and parity shards
	Cell int64 // bytes per cell
	Size int64 // length of the encoded file
}

// Validate reports a layout that cannot be encoded or read.
func (l Layout) Validate() error {
	const op = errors.Op("ec.Layout")
	switch {
	case l.K < 1 || l.M < 1 || l.K+l.M > MaxShards:
		return errors.Errorf(op, errors.Invalid, "code %d+%d: need K >= 1, M >= 1, K+M <= %d", l.K, l.M, MaxShards)
	case l.Cell < 64 || l.Cell > 1<<30 || l.Cell%64 != 0:
		return errors.Errorf(op, errors.Invalid, "cell size %d: a multiple of 64 from 64 to 1 GiB", l.Cell)
	case l.Size < 0:
		return errors.Errorf(op, errors.Invalid, "size %d", l.Size)
	}
	return nil
}

// Rows is the number of rows of K cells; the last may be partly padding.
func (l Layout) Rows() int64 {
	row := l.Cell * int64(l.K)
	return (l.Size + row - 1) / row
}

// ShardSize is the number of cell bytes in every shard.
func (l Layout) ShardSize() int64 { return l.Rows() * l.Cell }

// Overhead is bytes stored per byte of data: (K+M)/K.
func (l Layout) Overhead() float64 { return float64(l.K+l.M) / float64(l.K) }

// Piece is a run of the encoded file that lies contiguously in one data
// shard: n bytes at shard offset Off hold the file's bytes from At.
type Piece struct {
	Shard int
	Off   int64 // offset in the shard's cells
	N     int64
	At    int64 // offset in the encoded file
}

// Pieces maps the file range [off, off+n) to the data shards, in file
// order. It does not check the range against Size.
func (l Layout) Pieces(off, n int64) []Piece {
	var ps []Piece
	for n > 0 {
		c := off / l.Cell
		in := off % l.Cell
		take := min(n, l.Cell-in)
		ps = append(ps, Piece{Shard: int(c % int64(l.K)), Off: (c/int64(l.K))*l.Cell + in, N: take, At: off})
		off += take
		n -= take
	}
	return ps
}
