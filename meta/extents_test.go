package meta

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"cairn/proto/metapb"
)

// fragment models a mount that overlays random small writes on a file of
// up to 1 MiB and commits the whole list each time, as fsx does: every
// write is a new needle (keys from 1000 up).
type fragment struct {
	rng  *rand.Rand
	exts []*metapb.Extent
	size uint64
	key  uint64
	tag  string
}

func newFragment(seed uint64) *fragment {
	return &fragment{rng: rand.New(rand.NewPCG(seed, 15)), key: 1000}
}

// write lays one random write over the list and returns the commit.
func (f *fragment) write(ns, p string) *metapb.CommitRequest {
	off, n := f.rng.Uint64N(1<<20), 1+f.rng.Uint64N(64<<10)
	f.key++
	f.size = max(f.size, off+n)
	u := ext(off, n, 1, f.key)
	var out []*metapb.Extent
	for _, e := range f.exts {
		for _, r := range [][2]uint64{{e.Offset, min(e.Offset+e.Length, off)}, {max(e.Offset, off+n), e.Offset + e.Length}} {
			if r[0] < r[1] {
				out = append(out, &metapb.Extent{Offset: r[0], Length: r[1] - r[0], Volume: e.Volume, Key: e.Key, NeedleOffset: e.NeedleOffset + r[0] - e.Offset})
			}
		}
	}
	out = append(out, u)
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	f.exts = out
	return &metapb.CommitRequest{Ns: ns, Path: p, Size: f.size, Extents: out, IfMatch: f.tag, Etag: fmt.Sprint("e", f.key)}
}

func (f *fragment) commit(t testing.TB, cl metapb.MetaClient, ns, p string) {
	n, err := cl.Commit(bg, f.write(ns, p))
	if err != nil {
		t.Fatal(err)
	}
	f.tag = n.Etag
}

// BenchmarkCommitFragmented commits random small writes over one file, the
// whole extent list each time (a mount's flush), and resolves it (the next
// reader). Each commit once rewrote every extent key in place, so every
// later read stepped over all the keys earlier commits had deleted: at
// 600 commits a commit took 25 times as long as at 200. Now the cost
// stays flat whatever b.N is: compare ns/op at -benchtime=500x and 5000x.
func BenchmarkCommitFragmented(b *testing.B) {
	ts := start(b, nil)
	mkns(b, ts.cl, "bench")
	f := newFragment(1)
	for range 200 { // a fragmented file to begin with
		f.commit(b, ts.cl, "bench", "frag")
	}
	req := &metapb.ResolveRequest{Ns: "bench", Path: "frag", WantExtents: true}
	b.ResetTimer()
	for range b.N {
		f.commit(b, ts.cl, "bench", "frag")
		if _, err := ts.cl.Resolve(bg, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(f.exts)), "extents")
}

// extentPoints counts the internal keys (live, overwritten or deleted)
// that reading n's extents steps over.
func extentPoints(t *testing.T, svc *Service, n *metapb.Inode) (points uint64, live int) {
	t.Helper()
	p := extentsAt(n)
	it, err := svc.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		live++
	}
	return it.Stats().InternalStats.PointCount, live
}

// TestFragmentedCommitsCostWhatTheFileHolds: after hundreds of commits of
// a fragmented file, reading its extents steps over its current extents
// only, not over the keys that earlier commits deleted; the content reads
// back exactly (the model's list, joined where pieces continue one
// another) before and after a restart.
func TestFragmentedCommitsCostWhatTheFileHolds(t *testing.T) {
	dir := t.TempDir()
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	mkns(t, ts.cl, "frag")
	f := newFragment(2)
	const commits = 500
	for range commits {
		f.commit(t, ts.cl, "frag", "f")
	}
	check := func(ts *testServer) {
		t.Helper()
		r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "frag", Path: "f", WantExtents: true})
		if err != nil {
			t.Fatal(err)
		}
		want := coalesce(append([]*metapb.Extent(nil), f.exts...))
		if len(r.Extents) != len(want) {
			t.Fatalf("%d extents, want %d", len(r.Extents), len(want))
		}
		for i := range want {
			if !proto.Equal(r.Extents[i], want[i]) {
				t.Fatalf("extent %d: %v, want %v", i, r.Extents[i], want[i])
			}
		}
		if r.Inode.Size != f.size || r.Inode.ExtentGen != commits+1 {
			t.Fatalf("size %d gen %d, want %d and %d", r.Inode.Size, r.Inode.ExtentGen, f.size, commits+1)
		}
		points, live := extentPoints(t, ts.svc, r.Inode)
		if live != len(want) || points > uint64(2*live) {
			t.Fatalf("reading %d extents stepped over %d keys after %d commits", live, points, commits)
		}
	}
	check(ts)
	ts.stop()
	svc, err = Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	check(serve(t, svc))
}

