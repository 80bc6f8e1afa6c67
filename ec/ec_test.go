package ec

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"unsafe"

	"cairn/errors"
)

// encoded encodes data with the given code and returns every shard file.
func encoded(t testing.TB, data []byte, k, m int, cell int64) (Layout, [][]byte) {
	t.Helper()
	l := Layout{K: k, M: m, Cell: cell, Size: int64(len(data))}
	bufs := make([]*bytes.Buffer, k+m)
	ws := make([]io.Writer, k+m)
	for i := range bufs {
		bufs[i] = new(bytes.Buffer)
		ws[i] = bufs[i]
	}
	if err := Encode(bytes.NewReader(data), 7, l, ws); err != nil {
		t.Fatal(err)
	}
	files := make([][]byte, k+m)
	for i, b := range bufs {
		files[i] = b.Bytes()
		if int64(len(files[i])) != l.FileSize() {
			t.Fatalf("shard %d: %d bytes, layout says %d", i, len(files[i]), l.FileSize())
		}
	}
	return l, files
}

// reader opens the shard files, leaving out those in missing.
func reader(t testing.TB, l Layout, files [][]byte, missing ...int) *Reader {
	t.Helper()
	shards := make([]io.ReaderAt, len(files))
	for i, f := range files {
		if contains(missing, i) {
			continue
		}
		s, err := OpenShard(bytes.NewReader(f), int64(len(f)))
		if err != nil {
			t.Fatal(err)
		}
		if s.Index != i || s.Volume != 7 || s.Layout != l {
			t.Fatalf("shard %d header: %+v", i, s.Header)
		}
		shards[i] = s
	}
	r, err := NewReader(l, shards)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestReadBack reads random ranges of random files with every shard, and
// with every way of losing up to M shards, and checks them against the
// file.
func TestReadBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		k, m int
		cell int64
		size int
	}{
		{4, 2, 64, 0}, {4, 2, 64, 1}, {4, 2, 64, 255}, {4, 2, 64, 256}, {4, 2, 64, 1000},
		{8, 4, 128, 10_000}, {2, 1, 4096, 100_000}, {3, 3, 1024, 4096*3 + 17},
	} {
		data := randomBytes(rng, c.size)
		l, files := encoded(t, data, c.k, c.m, c.cell)
		for trial := 0; trial < 30; trial++ {
			var missing []int
			for _, i := range rng.Perm(c.k + c.m)[:rng.IntN(c.m+1)] {
				missing = append(missing, i)
			}
			r := reader(t, l, files, missing...)
			off := int64(0)
			if c.size > 0 {
				off = rng.Int64N(int64(c.size))
			}
			n := rng.Int64N(int64(c.size)-off+1) + 0
			p := make([]byte, n)
			got, err := r.ReadAt(p, off)
			if err != nil && err != io.EOF {
				t.Fatalf("%d+%d size %d missing %v: ReadAt(%d, %d): %v", c.k, c.m, c.size, missing, off, n, err)
			}
			if !bytes.Equal(p[:got], data[off:off+int64(got)]) || int64(got) != n {
				t.Fatalf("%d+%d size %d missing %v: ReadAt(%d, %d) read wrong bytes (%d)", c.k, c.m, c.size, missing, off, n, got)
			}
		}
	}
}

func TestTooManyLost(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(3, 4)), 10_000)
	l, files := encoded(t, data, 4, 2, 256)
	r := reader(t, l, files, 0, 4, 5) // shard 0 and both parity: 3 of 6 left
	p := make([]byte, 100)
	if _, err := r.ReadAt(p, 0); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("read of a range on a lost shard with M+1 lost: %v, want Unavailable", err)
	}
	// A range on a shard that is still there reads straight from it.
	if _, err := r.ReadAt(p, 256); err != nil || !bytes.Equal(p, data[256:356]) {
		t.Fatalf("read of a range on a present shard: %v", err)
	}
}

