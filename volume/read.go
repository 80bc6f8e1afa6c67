package volume

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"cairn/errors"
)

// A read moves at most window blocks per pread, so a 64 MiB needle is
// streamed through a 1 MiB buffer rather than held whole.
const window = 16

// Read buffers come in two sizes: one block (most needles are small) and a
// window. Both leave room for the checksum array of the largest needle
// (1 GiB / 64 KiB * 4 bytes = 64 KiB), so a read that reaches the needle's
// last block fetches data and checksums with one pread.
const sumsRoom = 4 * (hardMaxNeedle / BlockSize)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, BlockSize+sumsRoom); return &b }}
	largeBufs = sync.Pool{New: func() any { b := make([]byte, window*BlockSize+sumsRoom); return &b }}
)

// ReadTo writes bytes [off, off+length) of needle key to w. It reads only
// the blocks that range touches, with their checksums, and verifies each
// block before any of its bytes reach w: a mismatch is errors.Corrupt
// (and counted in Stats), never wrong bytes. A range past the needle's end
// is errors.Range, a missing needle errors.NotExist.
func (v *Volume) ReadTo(key uint64, off, length int64, w io.Writer) (int64, error) {
	const op errors.Op = "volume.ReadTo"
	v.mu.RLock()
	s, ok := v.idx.get(key)
	df := v.df
	if df != nil {
		df.ref()
	}
	v.mu.RUnlock()
	if df == nil {
		return 0, errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	defer df.unref()
	if !ok {
		return 0, errors.E(op, errors.NotExist, v.keyPath(key))
	}
	n := int64(s.size)
	if off < 0 || length < 0 || off > n || length > n-off {
		return 0, errors.E(op, errors.Range, v.keyPath(key), fmt.Sprintf("range [%d, +%d) of a %d-byte needle", off, length, n))
	}
	if length == 0 {
		return 0, nil
	}
	n, err := readNeedle(df.f, key, int64(s.off)*8+headerSize, int64(s.size), off, length, w)
	if errors.Is(errors.Corrupt, err) {
		v.corrupt.Add(1)
	}
	if err != nil {
		return n, errors.E(op, v.keyPath(key), err)
	}
	return n, nil
}

// readNeedle writes bytes [off, off+length) of needle key, whose n data
// bytes start at dataStart in f, to w: the blocks the range touches are
// read with their checksums and verified before any byte reaches w. The
// range must lie inside the needle and be non-empty.
func readNeedle(f io.ReaderAt, key uint64, dataStart, n, off, length int64, w io.Writer) (int64, error) {
	sumsStart := dataStart + n
	last := (n - 1) / BlockSize // last block of the needle
	b0, b1 := off/BlockSize, (off+length-1)/BlockSize

	pool := &largeBufs
	if b1 == b0 {
		pool = &smallBufs
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp

	var written int64
	for wb0 := b0; wb0 <= b1; wb0 += window {
		wb1 := min(wb0+window-1, b1)
		dlo, dhi := wb0*BlockSize, min((wb1+1)*BlockSize, n)
		data := buf[:dhi-dlo]
		var sums []byte
		if wb1 == last {
			// Data runs up to the checksum array: one pread for both.
			span := buf[:sumsStart+4*(wb1+1)-(dataStart+dlo)]
			if _, err := f.ReadAt(span, dataStart+dlo); err != nil {
				return written, errors.E(errors.IO, err)
			}
			sums = span[n-dlo+4*wb0:]
		} else {
			sums = buf[len(data) : len(data)+int(4*(wb1-wb0+1))]
			if _, err := f.ReadAt(data, dataStart+dlo); err != nil {
				return written, errors.E(errors.IO, err)
			}
			if _, err := f.ReadAt(sums, sumsStart+4*wb0); err != nil {
				return written, errors.E(errors.IO, err)
			}
		}
		for b := wb0; b <= wb1; b++ {
			blk := data[(b-wb0)*BlockSize : min((b-wb0+1)*BlockSize, int64(len(data)))]
			if err := checkBlock(key, b, blk, sums[4*(b-wb0):], dataStart); err != nil {
				return written, err
			}
		}
		lo, hi := max(off, dlo)-dlo, min(off+length, dhi)-dlo
		m, err := w.Write(data[lo:hi])
		written += int64(m)
		if err != nil {
			return written, errors.E(errors.IO, err)
		}
	}
	return written, nil
}

// checkBlock verifies block b of needle key (whose data starts at
// dataStart) against the first 4 bytes of sums, its stored checksum.
func checkBlock(key uint64, b int64, blk, sums []byte, dataStart int64) error {
	want := binary.LittleEndian.Uint32(sums)
	if got := blockSum(crc32.Checksum(blk, castagnoli), key, uint32(b)); got != want {
		return errors.E(errors.Corrupt,
			fmt.Sprintf("block %d at offset %d: checksum %#x, want %#x", b, dataStart+b*BlockSize, got, want))
	}
	return nil
}
