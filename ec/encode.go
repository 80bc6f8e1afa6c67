package ec

import (
	"encoding/binary"
	"hash/crc32"
	"io"

	"cairn/errors"
)

// Encode reads the l.Size bytes of a sealed volume file from src and
// writes its K+M shard files to dst (dst[i] is shard i), in one pass that
// holds K+M cells in memory. The caller syncs and renames the files: a
// shard is complete only once all of it is durable.
func Encode(src io.ReaderAt, vol uint32, l Layout, dst []io.Writer) error {
	const op = errors.Op("ec.Encode")
	if err := l.Validate(); err != nil {
		return err
	}
	if len(dst) != l.K+l.M {
		return errors.Errorf(op, errors.Invalid, "%d writers for a %d+%d code", len(dst), l.K, l.M)
	}
	enc, err := encoder(l.K, l.M, false)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	n := l.K + l.M
	cells := make([][]byte, n)
	buf := make([]byte, int64(n)*l.Cell)
	for i := range cells {
		cells[i] = buf[int64(i)*l.Cell : int64(i+1)*l.Cell]
	}
	for i, w := range dst {
		if _, err := w.Write(Header{Volume: vol, Layout: l, Index: i}.marshal()); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	foot := make([][]byte, n)
	for r := int64(0); r < l.Rows(); r++ {
		for i := 0; i < l.K; i++ {
			if err := readCell(src, cells[i], (r*int64(l.K)+int64(i))*l.Cell, l.Size); err != nil {
				return errors.E(op, errors.IO, err)
			}
		}
		if err := enc.Encode(cells); err != nil {
			return errors.E(op, errors.IO, err)
		}
		for i, w := range dst {
			if _, err := w.Write(cells[i]); err != nil {
				return errors.E(op, errors.IO, err)
			}
			foot[i] = binary.LittleEndian.AppendUint32(foot[i], crc32.Checksum(cells[i], castagnoli))
		}
	}
	for i, w := range dst {
		f := binary.LittleEndian.AppendUint32(foot[i], crc32.Checksum(foot[i], castagnoli))
		if _, err := w.Write(f); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	return nil
}

// readCell fills cell with the file's bytes from off, zeros past size.
func readCell(src io.ReaderAt, cell []byte, off, size int64) error {
	n := max(0, min(int64(len(cell)), size-off))
	clear(cell[n:])
	if n == 0 {
		return nil
	}
	got, err := src.ReadAt(cell[:n], off)
	if int64(got) == n {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
