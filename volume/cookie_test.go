package volume

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"cairn/errors"
)

// wrongCookie is key with the same sequence number and another cookie.
func wrongCookie(key uint64) uint64 { return key ^ 0x5a5a5a5a<<32 }

// refusedAsMissing checks that every way of asking about key answers
// exactly what it answers for a needle that was never written: a wrong
// cookie must tell a caller nothing, not even that the sequence number is
// taken or how long the needle is.
func refusedAsMissing(t *testing.T, v *Volume, key uint64) {
	t.Helper()
	if _, err := v.ReadTo(key, 0, 1, io.Discard); !errors.Is(errors.NotExist, err) {
		t.Fatalf("read of %#x: %v, want NotExist", key, err)
	}
	if _, err := v.ReadTo(key, 1<<40, 1, io.Discard); !errors.Is(errors.NotExist, err) {
		t.Fatalf("out-of-range read of %#x: %v, want NotExist (not Range, which would reveal the needle)", key, err)
	}
	if _, err := v.ReadTo(key, 0, 0, io.Discard); !errors.Is(errors.NotExist, err) {
		t.Fatalf("empty read of %#x: %v, want NotExist", key, err)
	}
	if _, err := v.Size(key); !errors.Is(errors.NotExist, err) {
		t.Fatalf("size of %#x: %v, want NotExist", key, err)
	}
	if _, err := v.Locate(key); !errors.Is(errors.NotExist, err) {
		t.Fatalf("locate of %#x: %v, want NotExist", key, err)
	}
}

func TestCookie(t *testing.T) {
	v, dir := newVol(t, Options{})
	want := map[uint64][]byte{}
	for i, n := range []int{0, 10, BlockSize + 3} {
		d := payload(uint64(i), n)
		k, err := v.Append(1, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, c := splitKey(k); c == 0 {
			t.Fatalf("needle %d has no cookie: key %#x", i, k)
		}
		if seqOf(k) != uint64(i+1) {
			t.Fatalf("needle %d: sequence number %d", i, seqOf(k))
		}
		want[k] = d
	}
	check := func(stage string) {
		t.Helper()
		checkAll(t, v, want)
		for k := range want {
			refusedAsMissing(t, v, wrongCookie(k))
			refusedAsMissing(t, v, seqOf(k)) // the bare sequence number: a version 1 key
		}
		// The error for a wrong cookie reads like the one for a needle
		// that never existed.
		_, missing := v.ReadTo(joinKey(1000, 7), 0, 1, io.Discard)
		for k := range want {
			_, wrong := v.ReadTo(joinKey(1000, 7)&^0xffffffff|uint64(uint32(k)), 0, 1, io.Discard)
			if errors.KindOf(wrong) != errors.KindOf(missing) {
				t.Fatalf("%s: wrong cookie %v, missing needle %v", stage, wrong, missing)
			}
		}
	}
	check("written")

	// A delete with a wrong cookie deletes nothing.
	var some uint64
	for k := range want {
		some = k
		break
	}
	if err := v.Delete(1, wrongCookie(some)); err != nil {
		t.Fatal(err)
	}
	check("after a delete with a wrong cookie")

	// A replica's write keeps the primary's cookie.
	rk := joinKey(50, 0xdeadbeef)
	if err := v.AppendKey(1, rk, []byte("replica")); err != nil {
		t.Fatal(err)
	}
	want[rk] = []byte("replica")
	if err := v.AppendKey(1, joinKey(0, 5), nil); !errors.Is(errors.Invalid, err) {
		t.Fatalf("AppendKey of sequence number 0: %v, want Invalid", err)
	}
	check("replica write")

	if err := v.Compact(); err != nil {
		t.Fatal(err)
	}
	check("compacted")
	v.Close()
	for _, dropIdx := range []bool{false, true} {
		if dropIdx {
			os.Remove(filepath.Join(dir, "7.idx"))
		}
		var err error
		if v, err = Open(dir, 7, Options{}); err != nil {
			t.Fatal(err)
		}
		check("reopened")
		v.Close()
	}
}

// openV1 copies the version 1 volume in testdata (written by the code of
// format version 1: needles 1, 2 and 4, needle 3 deleted) to a temporary
// directory and opens it.
func openV1(t *testing.T) (*Volume, string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"7.dat", "7.idx"} {
		b, err := os.ReadFile(filepath.Join("testdata", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Open(dir, 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return v, dir
}

func fileVersion(t *testing.T, dir string) uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "7.dat"))
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[8:])
}

