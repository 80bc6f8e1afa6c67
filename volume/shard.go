package volume

import (
	"fmt"
	"io"

	"cairn/errors"
)

// What erasure coding needs of a sealed volume (chunk/ec.go): where every
// live needle lies in the file being encoded, so that the shards' servers
// can find a needle in the encoded bytes without the volume.

// NeedleLoc is one live needle and where its data lies.
type NeedleLoc struct {
	Key  uint64
	Data int64 // offset of the first data byte in the .dat
	Size int64 // data bytes
}

// Locations returns every live needle of the current file, in key order,
// and the file's instance: the locations hold for that instance only.
func (v *Volume) Locations() (instance uint64, locs []NeedleLoc) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.df != nil {
		instance = v.df.instance
	}
	locs = make([]NeedleLoc, 0, v.idx.live)
	add := func(s slot) {
		if s.off != 0 {
			locs = append(locs, NeedleLoc{Key: s.key(), Data: int64(s.off)*8 + headerSize, Size: int64(s.size)})
		}
	}
	for _, s := range v.idx.sorted {
		add(s)
	}
	for _, s := range v.idx.extra {
		add(s)
	}
	sortLocs(locs)
	return instance, locs
}

func sortLocs(l []NeedleLoc) {
	// keys of sorted are ordered; extra's are few: insertion sort is enough
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Key < l[j-1].Key; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}

// WriteRecord writes bytes [off, off+length) of needle key to w from rec,
// the needle's record as read whole into memory (its size data bytes,
// then 4 bytes of checksum per block): every block the range touches is
// verified in place before any byte is written, so a reader that fetched
// the record in one piece (an erasure-coded volume's needle from a peer,
// or rebuilt) spends no second copy on it. A mismatch is errors.Corrupt
// with nothing written.
func WriteRecord(rec []byte, key uint64, size, off, length int64, w io.Writer) (int64, error) {
	const op errors.Op = "volume.WriteRecord"
	if size < 0 || off < 0 || length < 0 || off > size || length > size-off {
		return 0, errors.E(op, errors.Range, fmt.Sprintf("range [%d, +%d) of a %d-byte needle", off, length, size))
	}
	if int64(len(rec)) < size+4*nblocks(size) {
		return 0, errors.E(op, errors.Invalid, fmt.Sprintf("record of %d bytes for a %d-byte needle", len(rec), size))
	}
	if length == 0 {
		return 0, nil
	}
	sums := rec[size:]
	for b := off / BlockSize; b <= (off+length-1)/BlockSize; b++ {
		blk := rec[b*BlockSize : min((b+1)*BlockSize, size)]
		if err := checkBlock(key, b, blk, sums[4*b:], 0); err != nil {
			return 0, errors.E(op, err)
		}
	}
	n, err := w.Write(rec[off : off+length])
	if err != nil {
		return int64(n), errors.E(op, errors.IO, err)
	}
	return int64(n), nil
}

// SuperSize is the length of a volume file's superblock: the first
// record of a file lies at or after it.
const SuperSize = superSize

// RecordSpan is where the record of a needle whose size data bytes start
// at data lies in its file: header, data, checksums and padding. Records
// are self-contained: copied elsewhere whole (compaction of an encoded
// volume packs them), they read the same at their new place.
func RecordSpan(data, size int64) (start, end int64) {
	start = data - headerSize
	return start, start + recordSize(size)
}
