package meta

import (
	"bytes"
	"testing"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

func FuzzDirentKey(f *testing.F) {
	f.Add(uint64(1), "a", false, []byte("d/\x00\x00\x00\x00\x00\x00\x00\x01a/"))
	f.Add(uint64(1<<63), "héllo wörld", true, []byte("d/"))
	f.Add(uint64(0), "a-b", false, []byte("d/\x00\x00\x00\x00\x00\x00\x00\x01/"))
	f.Fuzz(func(t *testing.T, parent uint64, name string, dir bool, raw []byte) {
		if pathname.ValidName(name) == nil {
			k := direntKey(parent, name, dir)
			p, n, d, ok := parseDirentKey(k)
			if !ok || p != parent || n != name || d != dir {
				t.Fatalf("round trip of (%d %q %v): (%d %q %v %v)", parent, name, dir, p, n, d, ok)
			}
			// Within one directory, key order is full-path order.
			k2 := direntKey(parent, name+"-", false)
			if bytes.Compare(k, k2) >= 0 && !dir {
				t.Fatalf("%q sorts after %q", k, k2)
			}
		}
		if p, n, d, ok := parseDirentKey(raw); ok {
			if !bytes.Equal(direntKey(p, n, d), raw) {
				t.Fatalf("parse of %q does not re-encode", raw)
			}
		}
	})
}

func FuzzListCursor(f *testing.F) {
	svc, err := Open(testConfig(f.TempDir(), nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close() })
	if _, err := svc.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "fuzz"}); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"a/b", "a/c/d", "a-b", "b/"} {
		svc.Mkdir(bg, &metapb.MkdirRequest{Ns: "fuzz", Path: "dirs/" + p, Parents: true})
		svc.Commit(bg, &metapb.CommitRequest{Ns: "fuzz", Path: "files/" + p, Parents: true})
	}
	f.Add("", "", false)
	f.Add(encodeCursor(modeRecursive, "dirs/a/b/"), "", false)
	f.Add(encodeCursor(modeDelimited, "files/a-b"), "files/", true)
	f.Add(encodeCursor(modeRecursive, "files/a/c/d"), "files/a", false)
	f.Add("AXI", "x/", true)
	f.Fuzz(func(t *testing.T, cursor, prefix string, delim bool) {
		req := &metapb.ListRequest{Ns: "fuzz", Prefix: prefix, Cursor: cursor, Limit: 3}
		if delim {
			req.Delimiter = "/"
		}
		_, derr := decodeCursor(cursor, modeRecursive, prefix)
		r, err := svc.List(bg, req)
		if err != nil {
			if !errors.Is(errors.Invalid, err) {
				t.Fatalf("List(%q, %q): %v is not Invalid", cursor, prefix, err)
			}
			return
		}
		if cursor != "" && derr != nil && !delim {
			t.Fatalf("bad cursor %q accepted", cursor)
		}
		for i := 1; i < len(r.Entries); i++ {
			if r.Entries[i-1].Name >= r.Entries[i].Name {
				t.Fatalf("out of order: %q then %q", r.Entries[i-1].Name, r.Entries[i].Name)
			}
		}
	})
}
