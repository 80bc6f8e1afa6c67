package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAtimeBatched: reading back files written here moves each one's
// atime (relatime: it is not newer than mtime), and meta gets them in a
// few batched calls, not one SetAttr per file read (reading back 5,000
// files paid one meta call per file for it). Meta ends with the atime
// each file showed. An atime set explicitly after a read is stored after
// the read's batch, so it is the one kept.
func TestAtimeBatched(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	peek := peeker(t, srv)
	const n = 64
	name := func(i int) string { return fmt.Sprint("d/f", i) }
	must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	for i := range n {
		must(t, os.WriteFile(filepath.Join(dir, name(i)), []byte(name(i)), 0o644))
	}
	settled(t, m)

	resets := m.Stats().Op("session-reset")
	r0 := resets.Calls.Load()
	_, before, _ := m.Stats().Totals()
	shown := make([]int64, n)
	for i := range n {
		p := filepath.Join(dir, name(i))
		if got := readFile(t, p); got != name(i) {
			t.Fatalf("%s: %q", name(i), got)
		}
		st := lstat(t, p)
		if st.Atim.Nano() <= st.Mtim.Nano() {
			t.Fatalf("%s: a read did not move atime (%d, mtime %d)", name(i), st.Atim.Nano(), st.Mtim.Nano())
		}
		shown[i] = st.Atim.Nano()
	}
	m.Sync() // a recall: every atime gathered is stored
	_, after, _ := m.Stats().Totals()
	if resets.Calls.Load() != r0 {
		t.Skip("the session was reset meanwhile (a loaded machine): opens ask meta then")
	}
	if calls := after - before; calls > n/8 {
		t.Fatalf("reading %d files made %d meta calls (their atimes one by one?)", n, calls)
	}
	for i := range n {
		if got := peek(name(i)).AtimeNs; got != shown[i] {
			t.Fatalf("%s: meta's atime %d, the mount showed %d", name(i), got, shown[i])
		}
	}

	// utimensat after a read whose atime is still gathering: kept.
	p := filepath.Join(dir, "g")
	must(t, os.WriteFile(p, []byte("g"), 0o644))
	settled(t, m)
	readFile(t, p)
	old := time.Now().Add(-72 * time.Hour)
	must(t, os.Chtimes(p, old, old))
	m.Sync()
	if got := peek("g").AtimeNs; got != old.UnixNano() {
		t.Fatalf("meta's atime of g %v after utimensat to %v that followed a read", time.Unix(0, got), old)
	}
	if got := atime(t, p); got != old.UnixNano() {
		t.Fatalf("the mount shows atime %v after utimensat to %v", time.Unix(0, got), old)
	}
}
