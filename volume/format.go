package volume

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Sizes and constants of the on-disk format; doc.go describes the layout.
const (
	// BlockSize is the unit of checksumming inside a needle: a read
	// verifies only the blocks its range touches.
	BlockSize = 64 << 10

	superSize    = 64 // superblock at the start of the .dat file
	headerSize   = 24 // record header
	idxHdrSize   = 16 // .idx header: magic + instance
	idxEntrySize = 16 // .idx entry: key, offset/8, size

	recMagic   uint32 = 0x4c44454e // "NEDL" little-endian
	flagData   byte   = 1
	flagTomb   byte   = 2
	idxTombLen uint32 = 0xFFFFFFFF // size field of a tombstone .idx entry

	// maxAddressable is the largest volume the index can address:
	// offsets are kept in 8-byte units in a uint32.
	maxAddressable = int64(1) << 35
	// hardMaxNeedle bounds a needle's length whatever the options say, so
	// a damaged length can never make a reader allocate gigabytes.
	hardMaxNeedle = int64(1) << 30
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	superMagic = [8]byte{'C', 'A', 'I', 'R', 'N', 'V', 'O', 'L'}
	idxMagic   = [8]byte{'C', 'A', 'I', 'R', 'N', 'I', 'D', 'X'}
)

func align8(n int64) int64 { return (n + 7) &^ 7 }

// A needle's key, as the world sees it, is its id: a random cookie in the
// high 32 bits and the volume's sequence number in the low 32 (Haystack's
// cookie). The sequence number alone finds the record; the cookie must
// match for a read, so knowing a volume's sequence (small integers) names
// no needle. Needles of format version 1 have cookie 0: their keys were
// the sequence numbers, so every key meta recorded for them still reads.

// splitKey returns the sequence number and cookie of a needle key.
func splitKey(key uint64) (seq, cookie uint32) { return uint32(key), uint32(key >> 32) }

// joinKey is the key of sequence number seq with cookie.
func joinKey(seq, cookie uint32) uint64 { return uint64(cookie)<<32 | uint64(seq) }

// newCookie returns a random cookie, never 0 (0 marks a needle written
// before cookies, which a key without a cookie may read).
func newCookie() uint32 {
	for {
		var b [4]byte
		rand.Read(b[:])
		if c := binary.LittleEndian.Uint32(b[:]); c != 0 {
			return c
		}
	}
}

// nblocks is the number of checksum blocks of a needle of n bytes.
func nblocks(n int64) int64 { return (n + BlockSize - 1) / BlockSize }

// recordSize is the on-disk size of a record holding n bytes of data.
func recordSize(n int64) int64 { return align8(headerSize + n + 4*nblocks(n)) }

// blockSum is the stored checksum of block i of needle key, given the plain
// CRC32C of the block's bytes. Key and index are folded in after the data
// (crc32.Update continues a CRC), so the data CRC can be computed before the
// key is known, and a block of another needle, or another block of the same
// needle, never verifies in this place.
func blockSum(dataCRC uint32, key uint64, i uint32) uint32 {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[0:], key)
	binary.LittleEndian.PutUint32(b[8:], i)
	return crc32.Update(dataCRC, castagnoli, b[:])
}

// header is a decoded record header.
type header struct {
	flags byte
	key   uint64
	size  uint32 // data bytes
}

func (h header) recordSize() int64 { return recordSize(int64(h.size)) }

func putHeader(b []byte, h header) {
	_ = b[headerSize-1]
	binary.LittleEndian.PutUint32(b[0:], recMagic)
	b[4], b[5], b[6], b[7] = h.flags, 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.key)
	binary.LittleEndian.PutUint32(b[16:], h.size)
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
}

// parseHeader decodes and checks a record header. It does not look at the
// data; verifyRecord does.
func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("short header: %d bytes", len(b))
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != recMagic {
		return header{}, fmt.Errorf("bad record magic %#x", m)
	}
	if got, want := crc32.Checksum(b[:20], castagnoli), binary.LittleEndian.Uint32(b[20:]); got != want {
		return header{}, fmt.Errorf("header checksum %#x, want %#x", got, want)
	}
	h := header{flags: b[4], key: binary.LittleEndian.Uint64(b[8:]), size: binary.LittleEndian.Uint32(b[16:])}
	if b[5]|b[6]|b[7] != 0 {
		return header{}, fmt.Errorf("reserved header bytes set")
	}
	switch {
	case h.flags != flagData && h.flags != flagTomb:
		return header{}, fmt.Errorf("bad record flags %#x", h.flags)
	case h.flags == flagTomb && h.size != 0:
		return header{}, fmt.Errorf("tombstone with %d data bytes", h.size)
	case int64(h.size) > hardMaxNeedle:
		return header{}, fmt.Errorf("record length %d over limit", h.size)
	case uint32(h.key) == 0:
		return header{}, fmt.Errorf("record of key %#x has sequence number 0", h.key)
	}
	return h, nil
}