// TestAvoidCorrupt flips bytes in a data shard: a straight read returns
// them (the volume's needle checksums catch that), and a read avoiding
// the shard returns the file's bytes.
func TestAvoidCorrupt(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(5, 6)), 50_000)
	l, files := encoded(t, data, 4, 2, 1024)
	pcs := l.Pieces(5000, 100)
	if len(pcs) != 1 {
		t.Fatalf("pieces %+v", pcs)
	}
	files[pcs[0].Shard][headerSize+pcs[0].Off+10] ^= 0xff
	r := reader(t, l, files)
	p := make([]byte, 100)
	if _, err := r.ReadAt(p, 5000); err != nil || bytes.Equal(p, data[5000:5100]) {
		t.Fatalf("straight read of a damaged range: %v, equal %v", err, bytes.Equal(p, data[5000:5100]))
	}
	if _, err := r.ReadAtAvoiding(p, 5000, []int{pcs[0].Shard}); err != nil || !bytes.Equal(p, data[5000:5100]) {
		t.Fatalf("read avoiding the damaged shard: %v", err)
	}
	s, _ := OpenShard(bytes.NewReader(files[pcs[0].Shard]), l.FileSize())
	bad, err := s.Scrub()
	if err != nil || len(bad) != 1 || bad[0] != pcs[0].Off/l.Cell {
		t.Fatalf("scrub: bad rows %v, %v; want [%d]", bad, err, pcs[0].Off/l.Cell)
	}
}

// TestRebuildShard rebuilds every shard in turn from the others and
// compares it with the original file byte for byte.
func TestRebuildShard(t *testing.T) {
	for _, c := range []struct {
		size int
		cell int64
	}{
		{77_777, 2048},
		// Cells larger than a rebuild slice: each is rebuilt in two
		// slices (1 MiB and 512 KiB), its CRC over both.
		{7 << 20, rebuildSlice * 3 / 2},
	} {
		data := randomBytes(rand.New(rand.NewPCG(7, 8)), c.size)
		l, files := encoded(t, data, 4, 2, c.cell)
		for i := range files {
			r := reader(t, l, files, i, (i+1)%len(files)) // two lost: M of them
			var b bytes.Buffer
			if err := r.RebuildShard(7, i, &b); err != nil {
				t.Fatalf("cell %d: rebuild shard %d: %v", c.cell, i, err)
			}
			if !bytes.Equal(b.Bytes(), files[i]) {
				t.Fatalf("cell %d: rebuilt shard %d differs", c.cell, i)
			}
		}
	}
}

func TestOpenShardRefusesDamage(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(9, 10)), 5000)
	l, files := encoded(t, data, 2, 1, 512)
	f := append([]byte(nil), files[0]...)
	if _, err := OpenShard(bytes.NewReader(f[:len(f)-1]), int64(len(f)-1)); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("short shard: %v", err)
	}
	f[12] = 9 // K
	if _, err := OpenShard(bytes.NewReader(f), int64(len(f))); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("header with a changed K: %v", err)
	}
	_ = l
}

