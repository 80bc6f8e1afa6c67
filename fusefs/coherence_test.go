package fusefs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"cairn/client"
)

func names(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// TestTwoMounts changes files on mount A and checks that mount B sees
// each change at once: B's kernel and mount caches hold every entry with
// long timeouts, so only the session's invalidations can make it right.
func TestTwoMounts(t *testing.T) {
	srv := store(t)
	a, ma := mount(t, srv, "data", nil)
	b, mb := mount(t, srv, "data", nil)

	must(t, os.MkdirAll(filepath.Join(a, "d"), 0o755))
	must(t, os.WriteFile(filepath.Join(a, "d", "f"), []byte("v1"), 0o644))
	// Warm B: listing, attributes, content.
	if got := names(t, filepath.Join(b, "d")); got != "f" {
		t.Fatalf("B lists %q", got)
	}
	if got := readFile(t, filepath.Join(b, "d", "f")); got != "v1" {
		t.Fatalf("B reads %q", got)
	}
	stB := func(p string) *syscall.Stat_t {
		st, err := os.Stat(filepath.Join(b, p))
		must(t, err)
		return st.Sys().(*syscall.Stat_t)
	}
	stB("d/f")

	// write + close on A: B's stat and read see the new size and bytes.
	must(t, os.WriteFile(filepath.Join(a, "d", "f"), []byte("version two"), 0o644))
	if st := stB("d/f"); st.Size != 11 {
		t.Fatalf("B size after write: %d", st.Size)
	}
	if got := readFile(t, filepath.Join(b, "d", "f")); got != "version two" {
		t.Fatalf("B reads after write: %q", got)
	}

	// chmod
	must(t, os.Chmod(filepath.Join(a, "d", "f"), 0o600))
	if st := stB("d/f"); st.Mode&0o777 != 0o600 {
		t.Fatalf("B mode after chmod: %o", st.Mode)
	}

	// create: B's listing (and its cached negative lookup) see it.
	_, err := os.Stat(filepath.Join(b, "d", "g"))
	if !os.IsNotExist(err) {
		t.Fatalf("g before create: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(a, "d", "g"), []byte("G"), 0o644))
	if got := names(t, filepath.Join(b, "d")); got != "f,g" {
		t.Fatalf("B lists after create %q", got)
	}
	if got := readFile(t, filepath.Join(b, "d", "g")); got != "G" {
		t.Fatalf("B reads new file %q", got)
	}

	// rename
	must(t, os.Rename(filepath.Join(a, "d", "f"), filepath.Join(a, "d", "h")))
	if got := names(t, filepath.Join(b, "d")); got != "g,h" {
		t.Fatalf("B lists after rename %q", got)
	}
	if _, err := os.Stat(filepath.Join(b, "d", "f")); !os.IsNotExist(err) {
		t.Fatalf("B stat of renamed-away name: %v", err)
	}
	if got := readFile(t, filepath.Join(b, "d", "h")); got != "version two" {
		t.Fatalf("B reads renamed %q", got)
	}

	// unlink
	must(t, os.Remove(filepath.Join(a, "d", "g")))
	if _, err := os.Stat(filepath.Join(b, "d", "g")); !os.IsNotExist(err) {
		t.Fatalf("B stat of unlinked: %v", err)
	}
	if got := names(t, filepath.Join(b, "d")); got != "h" {
		t.Fatalf("B lists after unlink %q", got)
	}

	// And the other way round, with a directory rename.
	must(t, os.Rename(filepath.Join(b, "d"), filepath.Join(b, "e")))
	if got := names(t, a); !strings.Contains(got, "e") || strings.Contains(got, "d") {
		t.Fatalf("A lists after B's rename %q", got)
	}
	if got := readFile(t, filepath.Join(a, "e", "h")); got != "version two" {
		t.Fatalf("A reads under renamed dir %q", got)
	}

	// close() on A leaves its commit behind; B and the object API must
	// still see every closed file at once (meta recalls A's commits first).
	must(t, os.Mkdir(filepath.Join(a, "burst"), 0o755))
	for i := 0; i < 40; i++ {
		p := filepath.Join("burst", fmt.Sprintf("f%d", i))
		want := strings.Repeat(fmt.Sprint(i), 1000+i*37)
		must(t, os.WriteFile(filepath.Join(a, p), []byte(want), 0o644))
		must(t, os.Chmod(filepath.Join(a, p), 0o640))
		if i%2 == 0 {
			if got := readFile(t, filepath.Join(b, p)); got != want {
				t.Fatalf("B reads %s: %d bytes, want %d", p, len(got), len(want))
			}
			if st := stB(p); st.Mode&0o777 != 0o640 {
				t.Fatalf("B mode of %s: %o", p, st.Mode&0o777)
			}
		} else {
			f, err := srv.Client().StatFresh(t.Context(), "data", p)
			if err != nil || f.Size() != int64(len(want)) || f.Inode.Mode != 0o640 {
				t.Fatalf("object API sees %s as %v, %v", p, f, err)
			}
		}
	}
	if ma.Stats().Op("writebehind").Calls.Load() == 0 {
		t.Error("no close was written behind")
	}

	// Warm lookups cost B no meta call.
	before := mb.Stats().Op("lookup").Meta.Load()
	for i := 0; i < 100; i++ {
		stB("e/h")
	}
	if d := mb.Stats().Op("lookup").Meta.Load() - before; d != 0 {
		t.Fatalf("warm stats cost %d meta lookups", d)
	}
}

// TestGatewayWriteSeenByMount overwrites a file through the server's own
// client, the path the HTTP and S3 APIs of `cairn server` take (meta called
// in-process, meta.Local): the answer must wait until the mount dropped
// what it cached, so the mount reads the new bytes at once.
func TestGatewayWriteSeenByMount(t *testing.T) {
	srv := store(t)
	m, _ := mount(t, srv, "data", nil)
	must(t, os.WriteFile(filepath.Join(m, "f"), []byte("one"), 0o644))
	for round := range 20 {
		if got := readFile(t, filepath.Join(m, "f")); got == "" {
			t.Fatalf("round %d: empty read", round)
		}
		want := fmt.Sprintf("written through the gateway, round %d", round)
		if _, err := srv.Client().Put(context.Background(), "data", "f", strings.NewReader(want), client.PutOptions{SizeHint: -1}); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(m, "f")); got != want {
			t.Fatalf("round %d: the mount reads %q, want %q", round, got, want)
		}
	}
}

// TestOwnDeletesKeepCaches: removing files is this mount's own change, so
// the events of the deletions must not drop the directory's cached
// attributes: rm -r made a Resolve of the directory per file (the kernel
// checks permission on it before each unlink).
func TestOwnDeletesKeepCaches(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	d := filepath.Join(dir, "d")
	must(t, os.Mkdir(d, 0o755))
	const n = 100
	for i := range n {
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprint(i)), []byte("x"), 0o644))
	}
	m.Sync()
	ga := m.Stats().Op("getattr")
	before := ga.Meta.Load()
	for i := range n {
		must(t, os.Remove(filepath.Join(d, fmt.Sprint(i))))
	}
	if got := ga.Meta.Load() - before; got > n/10 {
		t.Fatalf("%d meta calls for getattr while removing %d files", got, n)
	}
	if names(t, d) != "" {
		t.Fatalf("d still lists %q", names(t, d))
	}
}
