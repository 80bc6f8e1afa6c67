package volume

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"cairn/errors"
)

func newVol(t testing.TB, opts Options) (*Volume, string) {
	t.Helper()
	dir := t.TempDir()
	v, err := Create(dir, 7, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, dir
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func read(t testing.TB, v *Volume, key uint64, off, n int64) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	m, err := v.ReadTo(key, off, n, &buf)
	if err == nil && m != n {
		t.Fatalf("ReadTo(%d, %d, %d) = %d bytes", key, off, n, m)
	}
	return buf.Bytes(), err
}

// Sizes at and around multiples of the block size, where the block
// arithmetic of writes and reads can go wrong.
var sizes = []int{0, 1, 7, 8, 9, 4096, BlockSize - 1, BlockSize, BlockSize + 1,
	2*BlockSize - 1, 2 * BlockSize, 2*BlockSize + 1, 155 << 10, 20*BlockSize + 3}

func TestRoundTrip(t *testing.T) {
	v, _ := newVol(t, Options{})
	keys := map[int]uint64{}
	for _, n := range sizes {
		k, err := v.Append(1, payload(uint64(n), n))
		if err != nil {
			t.Fatalf("Append %d bytes: %v", n, err)
		}
		keys[n] = k
	}
	for _, n := range sizes {
		want := payload(uint64(n), n)
		k := keys[n]
		if sz, err := v.Size(k); err != nil || sz != int64(n) {
			t.Fatalf("Size(%d) = %d, %v; want %d", k, sz, err, n)
		}
		N := int64(n)
		ranges := [][2]int64{{0, N}, {0, 0}, {N, 0}, {0, min(N, 1)}, {N / 2, N - N/2}, {N - min(N, 1), min(N, 1)}}
		for _, b := range []int64{BlockSize - 1, BlockSize, BlockSize + 1, 2*BlockSize - 3} {
			if b < N {
				ranges = append(ranges, [2]int64{b, N - b}, [2]int64{b, min(N-b, 5)}, [2]int64{0, b})
			}
		}
		for _, r := range ranges {
			got, err := read(t, v, k, r[0], r[1])
			if err != nil {
				t.Fatalf("%d-byte needle, range %v: %v", n, r, err)
			}
			if !bytes.Equal(got, want[r[0]:r[0]+r[1]]) {
				t.Fatalf("%d-byte needle, range %v: wrong bytes", n, r)
			}
		}
	}
	// Sequence numbers are assigned in order; cookies are random.
	for i := 1; i < len(sizes); i++ {
		if seqOf(keys[sizes[i]]) != seqOf(keys[sizes[i-1]])+1 {
			t.Fatalf("keys not sequential: %v", keys)
		}
	}
}

func TestErrors(t *testing.T) {
	v, _ := newVol(t, Options{MaxSize: 1 << 20, MaxNeedle: 300 << 10})
	k, err := v.Append(1, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		kind errors.Kind
	}{
		{"missing key", second(read(t, v, k+100, 0, 1)), errors.NotExist},
		{"range past end", second(read(t, v, k, 3, 3)), errors.Range},
		{"offset past end", second(read(t, v, k, 6, 0)), errors.Range},
		{"negative offset", second(read(t, v, k, -1, 1)), errors.Range},
		{"stale append", second(v.Append(0, []byte("x"))), errors.Stale},
		{"stale delete", v.Delete(2, k), errors.Stale},
		{"stale appendkey", v.AppendKey(5, 99, nil), errors.Stale},
		{"key zero", v.AppendKey(1, 0, nil), errors.Invalid},
		{"too large", second(v.Append(1, make([]byte, 301<<10))), errors.TooLarge},
		{"size of missing", second(v.Size(12345)), errors.NotExist},
		{"gen backwards", v.SetGen(0), errors.Stale},
	}
	for _, tt := range tests {
		if !errors.Is(tt.kind, tt.err) {
			t.Errorf("%s: got %v, want kind %v", tt.name, tt.err, tt.kind)
		}
	}
	if err := v.Delete(1, 424242); err != nil {
		t.Errorf("deleting a missing needle: %v", err)
	}

	// Fill the volume: it turns ReadOnly, but still takes deletes.
	var last uint64
	for {
		k, err := v.Append(1, make([]byte, 200<<10))
		if err != nil {
			if !errors.Is(errors.ReadOnly, err) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
		last = k
	}
	if !v.Stats().Full {
		// The last append may have left less than a needle of room.
		t.Logf("stats %+v", v.Stats())
	}
	if err := v.Delete(1, last); err != nil {
		t.Fatalf("delete in full volume: %v", err)
	}
	if _, err := read(t, v, last, 0, 1); !errors.Is(errors.NotExist, err) {
		t.Fatalf("read of deleted needle: %v", err)
	}

	// Generation and read-only mark survive a reopen.
	if err := v.SetGen(3); err != nil {
		t.Fatal(err)
	}
	if err := v.SetReadOnly(true); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Append(3, nil); !errors.Is(errors.ReadOnly, err) {
		t.Fatalf("append to read-only volume: %v", err)
	}
	dir := v.dir
	v.Close()
	v2, err := Open(dir, 7, Options{MaxSize: 1 << 20, MaxNeedle: 300 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	if s := v2.Stats(); s.Gen != 3 || !s.ReadOnly {
		t.Fatalf("after reopen: %+v", s)
	}
	if got, err := read(t, v2, k, 0, 5); err != nil || string(got) != "hello" {
		t.Fatalf("after reopen: %q, %v", got, err)
	}
	if _, err := Create(dir, 7, 1, Options{}); !errors.Is(errors.Exist, err) {
		t.Fatalf("Create over existing: %v", err)
	}
	if _, err := Open(dir, 8, Options{}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("Open missing: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestReopen(t *testing.T) {
	v, dir := newVol(t, Options{})
	want := map[uint64][]byte{}
	var keys []uint64
	for i := range 50 {
		d := payload(uint64(i), i*997)
		k, err := v.Append(1, d)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = d
		keys = append(keys, k)
	}
	for k := range want {
		if k%3 == 0 {
			if err := v.Delete(1, k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		}
	}
	// A replaced needle (sequence 5, its cookie kept): the later record wins.
	if err := v.AppendKey(1, keys[4], []byte("replaced")); err != nil {
		t.Fatal(err)
	}
	want[keys[4]] = []byte("replaced")
	before := v.Stats()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dropIdx := range []bool{false, true} {
		if dropIdx {
			_, idx := FileNames(dir, 7)
			os.Remove(idx)
		}
		v, err := Open(dir, 7, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkAll(t, v, want)
		s := v.Stats()
		if s.Needles != before.Needles || s.Garbage != before.Garbage || s.Size != before.Size {
			t.Fatalf("dropIdx=%v: stats %+v, before close %+v", dropIdx, s, before)
		}
		k, err := v.Append(1, []byte("next"))
		if err != nil {
			t.Fatal(err)
		}
		if seqOf(k) != 51+boolInt(dropIdx) {
			t.Fatalf("next key after reopen = %d", k)
		}
		want[k] = []byte("next")
		before = v.Stats()
		v.Close()
	}
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func checkAll(t *testing.T, v *Volume, want map[uint64][]byte) {
	t.Helper()
	if got := v.Stats().Needles; got != int64(len(want)) {
		t.Errorf("%d needles, want %d", got, len(want))
	}
	for k, d := range want {
		got, err := read(t, v, k, 0, int64(len(d)))
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("key %d: %v (len %d, want %d)", k, err, len(got), len(d))
		}
	}
}

// TestTornTail damages the end of the files the way a crash can, reopens,
// and checks that every complete record survives and nothing else does.
func TestTornTail(t *testing.T) {
	const good = 10
	type damage func(t *testing.T, dat, idx string, lastOff, lastSize int64)
	cut := func(back int64) damage {
		return func(t *testing.T, dat, idx string, lastOff, lastSize int64) {
			if err := os.Truncate(dat, lastOff+lastSize-back); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendBytes := func(b []byte) damage {
		return func(t *testing.T, dat, idx string, _, _ int64) {
			f, err := os.OpenFile(dat, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(b)
			f.Close()
		}
	}
	fakeHeader := make([]byte, headerSize+100)
	putHeader(fakeHeader, header{flags: flagData, key: 999, size: 1 << 20}) // valid header, data missing
	tests := []struct {
		name     string
		damage   damage
		lastLost bool // the last (extra) record is gone
	}{
		{"intact", func(*testing.T, string, string, int64, int64) {}, false},
		{"cut mid data", cut(3000), true},
		{"cut in checksums", cut(6), true},
		{"cut in padding", cut(1), true},
		{"cut mid header", func(t *testing.T, dat, _ string, off, _ int64) { os.Truncate(dat, off+10) }, true},
		{"zero-filled tail", appendBytes(make([]byte, 8192)), false},
		{"garbage tail", appendBytes(payload(5, 5000)), false},
		{"header without data", appendBytes(fakeHeader), false},
		{"flipped byte in last record, no idx", func(t *testing.T, dat, idx string, off, size int64) {
			flip(t, dat, off+size-20)
			os.Remove(idx)
		}, true},
		{"torn idx entry", func(t *testing.T, _, idx string, _, _ int64) {
			fi, _ := os.Stat(idx)
			os.Truncate(idx, fi.Size()-5)
		}, false},
		{"idx past dat end", func(t *testing.T, dat, idx string, off, _ int64) {
			os.Truncate(dat, off) // idx still lists the last record
		}, true},
		{"idx missing", func(t *testing.T, _, idx string, _, _ int64) { os.Remove(idx) }, false},
		{"idx garbage", func(t *testing.T, _, idx string, _, _ int64) {
			os.WriteFile(idx, payload(1, 4000), 0o644)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			v, err := Create(dir, 7, 1, Options{})
			if err != nil {
				t.Fatal(err)
			}
			want := map[uint64][]byte{}
			for i := range good {
				d := payload(uint64(i), 100+i*1000)
				k, err := v.Append(1, d)
				if err != nil {
					t.Fatal(err)
				}
				want[k] = d
			}
			last := payload(77, 2*BlockSize+5000)
			lastKey, err := v.Append(1, last)
			if err != nil {
				t.Fatal(err)
			}
			v.mu.RLock()
			s, _ := v.idx.get(lastKey)
			v.mu.RUnlock()
			lastOff, lastSize := int64(s.off)*8, recordSize(int64(len(last)))
			v.Close()
			dat, idx := FileNames(dir, 7)
			tt.damage(t, dat, idx, lastOff, lastSize)

			v, err = Open(dir, 7, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			if !tt.lastLost {
				want[lastKey] = last
			}
			checkAll(t, v, want)
			if tt.lastLost {
				if _, err := read(t, v, lastKey, 0, 1); !errors.Is(errors.NotExist, err) {
					t.Fatalf("torn record readable: %v", err)
				}
			}
			// The file now ends at the last good record.
			fi, _ := os.Stat(dat)
			wantEnd := lastOff
			if !tt.lastLost {
				wantEnd += lastSize
			}
			if fi.Size() != wantEnd || v.Stats().Size != wantEnd {
				t.Fatalf("file is %d bytes, want %d", fi.Size(), wantEnd)
			}
			// Writes carry on after the repair, and a second open agrees.
			k, err := v.Append(1, []byte("after"))
			if err != nil {
				t.Fatal(err)
			}
			if seqOf(k) <= seqOf(lastKey)-boolInt(tt.lastLost) {
				t.Fatalf("key %d reused after repair", k)
			}
			want[k] = []byte("after")
			v.Close()
			v, err = Open(dir, 7, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkAll(t, v, want)
		})
	}
}

func flip(t testing.TB, name string, off int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestFlippedByte(t *testing.T) {
	v, dir := newVol(t, Options{})
	d := payload(1, 3*BlockSize+100)
	k, err := v.Append(1, d)
	if err != nil {
		t.Fatal(err)
	}
	small, err := v.Append(1, []byte("small needle"))
	if err != nil {
		t.Fatal(err)
	}
	v.mu.RLock()
	s, _ := v.idx.get(k)
	ss, _ := v.idx.get(small)
	v.mu.RUnlock()
	dat, _ := FileNames(dir, 7)
	// Damage block 1 of the big needle and the small needle's checksum.
	flip(t, dat, int64(s.off)*8+headerSize+BlockSize+123)
	flip(t, dat, int64(ss.off)*8+headerSize+int64(ss.size)+1)

	tests := []struct {
		key     uint64
		off, n  int64
		corrupt bool
	}{
		{k, 0, int64(len(d)), true},
		{k, BlockSize, 1, true},
		{k, BlockSize - 1, 2, true},
		{k, 0, BlockSize, false}, // block 0 only
		{k, 2 * BlockSize, BlockSize + 100, false},
		{small, 0, 12, true},
		{small, 5, 1, true},
	}
	for _, tt := range tests {
		before := v.Stats().Corrupt
		got, err := read(t, v, tt.key, tt.off, tt.n)
		if tt.corrupt {
			if !errors.Is(errors.Corrupt, err) {
				t.Errorf("key %d [%d,+%d): %v, want Corrupt", tt.key, tt.off, tt.n, err)
			}
			if int64(len(got)) > tt.off%BlockSize+BlockSize && tt.key == k {
				t.Errorf("bytes of the bad block reached the writer")
			}
			if v.Stats().Corrupt != before+1 {
				t.Errorf("corrupt counter not incremented")
			}
		} else if err != nil || !bytes.Equal(got, d[tt.off:tt.off+tt.n]) {
			t.Errorf("key %d [%d,+%d): %v", tt.key, tt.off, tt.n, err)
		}
	}
}

func TestGroupCommit(t *testing.T) {
	v, _ := newVol(t, Options{})
	const writers, each = 32, 20
	var wg sync.WaitGroup
	keys := make(chan uint64, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				k, err := v.Append(1, payload(uint64(w*each+i), 4096))
				if err != nil {
					t.Error(err)
					return
				}
				// Acknowledged means indexed and readable.
				if _, err := v.Size(k); err != nil {
					t.Errorf("acked key %d not readable: %v", k, err)
				}
				keys <- k
			}
		})
	}
	wg.Wait()
	close(keys)
	seen := map[uint64]bool{}
	for k := range keys {
		if seen[k] {
			t.Fatalf("key %d assigned twice", k)
		}
		seen[k] = true
	}
	s := v.Stats()
	t.Logf("%d writes, %d fdatasyncs", writers*each, s.Syncs)
	if s.Syncs >= writers*each {
		t.Fatalf("%d syncs for %d writes: no group commit", s.Syncs, writers*each)
	}
	if s.Needles != writers*each {
		t.Fatalf("%d needles", s.Needles)
	}
}

func TestCompact(t *testing.T) {
	v, dir := newVol(t, Options{})
	want := map[uint64][]byte{}
	var mu sync.Mutex
	for i := range 300 {
		d := payload(uint64(i), 1000+i*37)
		k, err := v.Append(1, d)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = d
	}
	for k := range want {
		if k%2 == 0 {
			v.Delete(1, k)
			delete(want, k)
		}
	}
	want0 := snapshotOf(want)
	before := v.Stats()
	if before.GarbageRatio() < 0.3 {
		t.Fatalf("garbage ratio %.2f", before.GarbageRatio())
	}
	snapshot := func() map[uint64][]byte {
		mu.Lock()
		defer mu.Unlock()
		m := make(map[uint64][]byte, len(want))
		for k, d := range want {
			m[k] = d
		}
		return m
	}

	// Readers and writers run through compaction. Readers read keys
	// nobody deletes; the writer appends and deletes others.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stable, doomed []uint64
	for k := range snapshot() {
		if k%3 == 0 {
			doomed = append(doomed, k)
		} else {
			stable = append(stable, k)
		}
	}
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, k := range stable {
					d := want0[k]
					got, err := read(t, v, k, 0, int64(len(d)))
					if err != nil || !bytes.Equal(got, d) {
						t.Errorf("read %d during compaction: %v", k, err)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d := payload(uint64(1000+i), 500)
			k, err := v.Append(1, d)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			want[k] = d
			if i%10 == 0 && len(doomed) > 0 {
				dk := doomed[0]
				doomed = doomed[1:]
				if err := v.Delete(1, dk); err != nil {
					t.Error(err)
				}
				delete(want, dk)
			}
			mu.Unlock()
		}
	})
	for range 3 {
		if err := v.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	after := v.Stats()
	t.Logf("before %+v\nafter %+v", before, after)
	if after.Size >= before.Size {
		t.Errorf("compaction did not shrink the volume")
	}
	final := snapshot()
	checkAll(t, v, final)
	v.Close()
	v, err := Open(dir, 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	checkAll(t, v, final)
	if err := v.Compact(); err != nil {
		t.Fatal(err)
	}
	if g := v.Stats().Garbage; g != 0 {
		t.Errorf("garbage %d after a quiet compaction", g)
	}
	checkAll(t, v, final)
	// Keys of needles dropped by compaction are never handed out again.
	k, _ := v.Append(1, nil)
	for old := range final {
		if seqOf(k) <= seqOf(old) {
			t.Fatalf("key %d reused after compaction", k)
		}
	}
}

func snapshotOf(m map[uint64][]byte) map[uint64][]byte {
	c := make(map[uint64][]byte, len(m))
	for k, d := range m {
		c[k] = d
	}
	return c
}

// TestBitRotInMiddle: with the .idx gone, a damaged record inside the file
// must not cost the records after it.
func TestBitRotInMiddle(t *testing.T) {
	v, dir := newVol(t, Options{})
	want := map[uint64][]byte{}
	var bad uint64
	for i := range 10 {
		d := payload(uint64(i), 5000)
		k, _ := v.Append(1, d)
		want[k] = d
		if i == 4 {
			bad = k
		}
	}
	v.mu.RLock()
	s, _ := v.idx.get(bad)
	v.mu.RUnlock()
	v.Close()
	dat, idx := FileNames(dir, 7)
	flip(t, dat, int64(s.off)*8+headerSize+100)
	os.Remove(idx)
	v, err := Open(dir, 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := read(t, v, bad, 0, 10); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("damaged needle: %v", err)
	}
	delete(want, bad)
	for k, d := range want {
		if got, err := read(t, v, k, 0, int64(len(d))); err != nil || !bytes.Equal(got, d) {
			t.Fatalf("key %d: %v", k, err)
		}
	}
	if st := v.Stats(); st.Damaged != 1 || st.Truncated != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOutOfOrderKeys(t *testing.T) {
	v, dir := newVol(t, Options{})
	want := map[uint64][]byte{}
	for _, k := range []uint64{100, 50, 200, 75, 50, 1} {
		d := []byte(fmt.Sprint("value ", k, len(want)))
		if err := v.AppendKey(1, k, d); err != nil {
			t.Fatal(err)
		}
		want[k] = d
	}
	v.Delete(1, 75)
	delete(want, 75)
	checkAll(t, v, want)
	k, _ := v.Append(1, []byte("x"))
	if seqOf(k) != 201 {
		t.Fatalf("Append after AppendKey(200) chose %d", k)
	}
	want[k] = []byte("x")
	v.Close()
	v, _ = Open(dir, 7, Options{})
	defer v.Close()
	checkAll(t, v, want)
}

func TestCloseWithReaders(t *testing.T) {
	v, _ := newVol(t, Options{})
	k, _ := v.Append(1, payload(1, 100))
	v.Close()
	if _, err := read(t, v, k, 0, 1); err == nil {
		t.Fatal("read after close succeeded")
	}
	if _, err := v.Append(1, nil); err == nil {
		t.Fatal("append after close succeeded")
	}
	_ = io.Discard
}

// shareForTest opens the volume's file the way another process would get
// it, and returns it with needle key's location.
func shareForTest(t testing.TB, v *Volume, key uint64) (*os.File, func(), Location) {
	t.Helper()
	f, instance, release, err := v.Share()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckShared(f, v.id, instance); err != nil {
		t.Fatal(err)
	}
	if err := CheckShared(f, v.id+1, instance); !errors.Is(errors.Stale, err) {
		t.Fatalf("another volume's file passed: %v", err)
	}
	loc, err := v.Locate(key)
	if err != nil || loc.Instance != instance {
		t.Fatalf("locate: %+v, %v", loc, err)
	}
	return f, release, loc
}

// seqOf is the sequence number of a needle key (its cookie dropped).
func seqOf(key uint64) uint64 { return uint64(uint32(key)) }
