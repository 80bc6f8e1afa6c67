package ec

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	"cairn/errors"
)

// An encoded volume's needle index travels with its shards (every shard
// server keeps it, and readers fetch it to find the shard a needle lies
// in): where each live needle's data lies in the encoded file.
//
//	0   [8]  magic "CAIRNECX"
//	8   u32  volume id
//	12  u32  count
//	16  count * {key u64, data offset u64, data size u64}, keys ascending
//	    u32  CRC32C of all before it

const indexMagic = "CAIRNECX"

// Needle is one needle of an encoded volume: its data's offset and size
// in the encoded file.
type Needle struct {
	Key  uint64
	Data int64
	Size int64
}

// MarshalIndex is the index of volume vol; ns must be in key order.
func MarshalIndex(vol uint32, ns []Needle) []byte {
	b := make([]byte, 0, 16+24*len(ns)+4)
	b = append(b, indexMagic...)
	b = binary.LittleEndian.AppendUint32(b, vol)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ns)))
	for _, n := range ns {
		b = binary.LittleEndian.AppendUint64(b, n.Key)
		b = binary.LittleEndian.AppendUint64(b, uint64(n.Data))
		b = binary.LittleEndian.AppendUint64(b, uint64(n.Size))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// ParseIndex reads an index; every entry is checked (keys ascending and
// non-zero, offsets and sizes within bounds), since it comes from a file
// or a peer.
func ParseIndex(b []byte) (vol uint32, ns []Needle, err error) {
	const op = errors.Op("ec.ParseIndex")
	if len(b) < 20 || string(b[:8]) != indexMagic {
		return 0, nil, errors.E(op, errors.Corrupt, "not a needle index")
	}
	n := len(b) - 4
	if crc32.Checksum(b[:n], castagnoli) != binary.LittleEndian.Uint32(b[n:]) {
		return 0, nil, errors.E(op, errors.Corrupt, "needle index checksum mismatch")
	}
	vol = binary.LittleEndian.Uint32(b[8:])
	count := int(binary.LittleEndian.Uint32(b[12:]))
	if (n-16)%24 != 0 || count != (n-16)/24 {
		return 0, nil, errors.E(op, errors.Corrupt, "needle index length does not match its count")
	}
	ns = make([]Needle, count)
	var prev uint64
	for i := range ns {
		e := b[16+24*i:]
		nd := Needle{Key: binary.LittleEndian.Uint64(e), Data: int64(binary.LittleEndian.Uint64(e[8:])), Size: int64(binary.LittleEndian.Uint64(e[16:]))}
		if nd.Key == 0 || nd.Key <= prev {
			return 0, nil, errors.E(op, errors.Corrupt, "needle index keys out of order")
		}
		if nd.Data < 0 || nd.Size < 0 || nd.Data > 1<<50 || nd.Size > 1<<40 {
			return 0, nil, errors.Errorf(op, errors.Corrupt, "needle %d: impossible location %d+%d", nd.Key, nd.Data, nd.Size)
		}
		prev = nd.Key
		ns[i] = nd
	}
	return vol, ns, nil
}

// Find returns needle key of an index in key order.
func Find(ns []Needle, key uint64) (Needle, bool) {
	i, ok := slices.BinarySearchFunc(ns, key, func(n Needle, k uint64) int {
		switch {
		case n.Key < k:
			return -1
		case n.Key > k:
			return 1
		}
		return 0
	})
	if !ok {
		return Needle{}, false
	}
	return ns[i], true
}

// Home is the data shard a reader of needle n asks first: the shard that
// holds the start of its data, where the whole of most needles lies.
func (l Layout) Home(n Needle) int {
	return int((n.Data / l.Cell) % int64(l.K))
}
