package volume

import (
	"fmt"
	"testing"

	"cairn/vfs"
	"cairn/vfs/errorfs"
)

// TestCrashAfterCompaction: a kill -9 after a compaction and more writes
// loses nothing acknowledged: the needles the compaction carried over (the
// volume's oldest) and those written after it read back once reopened.
func TestCrashAfterCompaction(t *testing.T) {
	for _, after := range []int{0, 1, 50} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			fs := errorfs.New(vfs.Default)
			dir := t.TempDir()
			v, err := Create(dir, 7, 1, Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			live := map[uint64][]byte{}
			for i := range 300 {
				d := payload(uint64(i), 100+i*53)
				k, err := v.Append(1, d)
				if err != nil {
					t.Fatal(err)
				}
				live[k] = d
			}
			for k := range live {
				if k%3 != 0 {
					if err := v.Delete(1, k); err != nil {
						t.Fatal(err)
					}
					delete(live, k)
				}
			}
			if err := v.Compact(); err != nil {
				t.Fatal(err)
			}
			for i := range after {
				d := payload(uint64(1000+i), 700)
				k, err := v.Append(1, d)
				if err != nil {
					t.Fatal(err)
				}
				live[k] = d
			}
			if err := fs.Crash(nil); err != nil {
				t.Fatal(err)
			}
			v.Close()
			v2, err := Open(dir, 7, Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			defer v2.Close()
			for k, d := range live {
				mustRead(t, v2, k, d)
			}
		})
	}
}
