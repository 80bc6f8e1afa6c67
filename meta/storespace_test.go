package meta

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"cairn/errors"
	"cairn/proto/metapb"
)

// TestStoreDiskFull: meta's store on a small disk (a 48 MiB tmpfs) that
// fills. Changes are then refused with NoSpace, every change acknowledged
// before stays readable, reads go on; when space returns changes are
// accepted again without a restart; and after a restart every
// acknowledged change is there.
func TestStoreDiskFull(t *testing.T) {
	disk := t.TempDir()
	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, "size=48m,mode=0700"); err != nil {
		t.Fatalf("a small disk for meta (tmpfs; needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(disk, unix.MNT_DETACH) })
	cfg := testConfig(filepath.Join(disk, "meta"), nil)
	cfg.StoreReserve = 4 << 20
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	mkns(t, ts.cl, "full")
	if fi, err := os.Stat(filepath.Join(cfg.Dir, ballastName)); err != nil || fi.Size() != 4<<20 {
		t.Fatalf("the reserve: %v, %v", fi, err)
	}

	// Everything else on the disk is taken.
	filler, err := os.Create(filepath.Join(disk, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := filler.Write(buf); err != nil {
			if !errors.IsErr(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for { // the last pages, smaller than the buffer
		if _, err := filler.Write(buf[:4096]); err != nil {
			break
		}
	}

	// Changes go on until the store's log needs a page the disk does not
	// have: that write takes the reserve, and changes are refused from
	// then on.
	var acked []string
	var refused error
	for i := range 5000 {
		p := fmt.Sprintf("d%04d", i)
		if _, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "full", Path: p}); err != nil {
			refused = err
			break
		}
		acked = append(acked, p)
	}
	if !errors.Is(errors.NoSpace, refused) {
		t.Fatalf("after %d changes on a full disk: %v, want NoSpace", len(acked), refused)
	}
	t.Logf("%d changes acknowledged on the full disk, then: %v", len(acked), refused)
	if _, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "full", Path: "again"}); !errors.Is(errors.NoSpace, err) {
		t.Fatalf("a second change on the full disk: %v", err)
	}
	// Reads go on.
	for _, p := range []string{acked[0], acked[len(acked)-1]} {
		if _, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "full", Path: p}); err != nil {
			t.Fatalf("stat %s on a full disk: %v", p, err)
		}
	}

	// Meta's own writes (here volume records, as heartbeats and repairs
	// write them) go on into the reserve, but only up to a quarter of it;
	// then they too get NoSpace, and the reserve is never used up (which
	// would stop Pebble, and this test with it).
	pad := strings.Repeat("x", 4<<10)
	own := 0
	var ownErr error
	for i := range 10000 { // 40 MiB of records: ten times the reserve
		v := &metapb.Volume{Id: uint32(1000 + i), Servers: []string{pad}}
		if _, ownErr = svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); ownErr != nil {
			break
		}
		own++
	}
	if !errors.Is(errors.NoSpace, ownErr) {
		t.Fatalf("after %d of meta's own writes on a full disk: %v, want NoSpace", own, ownErr)
	}
	if got := int64(own * len(pad)); got > cfg.StoreReserve/4 {
		t.Fatalf("meta wrote %d bytes of its own on a full disk, more than a quarter of its %d-byte reserve", got, cfg.StoreReserve)
	}
	t.Logf("%d of meta's own writes on the full disk, then: %v", own, ownErr)
	if _, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "full", Path: acked[0]}); err != nil {
		t.Fatalf("stat after meta's own writes were refused: %v", err)
	}

	// Space returns: changes are accepted, the reserve is laid down again.
	filler.Close()
	if err := os.Remove(filler.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "full", Path: "after"}); err != nil {
		t.Fatalf("a change once space returned: %v", err)
	}
	acked = append(acked, "after")
	if _, err := svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: &metapb.Volume{Id: 999}}}); err != nil {
		t.Fatalf("meta's own write once space returned: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, ballastName)); err != nil {
		t.Fatalf("the reserve after recovery: %v", err)
	}

	// A restart finds every acknowledged change.
	ts.stop()
	svc2, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts2 := serve(t, svc2)
	for _, p := range acked {
		if _, err := ts2.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "full", Path: p}); err != nil {
			t.Fatalf("after the restart, %s: %v", p, err)
		}
	}
}
