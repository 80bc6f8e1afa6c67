package fusefs_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFsx is an fsx-style test: random writes, reads, truncates, mmap
// reads and writes, hole punches, fsyncs and reopens of one file on the
// mount, each checked against an in-memory model. The operations run in
// a child process (a page fault on the mount must not stop the process
// serving it; see TestPOSIX/mmap). CAIRN_FSX_OPS sets the number of
// operations (default 3,000; the run is 100,000), CAIRN_FSX_SEED
// the seed.
func TestFsx(t *testing.T) {
	srv := store(t)
	dir, _ := mount(t, srv, "data", nil)
	ops, seed := os.Getenv("CAIRN_FSX_OPS"), os.Getenv("CAIRN_FSX_SEED")
	if ops == "" {
		ops = "3000"
	}
	if seed == "" {
		seed = "1"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFsxChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CAIRN_FSX_CHILD="+filepath.Join(dir, "fsx"), "CAIRN_FSX_OPS="+ops, "CAIRN_FSX_SEED="+seed)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if ops != "3000" {
		// A long run shows its progress as it goes (ops/s over time).
		cmd.Stdout = io.MultiWriter(&out, os.Stderr)
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("fsx: %v\n%s", err, out.Bytes())
	}
	t.Logf("%s", bytes.TrimSpace(out.Bytes()))
}

// TestFsxChild is TestFsx's child process (it does nothing in a normal run).
func TestFsxChild(t *testing.T) {
	p := os.Getenv("CAIRN_FSX_CHILD")
	if p == "" {
		return
	}
	ops, err := strconv.Atoi(os.Getenv("CAIRN_FSX_OPS"))
	must(t, err)
	seed, err := strconv.ParseUint(os.Getenv("CAIRN_FSX_SEED"), 10, 64)
	must(t, err)
	fsx(t, p, ops, seed)
}

// noEINTR runs a raw system call again while a signal interrupts it (the
// Go runtime's preemption signals reach a call that waits on the mount);
// os.File's methods do this themselves, x/sys/unix's do not.
func noEINTR(call func() error) error {
	for {
		if err := call(); err != unix.EINTR {
			return err
		}
	}
}

func fsx(t *testing.T, p string, ops int, seed uint64) {
	const maxSize = 1 << 20
	rng := rand.New(rand.NewPCG(seed, 15))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	must(t, err)
	defer func() { f.Close() }()
	var model []byte
	counts := map[string]int{}
	check := func(step int, what string, off int64, got []byte) {
		want := model[off : off+int64(len(got))]
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && got[i] == want[i] {
				i++
			}
			t.Fatalf("step %d %s at %d+%d: first difference at %d (got %#x, want %#x); %v", step, what, off, len(got), off+int64(i), got[i], want[i], counts)
		}
	}
	start, last := time.Now(), time.Now()
	for step := 0; step < ops; step++ {
		if step > 0 && step%1000 == 0 {
			now := time.Now()
			fmt.Printf("fsx: %d operations, %.0f s, %.1f ops/s over the last 1000\n", step, now.Sub(start).Seconds(), 1000/now.Sub(last).Seconds())
			last = now
		}
		size := int64(len(model))
		switch op := rng.IntN(20); {
		case op < 6: // write
			off := rng.Int64N(maxSize)
			buf := make([]byte, 1+rng.IntN(64<<10))
			for i := range buf {
				buf[i] = byte(rng.Uint32()) | 1
			}
			_, err := f.WriteAt(buf, off)
			must(t, err)
			if end := off + int64(len(buf)); end > size {
				model = append(model, make([]byte, end-size)...)
			}
			copy(model[off:], buf)
			counts["write"]++
		case op < 11: // read
			if size == 0 {
				continue
			}
			off := rng.Int64N(size)
			n := min(int64(1+rng.IntN(64<<10)), size-off)
			buf := make([]byte, n)
			k, err := f.ReadAt(buf, off)
			if err != nil && int64(k) != n {
				t.Fatalf("step %d read at %d+%d: %d bytes, %v", step, off, n, k, err)
			}
			check(step, "read", off, buf)
			counts["read"]++
		case op < 13: // truncate
			sz := rng.Int64N(maxSize)
			must(t, f.Truncate(sz))
			if sz > size {
				model = append(model, make([]byte, sz-size)...)
			}
			model = model[:sz]
			counts["truncate"]++
		case op < 15: // mmap read
			if size == 0 {
				continue
			}
			m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
			must(t, err)
			off := rng.Int64N(size)
			n := min(int64(1+rng.IntN(64<<10)), size-off)
			got := append([]byte(nil), m[off:off+n]...)
			must(t, unix.Munmap(m))
			check(step, "mapread", off, got)
			counts["mapread"]++
		case op < 17: // mmap write (within the size: a map cannot grow a file)
			if size == 0 {
				continue
			}
			m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			must(t, err)
			off := rng.Int64N(size)
			n := min(int64(1+rng.IntN(16<<10)), size-off)
			for i := off; i < off+n; i++ {
				b := byte(rng.Uint32()) | 1
				m[i], model[i] = b, b
			}
			must(t, noEINTR(func() error { return unix.Msync(m, unix.MS_SYNC) }))
			must(t, unix.Munmap(m))
			counts["mapwrite"]++
		case op < 18: // punch a hole
			if size == 0 {
				continue
			}
			off := rng.Int64N(size)
			n := 1 + rng.Int64N(128<<10)
			must(t, noEINTR(func() error {
				return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
			}))
			clear(model[off:min(off+n, size)])
			counts["punch"]++
		case op < 19: // fsync
			must(t, f.Sync())
			counts["fsync"]++
		default: // close and reopen
			must(t, f.Close())
			f, err = os.OpenFile(p, os.O_RDWR, 0)
			must(t, err)
			counts["reopen"]++
		}
		st, err := f.Stat()
		must(t, err)
		if st.Size() != int64(len(model)) {
			t.Fatalf("step %d: size %d, model %d; %v", step, st.Size(), len(model), counts)
		}
	}
	must(t, f.Close())
	got, err := os.ReadFile(p)
	must(t, err)
	if !bytes.Equal(got, model) {
		t.Fatalf("final content differs (%d vs %d bytes)", len(got), len(model))
	}
	fmt.Printf("fsx: %d operations clean (seed %d): %v\n", ops, seed, counts)
}
