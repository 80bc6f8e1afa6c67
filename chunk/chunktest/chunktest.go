// Package chunktest is the test suite every cairn.Chunks implementation
// must pass: the in-process store and the HTTP client run the same tests.
package chunktest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"cairn"
	"cairn/errors"
)

// MaxVolumeSize and MaxNeedle are what Run expects of the stores that
// newStore returns, so that it can fill a volume quickly.
const (
	MaxVolumeSize = 4 << 20
	MaxNeedle     = 1 << 20
)

// Run tests the implementation. newStore returns an empty store with
// volume size limit MaxVolumeSize and needle limit MaxNeedle; it is called
// once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) cairn.Chunks) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s cairn.Chunks)
	}{
		{"PutRead", testPutRead},
		{"Ranges", testRanges},
		{"Errors", testErrors},
		{"Delete", testDelete},
		{"CreateVolume", testCreateVolume},
		{"Stale", testStale},
		{"ReadOnly", testReadOnly},
		{"Concurrent", testConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// Data returns n reproducible pseudo-random bytes.
func Data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var ctx = context.Background()

func mustCreate(t *testing.T, s cairn.Chunks, vid uint32, gen uint64) {
	t.Helper()
	if err := s.CreateVolume(ctx, vid, gen); err != nil {
		t.Fatalf("CreateVolume(%d, %d): %v", vid, gen, err)
	}
}

func mustPut(t *testing.T, s cairn.Chunks, vid uint32, gen uint64, data []byte) uint64 {
	t.Helper()
	k, err := s.Put(ctx, vid, gen, data)
	if err != nil {
		t.Fatalf("Put(%d, %d bytes): %v", vid, len(data), err)
	}
	return k
}

func read(s cairn.Chunks, vid uint32, key uint64, off, n int64) ([]byte, error) {
	var buf bytes.Buffer
	m, err := s.ReadTo(ctx, vid, key, off, n, &buf)
	if err == nil && m != n {
		return nil, fmt.Errorf("ReadTo returned %d, want %d", m, n)
	}
	if err == nil && int64(buf.Len()) != n {
		return nil, fmt.Errorf("ReadTo wrote %d bytes, want %d", buf.Len(), n)
	}
	return buf.Bytes(), err
}

func testPutRead(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 1, 1)
	want := map[uint64][]byte{}
	for i, n := range []int{0, 1, 4096, 65535, 65536, 65537, 155 << 10, MaxNeedle} {
		d := Data(uint64(i), n)
		k := mustPut(t, s, 1, 1, d)
		if _, dup := want[k]; dup {
			t.Fatalf("key %d returned twice", k)
		}
		want[k] = d
	}
	for k, d := range want {
		got, err := read(s, 1, k, 0, int64(len(d)))
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("key %d (%d bytes): %v", k, len(d), err)
		}
	}
}

func testRanges(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 2, 1)
	d := Data(9, 3*65536+1234)
	k := mustPut(t, s, 2, 1, d)
	N := int64(len(d))
	for _, r := range [][2]int64{
		{0, N}, {0, 1}, {N - 1, 1}, {N, 0}, {0, 0}, {65535, 2}, {65536, 65536},
		{100, 190000}, {N - 1234, 1234}, {1, N - 1},
	} {
		got, err := read(s, 2, k, r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		if !bytes.Equal(got, d[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %v: wrong bytes", r)
		}
	}
	for _, r := range [][2]int64{{0, N + 1}, {N, 1}, {N + 1, 0}, {N - 10, 11}, {-1, 5}} {
		if _, err := read(s, 2, k, r[0], r[1]); !errors.Is(errors.Range, err) {
			t.Errorf("range %v: got %v, want Range", r, err)
		}
	}
}

func testErrors(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 3, 1)
	k := mustPut(t, s, 3, 1, []byte("x"))
	if _, err := read(s, 3, k+1000, 0, 1); !errors.Is(errors.NotExist, err) {
		t.Errorf("missing needle: %v", err)
	}
	if _, err := read(s, 99, k, 0, 1); !errors.Is(errors.NotExist, err) {
		t.Errorf("missing volume: %v", err)
	}
	if _, err := s.Put(ctx, 99, 1, []byte("x")); !errors.Is(errors.NotExist, err) {
		t.Errorf("put to missing volume: %v", err)
	}
	if _, err := s.Put(ctx, 3, 1, make([]byte, MaxNeedle+1)); !errors.Is(errors.TooLarge, err) {
		t.Errorf("oversized needle: %v", err)
	}
	// Errors keep their path through every implementation.
	_, err := read(s, 3, k+1000, 0, 1)
	if p := errors.PathOf(err); p == "" {
		t.Errorf("NotExist error %v has no path", err)
	}
}

