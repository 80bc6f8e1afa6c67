package volume

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"cairn/errors"
	"cairn/vfs"
	"cairn/vfs/errorfs"
)

// faultVol creates volume 7 on a failing file system over a temporary
// directory. The caller sets the rule once the volume exists.
func faultVol(t *testing.T) (*Volume, *errorfs.FS, string) {
	t.Helper()
	fs := errorfs.New(vfs.Default)
	dir := t.TempDir()
	v, err := Create(dir, 7, 1, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, fs, dir
}

func mustRead(t *testing.T, v *Volume, key uint64, want []byte) {
	t.Helper()
	got, err := read(t, v, key, 0, int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("needle %d: %d bytes, %v; want %d bytes", key, len(got), err, len(want))
	}
}

// A failed fdatasync acknowledges nothing it covered, serves none of it,
// and leaves the volume read-only; what was synced before stays readable.
func TestFailedSyncNotAcknowledged(t *testing.T) {
	v, fs, dir := faultVol(t)
	before := payload(1, 5000)
	k0, err := v.Append(1, before)
	if err != nil {
		t.Fatal(err)
	}
	fs.SetRule(errorfs.Nth(errorfs.Sync, ".dat", 1, syscall.EIO))
	_, err = v.Append(1, payload(2, 7000))
	if !errors.Is(errors.IO, err) {
		t.Fatalf("append whose fdatasync failed: %v, want an IO error", err)
	}
	st := v.Stats()
	if !st.Failed {
		t.Fatalf("stats after a failed fdatasync: %+v", st)
	}
	// The record is in the file but not in the index: never served.
	if _, err := v.Size(k0 + 1); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the unsynced needle: %v, want NotExist", err)
	}
	// No more writes, even though the next fdatasync would succeed.
	if _, err := v.Append(1, payload(3, 10)); !errors.Is(errors.ReadOnly, err) {
		t.Fatalf("append after a failed fdatasync: %v, want ReadOnly", err)
	}
	if err := v.Delete(1, k0); !errors.Is(errors.ReadOnly, err) {
		t.Fatalf("delete after a failed fdatasync: %v, want ReadOnly", err)
	}
	mustRead(t, v, k0, before)

	// Opened again (the failing call is past), the volume takes writes.
	v.Close()
	fs.SetRule(nil)
	v2, err := Open(dir, 7, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	mustRead(t, v2, k0, before)
	if _, err := v2.Append(1, payload(4, 100)); err != nil {
		t.Fatal(err)
	}
}

// A write torn part-way (the device failed, the process died) is cut off
// at the next open; the needles before it are whole, the file ends where
// the last good record does.
func TestTornAppendCutAtOpen(t *testing.T) {
	for _, keep := range []int{1, headerSize - 1, headerSize + 100, 4000} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			v, fs, dir := faultVol(t)
			var keys []uint64
			var datas [][]byte
			for i := range 5 {
				d := payload(uint64(i), 3000+i*700)
				k, err := v.Append(1, d)
				if err != nil {
					t.Fatal(err)
				}
				keys, datas = append(keys, k), append(datas, d)
			}
			end := v.Stats().Size
			fs.SetRule(errorfs.TearNth(".dat", 1, keep))
			if _, err := v.Append(1, payload(99, 5000)); !errors.Is(errors.IO, err) {
				t.Fatalf("torn append: %v, want IO", err)
			}
			fs.SetRule(nil)
			v.Close()
			v2, err := Open(dir, 7, Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			defer v2.Close()
			st := v2.Stats()
			if st.Size != end || st.Truncated != int64(keep) || st.Needles != 5 {
				t.Fatalf("after the torn append: %+v, want size %d, %d bytes cut, 5 needles", st, end, keep)
			}
			for i, k := range keys {
				mustRead(t, v2, k, datas[i])
			}
			k, err := v2.Append(1, []byte("after"))
			if err != nil {
				t.Fatal(err)
			}
			mustRead(t, v2, k, []byte("after"))
		})
	}
}

