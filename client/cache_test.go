package client

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"cairn/proto/metapb"
)

// TestPutWrittenRace covers the answer to a write arriving after later
// events: it is cached only when none of them touched the path.
func TestPutWrittenRace(t *testing.T) {
	file := func(p string) *File { return &File{NS: "ns", Path: p, Inode: &metapb.Inode{}} }
	cases := []struct {
		name   string
		events []recentEvent // applied before the answer, after a reset at 10
		cached bool
	}{
		{"own events only", []recentEvent{{seq: 11, ns: "ns", path: "a"}, {seq: 12, ns: "ns", path: "a/f"}}, true},
		{"unrelated later write", []recentEvent{{seq: 12, ns: "ns", path: "a/f"}, {seq: 13, ns: "ns", path: "a/g"}}, true},
		{"other namespace", []recentEvent{{seq: 12, ns: "ns", path: "a/f"}, {seq: 13, ns: "xx", path: "a/f"}}, true},
		{"later overwrite", []recentEvent{{seq: 12, ns: "ns", path: "a/f"}, {seq: 13, ns: "ns", path: "a/f"}}, false},
		{"parent renamed", []recentEvent{{seq: 12, ns: "ns", path: "a/f"}, {seq: 13, ns: "ns", path: "a"}}, false},
		{"namespace changed", []recentEvent{{seq: 12, ns: "ns", path: "a/f"}, {seq: 13, ns: "ns", namespace: true}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(100, 0, time.Hour)
			c.reset(true)
			c.seen(10, "")
			for _, e := range tc.events {
				if e.namespace {
					c.seen(e.seq, e.ns)
				} else {
					c.invalidateAt(e.ns, e.path, e.seq)
				}
			}
			c.putWritten(file("a/f"), 12)
			if _, ok := c.get("ns", "a/f"); ok != tc.cached {
				t.Fatalf("cached %v, want %v", ok, tc.cached)
			}
		})
	}

	// Events beyond the ring: nothing can be told, nothing is cached.
	c := newCache(100, 0, time.Hour)
	c.reset(true)
	for s := uint64(1); s <= 1000; s++ {
		c.invalidateAt("ns", "other", s)
	}
	c.putWritten(file("a/f"), 5)
	if _, ok := c.get("ns", "a/f"); ok {
		t.Fatal("cached an answer older than the ring")
	}
	// An entry survives its own (late) events, not a newer one.
	c.putWritten(file("b"), 1001)
	c.invalidateAt("ns", "b", 1001)
	if _, ok := c.get("ns", "b"); !ok {
		t.Fatal("own event dropped the entry")
	}
	c.invalidateAt("ns", "b", 1002)
	if _, ok := c.get("ns", "b"); ok {
		t.Fatal("newer event kept the entry")
	}
}

// BenchmarkNoteRead: what ReadTo adds to every read to report it for
// tiering (readnotes.go), from many goroutines at once.
func BenchmarkNoteRead(b *testing.B) {
	c := &Client{notes: readNotes{pending: map[readNote]struct{}{}}}
	b.RunParallel(func(pb *testing.PB) {
		var ino uint64
		for pb.Next() {
			ino++
			c.NoteReadIno("ns", ino%1024+1)
		}
	})
}

// soakFile is a file as meta answers a resolve of a small object: an
// inode with an ETag and a content type, and n extents.
func soakFile(p string, n int) *File {
	f := &File{NS: "ns", Path: p, Inode: &metapb.Inode{
		Ino: 1 << 40, Type: metapb.FileType_REGULAR, Mode: 0o644, Size: 65536, MtimeNs: 1 << 60, CtimeNs: 1 << 60,
		Etag: strings.Repeat("e", 32), ContentType: "application/octet-stream", Nlink: 1, Version: 3,
	}}
	for i := range n {
		f.Extents = append(f.Extents, &metapb.Extent{Offset: uint64(i) << 20, Length: 1 << 20, Volume: 7, Key: 1 << 50})
	}
	return f
}