func testDelete(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 4, 1)
	k := mustPut(t, s, 4, 1, []byte("doomed"))
	k2 := mustPut(t, s, 4, 1, []byte("kept"))
	if err := s.Delete(ctx, 4, 1, k); err != nil {
		t.Fatal(err)
	}
	if _, err := read(s, 4, k, 0, 1); !errors.Is(errors.NotExist, err) {
		t.Errorf("read after delete: %v", err)
	}
	if err := s.Delete(ctx, 4, 1, k); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if err := s.Delete(ctx, 4, 1, 123456); err != nil {
		t.Errorf("delete of a needle never written: %v", err)
	}
	if got, err := read(s, 4, k2, 0, 4); err != nil || string(got) != "kept" {
		t.Errorf("other needle: %q %v", got, err)
	}
	if k3 := mustPut(t, s, 4, 1, nil); k3 == k || k3 == k2 {
		t.Errorf("key %d reused", k3)
	}
}

func testCreateVolume(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 5, 3)
	k := mustPut(t, s, 5, 3, []byte("v"))
	mustCreate(t, s, 5, 3) // idempotent, and keeps the data
	if got, err := read(s, 5, k, 0, 1); err != nil || string(got) != "v" {
		t.Fatalf("after re-create: %q %v", got, err)
	}
	if err := s.CreateVolume(ctx, 5, 2); !errors.Is(errors.Stale, err) {
		t.Errorf("create at an older generation: %v", err)
	}
	mustCreate(t, s, 5, 4) // meta moved the volume on
	if _, err := s.Put(ctx, 5, 3, []byte("old gen")); !errors.Is(errors.Stale, err) {
		t.Errorf("put at the replaced generation: %v", err)
	}
	mustPut(t, s, 5, 4, []byte("new gen"))
}

func testStale(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 6, 7)
	k := mustPut(t, s, 6, 7, []byte("x"))
	if _, err := s.Put(ctx, 6, 6, []byte("x")); !errors.Is(errors.Stale, err) {
		t.Errorf("put, old gen: %v", err)
	}
	if _, err := s.Put(ctx, 6, 8, []byte("x")); !errors.Is(errors.Stale, err) {
		t.Errorf("put, future gen: %v", err)
	}
	if err := s.Delete(ctx, 6, 6, k); !errors.Is(errors.Stale, err) {
		t.Errorf("delete, old gen: %v", err)
	}
	if _, err := read(s, 6, k, 0, 1); err != nil {
		t.Errorf("needle gone after a refused delete: %v", err)
	}
}

func testReadOnly(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 7, 1)
	d := Data(1, MaxNeedle/2)
	var keys []uint64
	for i := 0; ; i++ {
		k, err := s.Put(ctx, 7, 1, d)
		if errors.Is(errors.ReadOnly, err) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		if i > 2*MaxVolumeSize/len(d) {
			t.Fatalf("volume took %d needles of %d bytes, limit is %d", i, len(d), MaxVolumeSize)
		}
	}
	if len(keys) == 0 {
		t.Fatal("volume full before any needle")
	}
	// Full still serves reads and takes deletes.
	if got, err := read(s, 7, keys[0], 0, 10); err != nil || !bytes.Equal(got, d[:10]) {
		t.Fatalf("read from full volume: %v", err)
	}
	if err := s.Delete(ctx, 7, 1, keys[0]); err != nil {
		t.Fatalf("delete in full volume: %v", err)
	}
	// Another volume still takes writes.
	mustCreate(t, s, 8, 1)
	mustPut(t, s, 8, 1, d)
}

func testConcurrent(t *testing.T, s cairn.Chunks) {
	mustCreate(t, s, 9, 1)
	const workers, each = 16, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	all := map[uint64][]byte{}
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := Data(uint64(w*1000+i), 100+(w*each+i)*37%9000)
				k, err := s.Put(ctx, 9, 1, d)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := read(s, 9, k, 0, int64(len(d)))
				if err != nil || !bytes.Equal(got, d) {
					t.Errorf("read own write %d: %v", k, err)
					return
				}
				mu.Lock()
				if _, dup := all[k]; dup {
					t.Errorf("key %d given twice", k)
				}
				all[k] = d
				mu.Unlock()
				if i%5 == 0 {
					if err := s.Delete(ctx, 9, 1, k); err != nil {
						t.Error(err)
					}
					mu.Lock()
					delete(all, k)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for k, d := range all {
		got, err := read(s, 9, k, 0, int64(len(d)))
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("key %d: %v", k, err)
		}
	}
}