// encodeRecord writes a whole record for data into b, which must be
// recordSize(len(data)) bytes. Used by compaction tests and the fuzzer; the
// write path fills the same layout without the extra copy of large data.
func encodeRecord(b []byte, flags byte, key uint64, data []byte) {
	n := int64(len(data))
	putHeader(b, header{flags: flags, key: key, size: uint32(n)})
	copy(b[headerSize:], data)
	putBlockSums(b[headerSize+n:], key, data)
	clear(b[headerSize+n+4*nblocks(n):])
}

// putBlockSums writes the checksum array of data (keyed to key) into b.
func putBlockSums(b []byte, key uint64, data []byte) {
	for i := int64(0); i < nblocks(int64(len(data))); i++ {
		blk := data[i*BlockSize : min((i+1)*BlockSize, int64(len(data)))]
		binary.LittleEndian.PutUint32(b[4*i:], blockSum(crc32.Checksum(blk, castagnoli), key, uint32(i)))
	}
}

// verifyRecord checks every byte of a complete record: header checksum,
// every block checksum, and zero padding. It returns the header and the
// data (aliasing rec).
func verifyRecord(rec []byte) (header, []byte, error) {
	h, err := parseHeader(rec)
	if err != nil {
		return h, nil, err
	}
	rs := h.recordSize()
	if int64(len(rec)) != rs {
		return h, nil, fmt.Errorf("record is %d bytes, header says %d", len(rec), rs)
	}
	n := int64(h.size)
	data := rec[headerSize : headerSize+n]
	sums := rec[headerSize+n : headerSize+n+4*nblocks(n)]
	for i := int64(0); i < nblocks(n); i++ {
		blk := data[i*BlockSize : min((i+1)*BlockSize, n)]
		want := binary.LittleEndian.Uint32(sums[4*i:])
		if got := blockSum(crc32.Checksum(blk, castagnoli), h.key, uint32(i)); got != want {
			return h, nil, fmt.Errorf("block %d checksum %#x, want %#x", i, got, want)
		}
	}
	for _, c := range rec[headerSize+n+4*nblocks(n):] {
		if c != 0 {
			return h, nil, fmt.Errorf("nonzero padding")
		}
	}
	return h, data, nil
}

// superblock is the first 64 bytes of a .dat file.
type superblock struct {
	version  uint32 // superV1 or superVersion
	id       uint32
	gen      uint64
	keyFloor uint64 // next key is at least this (keeps keys unique across compaction)
	instance uint64 // random per file; an .idx belongs to the .dat with the same instance
	created  int64
	readOnly bool
}

// Format versions. Version 2 gives every new needle a cookie in its key's
// high 32 bits (keys of version 1 were sequence numbers, cookie 0); the
// record layout is the same. A version 1 volume is read as it is and
// marked version 2 before its first needle with a cookie is written, so a
// binary that knows only version 1 refuses the file rather than take the
// cookies for sequence numbers.
const (
	superV1      = 1
	superVersion = 2
)

func (s superblock) encode() []byte {
	b := make([]byte, superSize)
	copy(b, superMagic[:])
	binary.LittleEndian.PutUint32(b[8:], s.version)
	binary.LittleEndian.PutUint32(b[12:], s.id)
	binary.LittleEndian.PutUint64(b[16:], s.gen)
	binary.LittleEndian.PutUint64(b[24:], s.keyFloor)
	binary.LittleEndian.PutUint64(b[32:], s.instance)
	binary.LittleEndian.PutUint64(b[40:], uint64(s.created))
	if s.readOnly {
		b[48] = 1
	}
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

func parseSuperblock(b []byte) (superblock, error) {
	if len(b) < superSize {
		return superblock{}, fmt.Errorf("short superblock: %d bytes", len(b))
	}
	if [8]byte(b[:8]) != superMagic {
		return superblock{}, fmt.Errorf("not a volume file (bad magic)")
	}
	if got, want := crc32.Checksum(b[:60], castagnoli), binary.LittleEndian.Uint32(b[60:]); got != want {
		return superblock{}, fmt.Errorf("superblock checksum %#x, want %#x", got, want)
	}
	v := binary.LittleEndian.Uint32(b[8:])
	if v != superV1 && v != superVersion {
		return superblock{}, fmt.Errorf("unknown volume format version %d", v)
	}
	return superblock{
		version:  v,
		id:       binary.LittleEndian.Uint32(b[12:]),
		gen:      binary.LittleEndian.Uint64(b[16:]),
		keyFloor: binary.LittleEndian.Uint64(b[24:]),
		instance: binary.LittleEndian.Uint64(b[32:]),
		created:  int64(binary.LittleEndian.Uint64(b[40:])),
		readOnly: b[48] == 1,
	}, nil
}

func idxHeader(instance uint64) []byte {
	b := make([]byte, idxHdrSize)
	copy(b, idxMagic[:])
	binary.LittleEndian.PutUint64(b[8:], instance)
	return b
}

func putIdxEntry(b []byte, key uint64, off int64, size uint32) {
	binary.LittleEndian.PutUint64(b[0:], key)
	binary.LittleEndian.PutUint32(b[8:], uint32(off/8))
	binary.LittleEndian.PutUint32(b[12:], size)
}
