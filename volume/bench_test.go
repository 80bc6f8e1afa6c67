package volume

import (
	"bufio"
	"io"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestIndexBytesPerEntry measures the in-memory index: the target is at
// most 32 bytes per needle.
func TestIndexBytesPerEntry(t *testing.T) {
	const n = 1_000_000
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	x := &index{}
	for k := uint64(1); k <= n; k++ {
		x.put(newSlot(joinKey(uint32(k), uint32(k*2654435761)), int64(k*64), 4096))
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	per := float64(m1.HeapAlloc-m0.HeapAlloc) / n
	t.Logf("index: %.1f bytes per entry for %d entries", per, n)
	if per > 32 {
		t.Fatalf("%.1f bytes per entry, over the 32-byte budget", per)
	}
	half := uint64(n / 2)
	if s, ok := x.get(joinKey(uint32(half), uint32(half*2654435761))); !ok || s.off != uint32(half*8) {
		t.Fatal("lookup failed")
	}
	runtime.KeepAlive(x)
}

// writeSynthetic writes a volume of n small needles straight to disk (no
// fsync per needle) so that open time can be measured on a large volume.
func writeSynthetic(t testing.TB, dir string, n int, withIdx bool) {
	t.Helper()
	v, err := Create(dir, 7, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	instance := v.sb.instance
	v.Close()
	dat, idx := FileNames(dir, 7)
	f, _ := os.OpenFile(dat, os.O_WRONLY|os.O_APPEND, 0)
	xf, _ := os.OpenFile(idx, os.O_WRONLY|os.O_TRUNC, 0)
	w, xw := bufio.NewWriterSize(f, 1<<20), bufio.NewWriterSize(xf, 1<<20)
	xw.Write(idxHeader(instance))
	data := []byte("sixteen byte val")
	rec := make([]byte, recordSize(int64(len(data))))
	off := int64(superSize)
	var e [idxEntrySize]byte
	for k := uint64(1); k <= uint64(n); k++ {
		encodeRecord(rec, flagData, k, data)
		w.Write(rec)
		putIdxEntry(e[:], k, off, uint32(len(data)))
		xw.Write(e[:])
		off += int64(len(rec))
	}
	w.Flush()
	xw.Flush()
	f.Close()
	xf.Close()
	if !withIdx {
		os.Remove(idx)
	}
}

// TestOpenTime opens a volume of 1M small needles (100k with -short), from
// its .idx and, with the .idx lost, by verifying every record, and logs
// how long each took (about 1.4 s and 3 s on a quiet machine). The time
// is a figure to read, not an assertion: on a shared machine it swung
// past any bound that would still catch a regression.
func TestOpenTime(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	for _, withIdx := range []bool{true, false} {
		dir := t.TempDir()
		writeSynthetic(t, dir, n, withIdx)
		start := time.Now()
		v, err := Open(dir, 7, Options{})
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Stats().Needles; got != int64(n) {
			t.Fatalf("%d needles, want %d", got, n)
		}
		if got, err := read(t, v, uint64(n), 0, 16); err != nil || string(got) != "sixteen byte val" {
			t.Fatalf("last needle: %q %v", got, err)
		}
		t.Logf("open %d needles (idx present: %v): %v", n, withIdx, d)
		v.Close()
	}
}

// BenchmarkAppend4K: small needles from 32 writers per CPU, as a data
// server with many clients in flight sees them.
func BenchmarkAppend4K(b *testing.B) { benchAppend(b, 4<<10, 32) }

// BenchmarkAppend8M is the streaming write path: whole 8 MiB extents (the
// default extent size) from 4 writers at a time (a client's parallel
// uploads).
func BenchmarkAppend8M(b *testing.B) { benchAppend(b, 8<<20, max(1, 4/runtime.GOMAXPROCS(0))) }

// benchAppend appends needles of size bytes from perCPU writers per CPU,
// each durable before it returns.
func benchAppend(b *testing.B, size, perCPU int) {
	v, _ := newVol(b, Options{MaxSize: 32<<30 - hardMaxNeedle})
	data := payload(1, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.SetParallelism(perCPU)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.Append(1, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/float64(v.Stats().Syncs), "writes/sync")
}

func benchRead(b *testing.B, size int) {
	v, _ := newVol(b, Options{})
	data := payload(1, size)
	var keys []uint64
	for range 64 {
		k, err := v.Append(1, data)
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := v.ReadTo(keys[i%len(keys)], 0, int64(size), io.Discard); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func BenchmarkReadTo4K(b *testing.B)   { benchRead(b, 4<<10) }
func BenchmarkReadTo155K(b *testing.B) { benchRead(b, 155<<10) }