// recount is what used should be, from the entries themselves.
func recount(c *cache) int64 {
	var n int64
	for k, e := range c.files {
		if e.cost != fileCost(k, e.f) {
			panic("entry cost changed")
		}
		n += e.cost
	}
	for d := range c.dirRefs {
		n += dirRefCost + int64(len(d))
	}
	for name, e := range c.ns {
		n += nsCost(name, e.n)
	}
	return n
}

// TestCacheByteBound: a cache bounded to 1 MiB keeps its estimate under
// 1 MiB however many files pass through it (the count bound, a million,
// never comes into play), and its count of bytes stays true through
// replacements, invalidations of files and directories, and namespaces.
func TestCacheByteBound(t *testing.T) {
	const max = 1 << 20
	c := newCache(1_000_000, max, time.Hour)
	c.reset(true)
	c.putNS("ns", &metapb.Namespace{Name: "ns", Owner: "soak"}, c.epochNow())
	for i := range 20_000 {
		p := fmt.Sprintf("small/%d/%d", i%4, i)
		c.put(soakFile(p, 1+i%3), c.epochNow())
		if i%100 == 0 { // appends: the same file again, longer
			c.put(soakFile(p, 50), c.epochNow())
		}
		if c.used > max {
			t.Fatalf("after %d files: %d bytes cached, bound %d", i+1, c.used, max)
		}
	}
	if n := len(c.files); n == 0 || n >= 20_000 {
		t.Fatalf("%d files cached", n)
	}
	if got := recount(c); got != c.used {
		t.Fatalf("used %d, entries add up to %d", c.used, got)
	}
	// The last file written is there (eviction makes room before an
	// insert, never takes the new entry).
	if _, ok := c.get("ns", "small/3/19999"); !ok {
		t.Fatal("the newest file is not cached")
	}
	c.invalidateAt("ns", "small/1", 0)
	c.invalidate("ns", "small/2/19998")
	c.invalidateNS("ns")
	if got := recount(c); got != c.used {
		t.Fatalf("after invalidations: used %d, entries add up to %d", c.used, got)
	}
	for k := range c.files {
		if strings.HasPrefix(k, "ns\x00small/1/") {
			t.Fatalf("%q survived its directory's invalidation", k)
		}
	}
	c.reset(true)
	if c.used != 0 {
		t.Fatalf("used %d after a reset", c.used)
	}

	// A file that would take an eighth of the cache is not kept, nor
	// what was cached of it before.
	c.put(soakFile("big", 1), c.epochNow())
	c.put(soakFile("big", max/8/int(extentCost)), c.epochNow())
	if _, ok := c.get("ns", "big"); ok {
		t.Fatal("a file of an eighth of the cache was cached")
	}
	if got := recount(c); got != c.used {
		t.Fatalf("used %d, entries add up to %d", c.used, got)
	}
}

// TestCacheCostEstimate holds fileCost against the heap that a cache of
// typical entries really keeps alive (its maps, keys, and the decoded
// inodes and extents it holds on to): the byte bound means what it says
// within a factor of two, and does not overstate it by more.
func TestCacheCostEstimate(t *testing.T) {
	const n = 50_000
	files := make([]*File, n)
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	c := newCache(1_000_000, 0, time.Hour)
	for i := range files {
		files[i] = soakFile(fmt.Sprintf("small/%d/%d", i%4, i), 1+i%3)
		c.put(files[i], c.epochNow())
	}
	clear(files) // the cache alone keeps them now
	real := int64(heap() - before)
	runtime.KeepAlive(c)
	t.Logf("%d files: estimated %d bytes (%d each), heap %d (%d each)", n, c.used, c.used/n, real, real/n)
	if c.used < real/2 || c.used > real*2 {
		t.Fatalf("estimated %d bytes, the heap grew %d", c.used, real)
	}
}