func TestLayoutValidate(t *testing.T) {
	for _, l := range []Layout{
		{K: 0, M: 1, Cell: 64}, {K: 1, M: 0, Cell: 64}, {K: 60, M: 5, Cell: 64},
		{K: 4, M: 2, Cell: 100}, {K: 4, M: 2, Cell: 0}, {K: 4, M: 2, Cell: 64, Size: -1},
	} {
		if err := l.Validate(); !errors.Is(errors.Invalid, err) {
			t.Errorf("%+v: %v, want Invalid", l, err)
		}
	}
	if got := (Layout{K: 8, M: 4}).Overhead(); got != 1.5 {
		t.Errorf("8+4 overhead %v", got)
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(Header{Volume: 3, Layout: Layout{K: 4, M: 2, Cell: DefaultCell, Size: 12345}, Index: 5}.marshal())
	f.Add(make([]byte, headerSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		if h.Layout.Validate() != nil || h.Index < 0 || h.Index >= h.Layout.K+h.Layout.M {
			t.Fatalf("accepted a header with a bad layout: %+v", h)
		}
		if !bytes.Equal(h.marshal(), b[:headerSize]) {
			t.Fatalf("header does not round-trip: %+v", h)
		}
	})
}

// BenchmarkEncode is the encoding throughput of a sealed volume (issue:
// at least 300 MB/s on this machine).
func BenchmarkEncode(b *testing.B) {
	for _, c := range []struct{ k, m int }{{4, 2}, {8, 4}} {
		b.Run(fmtCode(c.k, c.m), func(b *testing.B) {
			data := randomBytes(rand.New(rand.NewPCG(1, 1)), 64<<20)
			l := Layout{K: c.k, M: c.m, Cell: DefaultCell, Size: int64(len(data))}
			ws := make([]io.Writer, c.k+c.m)
			for i := range ws {
				ws[i] = io.Discard
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := Encode(bytes.NewReader(data), 1, l, ws); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead155K reads a 155 KiB range straight from its shard and
// rebuilt with that shard lost (issue: rebuilt at least 0.3x healthy).
func BenchmarkRead155K(b *testing.B) {
	data := randomBytes(rand.New(rand.NewPCG(2, 2)), 32<<20)
	l, files := encoded(b, data, 8, 4, DefaultCell)
	off := int64(3*DefaultCell + 1000)
	for _, lost := range []bool{false, true} {
		name := "healthy"
		var missing []int
		if lost {
			name = "shard-lost"
			missing = []int{l.Pieces(off, 1)[0].Shard}
		}
		b.Run(name, func(b *testing.B) {
			r := reader(b, l, files, missing...)
			p := make([]byte, 155<<10)
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := r.ReadAt(p, off); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func fmtCode(k, m int) string { return fmt.Sprintf("%d+%d", k, m) }

func FuzzParseIndex(f *testing.F) {
	f.Add(MarshalIndex(7, []Needle{{Key: 1, Data: 88, Size: 100}, {Key: 5, Data: 4096, Size: 0}}))
	f.Add(MarshalIndex(1, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		vol, ns, err := ParseIndex(b)
		if err != nil {
			return
		}
		for i, n := range ns {
			if n.Key == 0 || i > 0 && n.Key <= ns[i-1].Key || n.Data < 0 || n.Size < 0 {
				t.Fatalf("accepted a bad entry %+v", n)
			}
		}
		if !bytes.Equal(MarshalIndex(vol, ns), b) {
			t.Fatal("index does not round-trip")
		}
	})
}

func TestIndexFind(t *testing.T) {
	ns := []Needle{{Key: 2, Data: 100, Size: 10}, {Key: 9, Data: 2 << 20, Size: 5}}
	vol, got, err := ParseIndex(MarshalIndex(3, ns))
	if err != nil || vol != 3 || len(got) != 2 {
		t.Fatalf("round trip: %v %d %v", err, vol, got)
	}
	l := Layout{K: 4, M: 2, Cell: 1 << 20, Size: 8 << 20}
	for _, c := range []struct {
		key  uint64
		ok   bool
		home int
	}{{2, true, 0}, {9, true, 2}, {3, false, 0}} {
		n, ok := Find(got, c.key)
		if ok != c.ok || ok && l.Home(n) != c.home {
			t.Errorf("key %d: found %v home %d, want %v %d", c.key, ok, l.Home(n), c.ok, c.home)
		}
	}
	b := MarshalIndex(3, ns)
	b[20] ^= 1
	if _, _, err := ParseIndex(b); err == nil {
		t.Error("a damaged index parsed")
	}
}

func TestPacked(t *testing.T) {
	src := randomBytes(rand.New(rand.NewPCG(11, 12)), 1000)
	segs := []Segment{{At: 0, Src: 0, N: 10}, {At: 10, Src: 500, N: 100}, {At: 200, Src: 20, N: 50}}
	want := make([]byte, 300)
	for _, s := range segs {
		copy(want[s.At:], src[s.Src:s.Src+s.N])
	}
	p, err := NewPacked(bytes.NewReader(src), segs, 300)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(0); off < 300; off += 7 {
		for _, n := range []int64{1, 13, 90, 300} {
			b := bytes.Repeat([]byte{0xEE}, int(n))
			got, err := p.ReadAt(b, off)
			wantN := min(n, 300-off)
			if int64(got) != wantN || (err != nil && err != io.EOF) || !bytes.Equal(b[:got], want[off:off+wantN]) {
				t.Fatalf("ReadAt(%d, %d) = %d, %v; bytes differ: %v", off, n, got, err, !bytes.Equal(b[:got], want[off:off+int64(got)]))
			}
		}
	}
	if _, err := NewPacked(bytes.NewReader(src), []Segment{{At: 10, N: 5}, {At: 12, N: 1}}, 100); err == nil {
		t.Error("overlapping segments accepted")
	}
}

// asker is a shard read through Ask (as a peer's is); fail makes its
// answers errors.
type asker struct {
	s     *Shard
	fail  bool
	asked *int
}

func (a asker) ReadAt(p []byte, off int64) (int, error) {
	panic("an asker read with ReadAt by a rebuild")
}

func (a asker) Ask(p []byte, off int64) func() error {
	*a.asked++
	if a.fail {
		return func() error { return errors.E(errors.IO, "peer gone") }
	}
	_, err := a.s.ReadAt(p, off)
	return func() error { return err }
}

// plain hides a shard's type: a shard neither local nor an Asker.
type plain struct{ io.ReaderAt }

// TestRebuildAskers rebuilds ranges of a lost shard from local shards,
// shards asked ahead (Asker) and shards that are neither, with askers
// that fail: the range reads back, and failed askers are made up for by
// the next shards.
func TestRebuildAskers(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(9, 10)), 100_000)
	l, files := encoded(t, data, 4, 2, 1024)
	for _, failing := range [][]int{nil, {1}, {4}} {
		asked := 0
		shards := make([]io.ReaderAt, 6)
		for i := 1; i < 6; i++ { // shard 0 lost
			s, err := OpenShard(bytes.NewReader(files[i]), l.FileSize())
			if err != nil {
				t.Fatal(err)
			}
			switch i {
			case 2:
				shards[i] = s
			case 3:
				shards[i] = plain{s}
			default:
				shards[i] = asker{s: s, fail: contains(failing, i), asked: &asked}
			}
		}
		r, err := NewReader(l, shards)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 700)
		for _, off := range []int64{0, 4096, 4096*4 + 100, 90_000} {
			n, err := r.ReadAt(p, off)
			if err != nil || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
				t.Fatalf("askers failing %v: ReadAt(%d): %v, bytes equal %v", failing, off, err, bytes.Equal(p[:n], data[off:off+int64(n)]))
			}
		}
		if asked == 0 {
			t.Fatalf("askers failing %v: no shard asked ahead", failing)
		}
	}
	// Three failing: only three shards are left.
	shards := make([]io.ReaderAt, 6)
	asked := 0
	for i := 1; i < 6; i++ {
		s, _ := OpenShard(bytes.NewReader(files[i]), l.FileSize())
		shards[i] = asker{s: s, fail: i <= 3, asked: &asked}
	}
	r, _ := NewReader(l, shards)
	if _, err := r.ReadAt(make([]byte, 100), 0); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("rebuild with 2 of 4 shards answering: %v, want Unavailable", err)
	}
}

// lendFile is a shard file that lends its bytes in place (as a mapped
// file does), counting loans and their returns.
type lendFile struct {
	*bytes.Reader
	b           []byte
	lent, given *int
}

func (f lendFile) Lend(off, n int64) ([]byte, func(), bool) {
	*f.lent++
	return f.b[off : off+n : off+n], func() { *f.given++ }, true
}

// TestRebuildLends rebuilds ranges of a lost shard from shard files that
// lend their bytes: the ranges read back, every loan is returned, and
// the lent bytes are never written, neither by the rebuild nor by later
// rebuilds that reuse its buffers (the pool must not keep a loan).
func TestRebuildLends(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(13, 14)), 100_000)
	l, files := encoded(t, data, 4, 2, 1024)
	orig := make([][]byte, len(files))
	for i, f := range files {
		orig[i] = bytes.Clone(f)
	}
	lent, given := 0, 0
	shards := make([]io.ReaderAt, 6)
	for i := 1; i < 6; i++ { // shard 0 lost
		s, err := OpenShard(lendFile{bytes.NewReader(files[i]), files[i], &lent, &given}, l.FileSize())
		if err != nil {
			t.Fatal(err)
		}
		shards[i] = s
	}
	lending, err := NewReader(l, shards)
	if err != nil {
		t.Fatal(err)
	}
	plain := reader(t, l, files, 0) // shards read with ReadAt, into pooled rows
	p := make([]byte, 900)
	for round := range 3 {
		for _, r := range []*Reader{lending, plain} {
			for _, off := range []int64{0, 4096, 4096*4 + 100, 90_000} {
				n, err := r.ReadAt(p, off)
				if err != nil || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
					t.Fatalf("round %d: ReadAt(%d): %v, bytes equal %v", round, off, err, bytes.Equal(p[:n], data[off:off+int64(n)]))
				}
				// The rows pooled after the read hold no loan.
				bufs := rowBufs.Get().(*[MaxShards][]byte)
				for _, row := range bufs {
					for i, f := range files {
						if aliases(row, f) {
							t.Fatalf("round %d: ReadAt(%d): a pooled row is a loan from shard %d", round, off, i)
						}
					}
				}
				rowBufs.Put(bufs)
			}
		}
	}
	if lent == 0 || lent != given {
		t.Fatalf("%d loans, %d returned", lent, given)
	}
	for i := range files {
		if !bytes.Equal(files[i], orig[i]) {
			t.Fatalf("shard %d's lent bytes were written", i)
		}
	}
}

// aliases reports whether a's capacity and b share memory.
func aliases(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
}

// failAfter is a writer that fails once it has taken n bytes.
type failAfter struct {
	n   int
	got int
}

func (w *failAfter) Write(b []byte) (int, error) {
	if w.got+len(b) > w.n {
		return 0, io.ErrClosedPipe
	}
	w.got += len(b)
	return len(b), nil
}

// failingReader fails every read from off on.
type failingReader struct {
	io.ReaderAt
	off int64
}

func (r failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.off {
		return 0, io.ErrUnexpectedEOF
	}
	return r.ReaderAt.ReadAt(p, off)
}

// TestEncodeFails: a shard writer that fails, or a source that does, ends
// the encode with the error, and no shard gets its footer (a shard cut
// short must not look finished); every writer's goroutine is done when
// Encode returns (the buffers go back to the pool).
func TestEncodeFails(t *testing.T) {
	data := randomBytes(rand.New(rand.NewPCG(5, 6)), 300_000)
	l := Layout{K: 4, M: 2, Cell: 4096, Size: int64(len(data))}
	for _, c := range []struct {
		name    string
		src     io.ReaderAt
		failing int // writer that fails, -1 none
	}{
		{"writer", bytes.NewReader(data), 4},
		{"source", failingReader{bytes.NewReader(data), 100_000}, -1},
	} {
		ws := make([]io.Writer, 6)
		bufs := make([]*bytes.Buffer, 6)
		for i := range ws {
			bufs[i] = new(bytes.Buffer)
			ws[i] = bufs[i]
		}
		if c.failing >= 0 {
			ws[c.failing] = &failAfter{n: 32 + 3*4096}
		}
		err := Encode(c.src, 1, l, ws)
		if !errors.Is(errors.IO, err) {
			t.Fatalf("%s failing: %v, want an IO error", c.name, err)
		}
		for i, b := range bufs {
			if i != c.failing && int64(b.Len()) >= l.FileSize() {
				t.Fatalf("%s failing: shard %d written whole (%d bytes)", c.name, i, b.Len())
			}
		}
	}
}