// TestExtentsFirstLayout: a file whose extents were stored before
// generations (inode extent_gen 0, e/ keys) reads as before; its first
// rewrite moves it to a generation, deletes the old keys and releases
// exactly the needles the new list no longer uses.
func TestExtentsFirstLayout(t *testing.T) {
	ts := start(t, nil) // no data servers: garbage stays queued for inspection
	svc := ts.svc
	mkns(t, ts.cl, "old")
	n := put(t, ts.cl, "old", "f", 300, 1)
	// Rewrite the record in the first layout: three extents, needles 1-3.
	old := []*metapb.Extent{ext(0, 100, 1, 1), ext(100, 100, 1, 2), ext(200, 100, 1, 3)}
	b := svc.db.NewBatch()
	if err := b.Delete(extentAt(n, 0), nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range old {
		val, _ := proto.Marshal(e)
		if err := b.Set(extentKey(n.Ino, e.Offset), val, nil); err != nil {
			t.Fatal(err)
		}
	}
	n.ExtentGen = 0
	val, _ := proto.Marshal(n)
	if err := b.Set(inodeKey(n.Ino), val, nil); err != nil {
		t.Fatal(err)
	}
	if err := svc.db.Apply(b, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	svc.rc.clear()
	r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "old", Path: "f", WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Extents) != 3 || !proto.Equal(r.Extents[1], old[1]) || r.Inode.ExtentGen != 0 {
		t.Fatalf("first layout read back as %v (gen %d)", r.Extents, r.Inode.ExtentGen)
	}
	// Overwrite the middle: needle 2 is released, 1 and 3 stay.
	c, err := ts.cl.Commit(bg, &metapb.CommitRequest{Ns: "old", Path: "f", Size: 300, IfMatch: r.Inode.Etag, Etag: "e2",
		Extents: []*metapb.Extent{old[0], ext(100, 100, 1, 4), old[2]}})
	if err != nil {
		t.Fatal(err)
	}
	if c.ExtentGen != 1 {
		t.Fatalf("gen %d after the first rewrite, want 1", c.ExtentGen)
	}
	for key, want := range map[uint64]bool{1: false, 2: true, 3: false, 4: false} {
		if got := garbage(t, svc, key); got != want {
			t.Errorf("needle %d garbage %v, want %v", key, got, want)
		}
	}
	it, err := svc.db.NewIter(&pebble.IterOptions{LowerBound: extentPrefix(n.Ino), UpperBound: prefixEnd(extentPrefix(n.Ino))})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("first-layout key %x left behind", it.Key())
	}
	r, err = ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "old", Path: "f", WantExtents: true})
	if err != nil || len(r.Extents) != 3 || r.Extents[1].Key != 4 {
		t.Fatalf("after the rewrite: %v %v", r, err)
	}
}

// TestCoalesce joins neighbours that continue each other in one needle,
// and only those.
func TestCoalesce(t *testing.T) {
	e := func(off, n uint64, key, noff uint64) *metapb.Extent {
		return &metapb.Extent{Offset: off, Length: n, Volume: 1, Key: key, NeedleOffset: noff}
	}
	for _, c := range []struct {
		name     string
		in, want []*metapb.Extent
	}{
		{"continues", []*metapb.Extent{e(0, 10, 1, 0), e(10, 5, 1, 10)}, []*metapb.Extent{e(0, 15, 1, 0)}},
		{"other needle", []*metapb.Extent{e(0, 10, 1, 0), e(10, 5, 2, 10)}, []*metapb.Extent{e(0, 10, 1, 0), e(10, 5, 2, 10)}},
		{"needle gap", []*metapb.Extent{e(0, 10, 1, 0), e(10, 5, 1, 11)}, []*metapb.Extent{e(0, 10, 1, 0), e(10, 5, 1, 11)}},
		{"file hole", []*metapb.Extent{e(0, 10, 1, 0), e(11, 5, 1, 10)}, []*metapb.Extent{e(0, 10, 1, 0), e(11, 5, 1, 10)}},
		{"three", []*metapb.Extent{e(0, 1, 3, 4), e(1, 1, 3, 5), e(2, 1, 3, 6)}, []*metapb.Extent{e(0, 3, 3, 4)}},
	} {
		in := append([]*metapb.Extent(nil), c.in...)
		got := coalesce(in)
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v", c.name, got)
		}
		for i := range got {
			if !proto.Equal(got[i], c.want[i]) {
				t.Fatalf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
}
