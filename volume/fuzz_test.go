package volume

import (
	"bytes"
	"testing"
)

// FuzzRecord feeds verifyRecord both arbitrary bytes and valid records
// with one byte changed. It must never panic, must accept only records it
// would itself have written, and must reject every single-byte change: a
// CRC32C catches any error burst of 32 bits or less, and the padding must
// be zero, so no byte of a record goes unchecked.
func FuzzRecord(f *testing.F) {
	f.Add([]byte("hello"), uint16(1), uint64(1), uint(3), byte(1), []byte{})
	f.Add([]byte("abcdefghijklmnopq"), uint16(3856), uint64(1<<40), uint(BlockSize+30), byte(0x80), []byte{1, 2, 3})
	f.Add([]byte{}, uint16(0), uint64(7), uint(0), byte(0xff), make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, seed []byte, rep uint16, key uint64, pos uint, x byte, raw []byte) {
		// Inputs stay small (the fuzzer minimizes them byte by byte); rep
		// stretches them over several checksum blocks.
		data := bytes.Repeat(seed, 1+int(rep)%(4*BlockSize/max(1, len(seed))))
		// Arbitrary input: no panic, and acceptance means canonical form.
		if h, d, err := verifyRecord(raw); err == nil {
			again := make([]byte, recordSize(int64(len(d))))
			encodeRecord(again, h.flags, h.key, d)
			if !bytes.Equal(again, raw) {
				t.Fatalf("accepted a record that does not re-encode to itself")
			}
		}
		parseHeader(raw)

		// A valid record round-trips.
		rec := make([]byte, recordSize(int64(len(data))))
		encodeRecord(rec, flagData, key, data)
		h, d, err := verifyRecord(rec)
		if err != nil || h.key != key || !bytes.Equal(d, data) {
			t.Fatalf("valid record rejected or misread: %v", err)
		}
		// One changed byte anywhere is caught.
		if x == 0 {
			x = 1
		}
		bad := bytes.Clone(rec)
		bad[pos%uint(len(bad))] ^= x
		if _, _, err := verifyRecord(bad); err == nil {
			t.Fatalf("record with byte %d changed (^%#x) accepted", pos%uint(len(bad)), x)
		}
		// A truncated or extended record is rejected.
		if _, _, err := verifyRecord(rec[:len(rec)-1-int(pos%uint(len(rec)))]); err == nil {
			t.Fatalf("truncated record accepted")
		}
		if _, _, err := verifyRecord(append(bytes.Clone(rec), 0, 0, 0, 0, 0, 0, 0, 0)); err == nil {
			t.Fatalf("extended record accepted")
		}
	})
}