func TestFormatV1(t *testing.T) {
	big := make([]byte, BlockSize+100)
	for i := range big {
		big[i] = byte(i * 7)
	}
	old := map[uint64][]byte{1: []byte("first needle"), 2: []byte("second needle"), 4: big}
	v, dir := openV1(t)
	checkAll(t, v, old)
	if _, err := v.ReadTo(3, 0, 1, io.Discard); !errors.Is(errors.NotExist, err) {
		t.Fatalf("deleted needle 3: %v", err)
	}
	refusedAsMissing(t, v, joinKey(1, 99)) // a cookie on a needle that has none
	if got := fileVersion(t, dir); got != superV1 {
		t.Fatalf("opening changed the format version to %d", got)
	}

	// The first needle with a cookie makes the file version 2.
	k, err := v.Append(3, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if _, c := splitKey(k); c == 0 || seqOf(k) != 5 {
		t.Fatalf("new needle in an old volume: key %#x", k)
	}
	if got := fileVersion(t, dir); got != superVersion {
		t.Fatalf("format version %d after a needle with a cookie", got)
	}
	all := map[uint64][]byte{k: []byte("new")}
	for k, d := range old {
		all[k] = d
	}
	checkAll(t, v, all)
	refusedAsMissing(t, v, seqOf(k))
	if err := v.Delete(3, 2); err != nil { // a version 1 key deletes as before
		t.Fatal(err)
	}
	delete(all, 2)
	if err := v.Compact(); err != nil {
		t.Fatal(err)
	}
	checkAll(t, v, all)
	v.Close()
	if v, err = Open(dir, 7, Options{}); err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	checkAll(t, v, all)
	refusedAsMissing(t, v, seqOf(k))
	if got := fileVersion(t, dir); got != superVersion {
		t.Fatalf("format version %d after compaction and reopen", got)
	}
}

// FuzzSuperblock: any 64 bytes parse without panic; what parses is a
// version this code knows and re-encodes to the same fields.
func FuzzSuperblock(f *testing.F) {
	f.Add(superblock{version: superVersion, id: 7, gen: 3, keyFloor: 9, instance: 11, created: 5}.encode())
	f.Add(superblock{version: superV1, id: 1, readOnly: true}.encode())
	f.Add(make([]byte, superSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := parseSuperblock(b)
		if err != nil {
			return
		}
		if sb.version != superV1 && sb.version != superVersion {
			t.Fatalf("accepted version %d", sb.version)
		}
		again, err := parseSuperblock(sb.encode())
		if err != nil || again != sb {
			t.Fatalf("superblock does not round-trip: %+v, %+v, %v", sb, again, err)
		}
	})
}

// FuzzKey: a key's halves round-trip, and a record header holds a cookie
// as it holds the rest of the key.
func FuzzKey(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(0xdeadbeef00000001))
	f.Add(uint64(1 << 32))
	f.Fuzz(func(t *testing.T, key uint64) {
		seq, cookie := splitKey(key)
		if joinKey(seq, cookie) != key {
			t.Fatalf("%#x does not round-trip", key)
		}
		var b [headerSize]byte
		putHeader(b[:], header{flags: flagData, key: key, size: 3})
		h, err := parseHeader(b[:])
		if seq == 0 {
			if err == nil {
				t.Fatalf("header of sequence number 0 accepted: %#x", key)
			}
			return
		}
		if err != nil || h.key != key {
			t.Fatalf("header of %#x: %+v %v", key, h, err)
		}
		if s := newSlot(key, 64, 3); s.key() != key || s.seq != seq || s.cookie != cookie {
			t.Fatalf("slot of %#x: %+v", key, s)
		}
	})
}

// BenchmarkNewCookie: the cost a new needle pays for its cookie (a
// crypto/rand read, outside the append lock).
func BenchmarkNewCookie(b *testing.B) {
	for b.Loop() {
		newCookie()
	}
}
