package client

import (
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
			c := newCache(100, time.Hour)
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
	c := newCache(100, time.Hour)
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
