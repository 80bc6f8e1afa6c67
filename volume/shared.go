package volume

import (
	"fmt"
	"io"
	"os"

	"cairn/errors"
)

// Reading a volume's file from another process on the same host (the data
// server hands the mount or a gateway its open .dat file; chunk/local.go):
// the reader is told where a needle lies and reads and verifies it itself,
// which saves the copies and the loopback hop of an HTTP read.
//
// This is safe because a .dat file is append-only for its whole life: a
// record, once published, is never rewritten in place. Compaction writes a
// new file (a new instance) and renames it over the old one, so a reader
// still holding the old file reads the same bytes it was told about; a
// location names the instance it belongs to, so it is never applied to
// another file.

// Location is where a needle's data lies in one instance of a volume's
// .dat file.
type Location struct {
	Instance uint64 // the file's instance (superblock)
	Data     int64  // offset of the needle's first data byte
	Size     int64  // data bytes
}

// Locate returns where needle key lies in the volume's current file.
func (v *Volume) Locate(key uint64) (Location, error) {
	const op errors.Op = "volume.Locate"
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.df == nil {
		return Location{}, errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	s, ok := v.idx.get(key)
	if !ok {
		return Location{}, errors.E(op, errors.NotExist, v.keyPath(key))
	}
	return Location{Instance: v.df.instance, Data: int64(s.off)*8 + headerSize, Size: int64(s.size)}, nil
}

// Share returns the volume's current .dat file and its instance, held open
// until release is called: long enough to hand its descriptor to another
// process, which then keeps the file (even past a compaction) until it
// closes its copy.
func (v *Volume) Share() (f *os.File, instance uint64, release func(), err error) {
	v.mu.RLock()
	df := v.df
	if df != nil {
		df.ref()
	}
	v.mu.RUnlock()
	if df == nil {
		return nil, 0, nil, errors.E(errors.Op("volume.Share"), errors.IO, v.path(), "volume is closed")
	}
	f = df.f.OS()
	if f == nil { // a file system of tests, with no descriptor to hand out
		df.unref()
		return nil, 0, nil, errors.E(errors.Op("volume.Share"), errors.Unavailable, v.path(), "the volume's file system has no descriptors to share")
	}
	return f, df.instance, df.unref, nil
}

// CheckShared verifies that f is the .dat file of volume id, instance
// instance: a descriptor received from another process is trusted only
// after its superblock says so.
func CheckShared(f io.ReaderAt, id uint32, instance uint64) error {
	const op errors.Op = "volume.CheckShared"
	b := make([]byte, superSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return errors.E(op, errors.IO, err)
	}
	sb, err := parseSuperblock(b)
	if err != nil {
		return errors.E(op, errors.Corrupt, err)
	}
	if sb.id != id || sb.instance != instance {
		return errors.E(op, errors.Stale, fmt.Sprintf("file is volume %d instance %#x, want volume %d instance %#x", sb.id, sb.instance, id, instance))
	}
	return nil
}

// ReadLocated is ReadTo on a file shared by another process: bytes
// [off, off+length) of needle key at loc in f, verified block by block
// before they reach w. f must be loc's instance (CheckShared).
func ReadLocated(f io.ReaderAt, key uint64, loc Location, off, length int64, w io.Writer) (int64, error) {
	const op errors.Op = "volume.ReadLocated"
	if err := loc.Validate(); err != nil {
		return 0, errors.E(op, err)
	}
	n := loc.Size
	if off < 0 || length < 0 || off > n || length > n-off {
		return 0, errors.E(op, errors.Range, fmt.Sprintf("range [%d, +%d) of a %d-byte needle", off, length, n))
	}
	if length == 0 {
		return 0, nil
	}
	m, err := readNeedle(f, key, loc.Data, n, off, length, w)
	if err != nil {
		return m, errors.E(op, err)
	}
	return m, nil
}

// Validate checks that a location received from outside could describe a
// record: past the superblock, 8-byte aligned as records are, within the
// addressable volume and the needle size limit.
func (l Location) Validate() error {
	rec := l.Data - headerSize
	if rec < superSize || rec%8 != 0 || rec >= maxAddressable || l.Size < 0 || l.Size > hardMaxNeedle {
		return errors.E(errors.Invalid, fmt.Sprintf("impossible needle location: data at %d, %d bytes", l.Data, l.Size))
	}
	return nil
}

// ReadLocatedAt is ReadLocated into p: bytes [off, off+len(p)) of needle
// key at loc in f. Whole checksum blocks the range covers are read
// straight into p and verified there; only a block the range cuts is read
// aside first. On an error p holds no unverified byte that is reported
// as read: n counts the verified bytes at its start.
func ReadLocatedAt(f io.ReaderAt, key uint64, loc Location, p []byte, off int64) (n int, err error) {
	const op errors.Op = "volume.ReadLocatedAt"
	if err := loc.Validate(); err != nil {
		return 0, errors.E(op, err)
	}
	size, length := loc.Size, int64(len(p))
	if off < 0 || off > size || length > size-off {
		return 0, errors.E(op, errors.Range, fmt.Sprintf("range [%d, +%d) of a %d-byte needle", off, length, size))
	}
	if length == 0 {
		return 0, nil
	}
	end := off + length
	b0, b1 := off/BlockSize, (end-1)/BlockSize
	sums := make([]byte, 4*(b1-b0+1))
	if _, err := f.ReadAt(sums, loc.Data+size+4*b0); err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	check := func(b int64, blk []byte) error {
		if err := checkBlock(key, b, blk, sums[4*(b-b0):], loc.Data); err != nil {
			return errors.E(op, err)
		}
		return nil
	}
	// whole says block b lies inside the range (the needle's short last
	// block counts when the range reaches the needle's end).
	whole := func(b int64) bool { return b*BlockSize >= off && min((b+1)*BlockSize, size) <= end }
	for b := b0; b <= b1; {
		lo, hi := b*BlockSize, min((b+1)*BlockSize, size)
		if !whole(b) {
			bp := smallBufs.Get().(*[]byte)
			blk := (*bp)[:hi-lo]
			_, err := f.ReadAt(blk, loc.Data+lo)
			if err != nil {
				err = errors.E(op, errors.IO, err)
			} else if err = check(b, blk); err == nil {
				copy(p[max(lo, off)-off:], blk[max(lo, off)-lo:min(hi, end)-lo])
			}
			smallBufs.Put(bp)
			if err != nil {
				return n, err
			}
			n = int(min(hi, end) - off)
			b++
			continue
		}
		// A run of whole blocks: one pread into p, then verify each.
		e := b
		for e+1 <= b1 && whole(e+1) {
			e++
		}
		rlo, rhi := lo, min((e+1)*BlockSize, size)
		if _, err := f.ReadAt(p[rlo-off:rhi-off], loc.Data+rlo); err != nil {
			return n, errors.E(op, errors.IO, err)
		}
		for ; b <= e; b++ {
			if err := check(b, p[b*BlockSize-off:min((b+1)*BlockSize, size)-off]); err != nil {
				clear(p[n:])
				return n, err
			}
			n = int(min((b+1)*BlockSize, size) - off)
		}
	}
	return n, nil
}
