package volume

import (
	"bytes"
	"io"
	"os"
	"testing"

	"cairn/errors"
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
		if uint32(key) == 0 {
			key |= 1 // a key's sequence number is never 0
		}
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

// FuzzOpenTail appends arbitrary bytes to a volume, as a crash or a bad
// disk might, and opens it: no panic, every needle written before is
// intact, and whatever the tail held is either cut off or made of records
// that verify.
func FuzzOpenTail(f *testing.F) {
	good := make([]byte, recordSize(5))
	encodeRecord(good, flagData, 3, []byte("hello"))
	f.Add([]byte{})
	f.Add(good)
	f.Add(append(bytes.Clone(good), 1, 2, 3))
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		v, err := Create(dir, 7, 1, Options{})
		if err != nil {
			t.Fatal(err)
		}
		k1, _ := v.Append(1, []byte("first"))
		k2, _ := v.Append(1, []byte("second"))
		v.Close()
		dat, _ := FileNames(dir, 7)
		fh, _ := os.OpenFile(dat, os.O_WRONLY|os.O_APPEND, 0)
		fh.Write(tail)
		fh.Close()
		v, err = Open(dir, 7, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer v.Close()
		// The needles written before survive, unless the tail itself holds
		// a valid record that replaces or deletes them.
		for k, want := range map[uint64]string{k1: "first", k2: "second"} {
			var buf bytes.Buffer
			_, err := v.ReadTo(k, 0, int64(len(want)), &buf)
			if v.Stats().Truncated == int64(len(tail)) && (err != nil || buf.String() != want) {
				t.Fatalf("needle %d after a tail that was cut off entirely: %q %v", k, buf.String(), err)
			}
			if err != nil && !errors.Is(errors.NotExist, err) && !errors.Is(errors.Range, err) {
				t.Fatalf("needle %d: %v", k, err)
			}
		}
		// Everything the index holds now verifies end to end.
		v.mu.RLock()
		var all []slot
		all = append(all, v.idx.sorted...)
		for _, s := range v.idx.extra {
			all = append(all, s)
		}
		v.mu.RUnlock()
		for _, s := range all {
			if s.off == 0 {
				continue
			}
			if _, err := v.ReadTo(s.key(), 0, int64(s.size), io.Discard); err != nil {
				t.Fatalf("indexed needle %d does not verify: %v", s.key(), err)
			}
		}
	})
}

// FuzzReadLocated: a shared-file reader, told a needle's location (or a
// made-up one), returns exactly what ReadTo returns for any range, or an
// error; it never returns bytes that are not the needle's.
func FuzzReadLocated(f *testing.F) {
	f.Add(uint32(0), uint32(100), int64(0), int64(0))
	f.Add(uint32(65530), uint32(70000), int64(0), int64(0))
	f.Add(uint32(1), uint32(200000), int64(8), int64(0))
	f.Add(uint32(0), uint32(10), int64(-24), int64(-1))
	dir := f.TempDir()
	v, err := Create(dir, 3, 1, Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer v.Close()
	data := make([]byte, 3*BlockSize+77)
	for i := range data {
		data[i] = byte(i * 7)
	}
	v.Append(1, []byte("before"))
	key, err := v.Append(1, data)
	if err != nil {
		f.Fatal(err)
	}
	fh, release, loc := shareForTest(f, v, key)
	defer release()
	f.Fuzz(func(t *testing.T, off, length uint32, dataShift, sizeShift int64) {
		o, n := int64(off%uint32(len(data)+2)), int64(length%uint32(len(data)+2))
		var want bytes.Buffer
		_, werr := v.ReadTo(key, o, n, &want)
		l := loc
		l.Data += dataShift
		l.Size += sizeShift
		p := make([]byte, n)
		got, err := ReadLocatedAt(fh, key, l, p, o)
		var w bytes.Buffer
		m, err2 := ReadLocated(fh, key, l, o, n, &w)
		if l == loc {
			if (werr == nil) != (err == nil) || (werr == nil) != (err2 == nil) {
				t.Fatalf("[%d,+%d): ReadTo %v, ReadLocatedAt %v, ReadLocated %v", o, n, werr, err, err2)
			}
			if werr == nil && (got != int(n) || !bytes.Equal(p, want.Bytes()) || !bytes.Equal(w.Bytes(), want.Bytes())) {
				t.Fatalf("[%d,+%d): bytes differ from ReadTo", o, n)
			}
			return
		}
		// A wrong location: whatever verified must be the needle's own
		// bytes at that offset (a shift by whole blocks cannot verify: the
		// block index is in the checksum).
		if !bytes.Equal(p[:got], data[o:o+int64(got)]) || !bytes.Equal(w.Bytes(), data[o:o+m]) {
			t.Fatalf("a made-up location (%+d data, %+d size) returned bytes that are not the needle's", dataShift, sizeShift)
		}
	})
}
