package fusefs_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cerrors "cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestPackedSmallFiles: small files created at the same time are
// committed in groups that share a needle. Every file reads back whole
// through the store's own client, and removing some of them leaves the
// others' bytes in place after the garbage collector has run.
func TestPackedSmallFiles(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	// A file committed alone, removed below with the even ones: its
	// needle surely becomes garbage.
	must(t, os.WriteFile(filepath.Join(dir, "solo"), []byte("alone"), 0o644))
	m.Sync()
	content := func(i int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("file %d;", i)), i%50) // 0 to ~400 bytes, some empty
	}
	const files, writers = 400, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += writers {
				if err := os.WriteFile(filepath.Join(dir, "d", fmt.Sprint(i)), content(i), 0o640); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	m.Sync()

	// Files share needles. owners: needle -> the files pointing into it.
	cl := srv.Client()
	type needle struct {
		vol uint32
		key uint64
	}
	owners := map[needle][]string{}
	resolve := func(p string) *metapb.ResolveResponse {
		r, err := cl.Meta().Resolve(t.Context(), &metapb.ResolveRequest{Ns: "data", Path: p, WantExtents: true})
		must(t, err)
		for _, e := range r.Extents {
			nd := needle{e.Volume, e.Key}
			owners[nd] = append(owners[nd], p)
		}
		return r
	}
	resolve("solo")
	for i := range files {
		r := resolve(fmt.Sprintf("d/%d", i))
		if r.Inode.Size != uint64(len(content(i))) || r.Inode.Mode != 0o640 {
			t.Fatalf("file %d: size %d mode %o, want %d and 640", i, r.Inode.Size, r.Inode.Mode, len(content(i)))
		}
	}
	shared := 0
	for _, o := range owners {
		if len(o) > 1 {
			shared++
		}
	}
	if shared == 0 {
		t.Fatalf("no needle holds more than one file (%d needles)", len(owners))
	}
	t.Logf("%d needles for %d files, %d of them shared", len(owners), files, shared)

	check := func(i int) {
		t.Helper()
		f, err := cl.StatFresh(t.Context(), "data", fmt.Sprintf("d/%d", i))
		must(t, err)
		got, err := cl.ReadAll(t.Context(), f)
		must(t, err)
		if !bytes.Equal(got, content(i)) {
			t.Fatalf("file %d reads %q", i, got)
		}
	}
	for i := range files {
		check(i)
	}
	// Remove solo and the even files. The needles only they pointed into
	// become garbage; the others must keep every byte.
	removed := map[string]bool{"solo": true}
	for i := 0; i < files; i += 2 {
		removed[fmt.Sprintf("d/%d", i)] = true
	}
	for p := range removed {
		must(t, os.Remove(filepath.Join(dir, p)))
	}
	exists := func(nd needle) bool {
		_, err := cl.ReadNeedle(t.Context(), nd.vol, nd.key, 0, 1, io.Discard)
		if err != nil && !cerrors.Is(cerrors.NotExist, err) {
			t.Fatal(err)
		}
		return err == nil
	}
	var doomed, kept []needle
	for nd, o := range owners {
		all := true
		for _, p := range o {
			all = all && removed[p]
		}
		if all {
			doomed = append(doomed, nd)
		} else {
			kept = append(kept, nd)
		}
	}
	for _, nd := range doomed {
		await.Until(t, 20*time.Second, fmt.Sprintf("the collection of needle %v of removed files only", nd),
			func() bool { return !exists(nd) })
	}
	for _, nd := range kept {
		if !exists(nd) {
			t.Fatalf("needle %v was deleted while %d files still point into it", nd, len(owners[nd]))
		}
	}
	for i := 1; i < files; i += 2 {
		check(i)
	}
}