// A full disk refuses the needle that does not fit (NoSpace, nothing
// published), then every new needle for a while without touching the
// disk; what was there is intact, and the reopened volume is consistent.
func TestNoSpace(t *testing.T) {
	v, fs, dir := faultVol(t)
	disk := errorfs.NewFull(20_000)
	fs.SetRule(disk.Rule)
	var keys []uint64
	var datas [][]byte
	var err error
	for i := 0; err == nil; i++ {
		d := payload(uint64(i), 3000)
		var k uint64
		if k, err = v.Append(1, d); err == nil {
			keys, datas = append(keys, k), append(datas, d)
		}
	}
	if !errors.Is(errors.NoSpace, err) || len(keys) == 0 {
		t.Fatalf("after %d needles: %v, want NoSpace", len(keys), err)
	}
	if st := v.Stats(); !st.NoSpace || st.Failed {
		t.Fatalf("stats of a volume on a full disk: %+v", st)
	}
	disk.Free(1 << 20) // even with space back, the hold keeps writers away
	if _, err := v.Append(1, []byte("x")); !errors.Is(errors.NoSpace, err) {
		t.Fatalf("append during the hold: %v, want NoSpace", err)
	}
	for i, k := range keys {
		mustRead(t, v, k, datas[i])
	}
	v.Close()
	v2, err := Open(dir, 7, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	if st := v2.Stats(); st.Needles != int64(len(keys)) || st.NoSpace {
		t.Fatalf("reopened: %+v, want %d needles", st, len(keys))
	}
	for i, k := range keys {
		mustRead(t, v2, k, datas[i])
	}
	if _, err := v2.Append(1, []byte("space again")); err != nil {
		t.Fatal(err)
	}
}

// A crash loses only what was not acknowledged: writers append and delete
// concurrently, the disk crashes at a random moment (each write since the
// last fdatasync kept or lost at random), and the volume opened afterwards
// must hold every acknowledged needle byte for byte and none that an
// acknowledged delete removed. Many seeds: a property test of the write
// path's commit point against a model.
func TestCrashLosesOnlyUnacknowledged(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashOnce(t, seed) })
	}
}

func crashOnce(t *testing.T, seed uint64) {
	fs := errorfs.New(vfs.Default)
	dir := t.TempDir()
	v, err := Create(dir, 7, 1, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	crashAt := 20 + r.IntN(200) // operations begun before the crash

	var mu sync.Mutex
	live := map[uint64][]byte{} // acknowledged puts not deleted
	deleted := map[uint64]bool{}
	doubtful := map[uint64]bool{} // a delete was begun, not acknowledged: either outcome is right
	begun := 0
	crashed := make(chan struct{})
	var crashErr error
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := rand.New(rand.NewPCG(seed, uint64(w)+10))
			for i := 0; ; i++ {
				mu.Lock()
				begun++
				if begun == crashAt {
					crashErr = fs.Crash(rand.New(rand.NewPCG(seed, 2)))
					close(crashed)
				}
				var victim uint64
				if wr.IntN(4) == 0 {
					for k := range live {
						victim = k
						doubtful[k] = true
						break
					}
				}
				mu.Unlock()
				select {
				case <-crashed:
					return
				default:
				}
				if victim != 0 {
					if err := v.Delete(1, victim); err == nil {
						mu.Lock()
						delete(live, victim)
						delete(doubtful, victim)
						deleted[victim] = true
						mu.Unlock()
					}
					continue
				}
				d := payload(seed<<32|uint64(w)<<20|uint64(i), 1+wr.IntN(20000))
				if k, err := v.Append(1, d); err == nil {
					mu.Lock()
					live[k] = d
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if crashErr != nil {
		t.Fatal(crashErr)
	}
	v.Close() // its files are gone with the crash: errors are expected

	v2, err := Open(dir, 7, Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	for k, d := range live {
		if !doubtful[k] {
			mustRead(t, v2, k, d)
		}
	}
	for k := range deleted {
		if _, err := v2.Size(k); !errors.Is(errors.NotExist, err) {
			t.Fatalf("needle %d, deleted and acknowledged, is back: %v", k, err)
		}
	}
	// Whatever else survived verifies (an unacknowledged write may have
	// reached the disk whole; none may come back damaged).
	for _, n := range v2.Needles() {
		if _, err := read(t, v2, n.Key, 0, n.Size); err != nil {
			t.Fatalf("needle %d after the crash: %v", n.Key, err)
		}
	}
	// And the volume goes on: new keys do not reuse acknowledged ones.
	k, err := v2.Append(1, []byte("after the crash"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := live[k]; ok || deleted[k] {
		t.Fatalf("key %d reused after the crash", k)
	}
}
