package meta

import (
	"fmt"
	"strings"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// TestVersionNeedles follows needle ownership through versioning: an
// overwrite or delete in a versioned namespace keeps the old needle (the
// stored version owns it), a copy from a version shares it, and deleting
// the last version that points into a needle queues it as garbage.
func TestVersionNeedles(t *testing.T) {
	ts := start(t, nil) // no data servers: garbage stays queued for inspection
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "vers")
	put(t, cl, "vers", "k", 10, 1) // the null version
	if _, err := cl.S3SetVersioning(bg, &metapb.S3VersioningRequest{Ns: "vers", State: metapb.S3Versioning_S3_VERSIONING_ENABLED}); err != nil {
		t.Fatal(err)
	}
	v2 := put(t, cl, "vers", "k", 10, 2)
	if v2.S3Version == 0 {
		t.Fatal("a versioned commit has no version id")
	}
	put(t, cl, "vers", "k", 10, 3)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "vers", Path: "k"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []uint64{1, 2, 3} {
		if garbage(t, svc, key) {
			t.Fatalf("needle %d queued while a version owns it", key)
		}
	}
	// A copy of the null version shares needle 1.
	if _, err := cl.S3Copy(bg, &metapb.S3CopyRequest{SrcNs: "vers", SrcPath: "k", SrcVersionId: "null", DstNs: "vers", DstPath: "c"}); err != nil {
		t.Fatal(err)
	}
	l, err := cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "vers"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Versions) != 4 || !l.Versions[0].Current || !l.Versions[0].DeleteMarker || !l.Versions[3].NullId {
		t.Fatalf("stored versions %v", l.Versions)
	}
	for _, v := range l.Versions {
		if v.Key != "k" {
			continue
		}
		if _, err := cl.S3DeleteVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: "k", VersionId: versionIDOf(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if !garbage(t, svc, 2) || !garbage(t, svc, 3) {
		t.Fatal("needles of deleted versions not queued")
	}
	if garbage(t, svc, 1) {
		t.Fatal("needle 1 queued while the copy owns it")
	}
	_, err = cl.S3GetVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: "k"})
	wantKind(t, err, errors.NotExist)
	// The bucket still holds the copy's versions (one, current) only.
	l, err = cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "vers"})
	if err != nil || len(l.Versions) != 0 {
		t.Fatalf("stored versions left: %v %v", l.GetVersions(), err)
	}
}

// FuzzParseVersionID: a version id from a request parses only if it is
// what VersionID prints.
func FuzzParseVersionID(f *testing.F) {
	for _, s := range []string{"null", "0000000000000001", "00000000000000ff", "0000000000000000", "3HL4kqtJlcpXroDTDmJ", "", "ffffffffffffffff", "+000000000000001", "000000000000000G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, null, err := ParseVersionID(s)
		if err != nil {
			return
		}
		if null && s != "null" || !null && VersionID(n) != s {
			t.Fatalf("%q parsed as %d (null %v)", s, n, null)
		}
	})
}

// TestVersionedChangesInPlace: in a versioned namespace every change that
// replaces or alters a file's content (an append, a truncation, a rename
// over it, a rename or recursive delete of it) keeps the content before the
// change as a stored version whose needles garbage collection leaves, as
// a PUT or DELETE of S3 would.
func TestVersionedChangesInPlace(t *testing.T) {
	ts := start(t, nil)
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "vers")
	if _, err := cl.S3SetVersioning(bg, &metapb.S3VersioningRequest{Ns: "vers", State: metapb.S3Versioning_S3_VERSIONING_ENABLED}); err != nil {
		t.Fatal(err)
	}
	// versions lists p's versions, newest first, as "size/needle".
	versions := func(p string) (out []string) {
		t.Helper()
		l, err := cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "vers", Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		if cur, err := cl.S3GetVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: p}); err == nil && !cur.DeleteMarker {
			l.Versions = append([]*metapb.S3Version{cur}, l.Versions...)
		}
		for _, v := range l.Versions {
			if v.Key != p {
				continue
			}
			if v.DeleteMarker {
				out = append(out, "marker")
				continue
			}
			full, err := cl.S3GetVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: p, VersionId: versionIDOf(v)})
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprint(full.Inode.Size)
			for _, e := range full.Extents {
				s += fmt.Sprintf("/%d", e.Key)
			}
			out = append(out, s)
		}
		return out
	}
	check := func(p string, want ...string) {
		t.Helper()
		if got := versions(p); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("versions of %s: %v, want %v", p, got, want)
		}
	}

	put(t, cl, "vers", "a", 10, 1)
	if _, err := cl.Append(bg, &metapb.AppendRequest{Ns: "vers", Path: "a", Extents: []*metapb.Extent{ext(0, 5, 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	check("a", "15/1/2", "10/1")
	size := uint64(4)
	if _, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "vers", Path: "a", Size: &size}); err != nil {
		t.Fatal(err)
	}
	check("a", "4/1", "15/1/2", "10/1")
	if garbage(t, svc, 2) {
		t.Fatal("the needle a truncation cut off was queued while a version holds it")
	}
	// A file created by an append is a version of its own.
	n, err := cl.Append(bg, &metapb.AppendRequest{Ns: "vers", Path: "new", Create: true, Extents: []*metapb.Extent{ext(0, 3, 1, 9)}})
	if err != nil || n.S3Version == 0 {
		t.Fatalf("append-created file: version %d, %v", n.GetS3Version(), err)
	}

	// A rename over b keeps b's content at b, and a's at a under a marker.
	put(t, cl, "vers", "b", 7, 3)
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "vers", From: "a", To: "b"}); err != nil {
		t.Fatal(err)
	}
	check("b", "4/1", "7/3")
	check("a", "marker", "4/1", "15/1/2", "10/1")
	for _, key := range []uint64{1, 2, 3} {
		if garbage(t, svc, key) {
			t.Fatalf("needle %d queued while a version owns it", key)
		}
	}

	// A directory's rename and a recursive delete keep each file.
	put(t, cl, "vers", "d/x", 6, 4)
	put(t, cl, "vers", "d/e/y", 8, 5)
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "vers", From: "d", To: "f"}); err != nil {
		t.Fatal(err)
	}
	check("d/x", "marker", "6/4")
	check("d/e/y", "marker", "8/5")
	check("f/e/y", "8/5")
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "vers", Path: "f", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	check("f/x", "marker", "6/4")
	check("f/e/y", "marker", "8/5")
	for _, key := range []uint64{4, 5} {
		if garbage(t, svc, key) {
			t.Fatalf("needle %d queued while a version owns it", key)
		}
	}

	// Suspended: the change replaces the null version, as a PUT would.
	if _, err := cl.S3SetVersioning(bg, &metapb.S3VersioningRequest{Ns: "vers", State: metapb.S3Versioning_S3_VERSIONING_SUSPENDED}); err != nil {
		t.Fatal(err)
	}
	put(t, cl, "vers", "s", 10, 6)
	if _, err := cl.Append(bg, &metapb.AppendRequest{Ns: "vers", Path: "s", Extents: []*metapb.Extent{ext(0, 5, 1, 7)}}); err != nil {
		t.Fatal(err)
	}
	check("s", "15/6/7")
	if garbage(t, svc, 6) {
		t.Fatal("the appended-to file's own needle was queued")
	}
	check("b", "4/1", "7/3")
	if _, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "vers", Path: "b", Size: &size}); err == nil {
		check("b", "4/1", "7/3") // the same size: nothing changed
	}
	size = 2
	if _, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "vers", Path: "b", Size: &size}); err != nil {
		t.Fatal(err)
	}
	check("b", "2/1", "4/1", "7/3")
}

// TestListVersionsWithFiles: S3ListVersions with_files lists, page by
// page for every page size, exactly what the tree's listing (List) and the
// stored versions listed apart give when merged in key order and grouped
// by the delimiter: keys whose names sort around '/' ("a", "a-b", "a.c",
// "a/b", "a0"; "a" a file once, a directory now), keys with zero to three stored versions, deleted keys (a delete
// marker latest, or a directory left with versions only), an empty
// directory (listed "e/" like a folder marker), a file never versioned.
func TestListVersionsWithFiles(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "lvs")
	key := uint64(1)
	write := func(p string) {
		put(t, cl, "lvs", p, 1, key)
		key++
	}
	write("old") // the null version, before versioning
	if _, err := cl.S3SetVersioning(bg, &metapb.S3VersioningRequest{Ns: "lvs", State: metapb.S3Versioning_S3_VERSIONING_ENABLED}); err != nil {
		t.Fatal(err)
	}
	// "a" was a file (its versions stay) before it became a directory.
	write("a")
	write("a")
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "lvs", Path: "a"}); err != nil {
		t.Fatal(err)
	}
	names := []string{"a-b", "a.c", "a/b", "a/c/d", "a0", "b/x", "b/y-z", "c", "d1/k0", "d1/k1", "d1/k2", "gone/f", "old"}
	for i, p := range names {
		for r := 0; r <= i%4; r++ {
			write(p)
		}
	}
	for _, p := range []string{"a.c", "d1/k1", "gone/f"} {
		if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "lvs", Path: p}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "lvs", Path: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "lvs", Path: "e", Parents: true}); err != nil {
		t.Fatal(err)
	}

	show := func(v *metapb.S3Version) string {
		switch {
		case v.CommonPrefix:
			return "prefix " + v.Key
		case v.File:
			return fmt.Sprintf("%s file %s dir=%v", v.Key, versionIDOf(v), v.Dir)
		}
		return fmt.Sprintf("%s %s current=%v marker=%v", v.Key, versionIDOf(v), v.Current, v.DeleteMarker)
	}
	// want merges List's entries and the stored versions of prefix, then
	// groups them by delim.
	want := func(prefix, delim string) []string {
		var files []*metapb.S3Version
		cursor := ""
		for {
			l, err := cl.List(bg, &metapb.ListRequest{Ns: "lvs", Prefix: prefix, Cursor: cursor, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range l.Entries {
				files = append(files, &metapb.S3Version{Key: e.Name, File: true, Dir: e.Dir, Current: true, Order: e.Inode.S3Version, NullId: e.Inode.S3Version == 0})
			}
			if cursor = l.NextCursor; cursor == "" {
				break
			}
		}
		recs, err := cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "lvs", Prefix: prefix})
		if err != nil || recs.More {
			t.Fatal(err, recs.GetMore())
		}
		var out []string
		lastCP := ""
		i, j := 0, 0
		for i < len(files) || j < len(recs.Versions) {
			var v *metapb.S3Version
			if j == len(recs.Versions) || i < len(files) && files[i].Key <= recs.Versions[j].Key {
				v, i = files[i], i+1
			} else {
				v, j = recs.Versions[j], j+1
			}
			if delim != "" {
				if k := strings.Index(v.Key[len(prefix):], delim); k >= 0 {
					cp := v.Key[:len(prefix)+k+len(delim)]
					if cp != lastCP {
						out = append(out, "prefix "+cp)
					}
					lastCP = cp
					continue
				}
			}
			out = append(out, show(v))
		}
		return out
	}
	// pages lists with_files in pages of size, following the markers as
	// ListObjectVersions does.
	pages := func(prefix, delim string, size uint32) []string {
		var out []string
		req := &metapb.S3ListVersionsRequest{Ns: "lvs", Prefix: prefix, Delimiter: delim, Limit: size, WithFiles: true}
		for n := 0; ; n++ {
			if n > 100 {
				t.Fatalf("prefix %q delimiter %q size %d: no end", prefix, delim, size)
			}
			l, err := cl.S3ListVersions(bg, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range l.Versions {
				out = append(out, show(v))
			}
			if !l.More {
				return out
			}
			last := l.Versions[len(l.Versions)-1]
			req.KeyMarker, req.VersionIdMarker = last.Key, ""
			if !last.CommonPrefix {
				req.VersionIdMarker = versionIDOf(last)
			}
		}
	}
	full := want("", "")
	if len(full) < 30 || !strings.Contains(fmt.Sprint(full), "e/ file null dir=true") || !strings.Contains(fmt.Sprint(full), "gone/f") {
		t.Fatalf("the bucket is not what the test meant: %v", full)
	}
	for _, prefix := range []string{"", "a", "a/", "d1/", "d1/k1", "gone/", "e/", "zz"} {
		for _, delim := range []string{"", "/", "-"} {
			w := want(prefix, delim)
			for _, size := range []uint32{1, 2, 3, 5, 1000} {
				if got := pages(prefix, delim, size); fmt.Sprint(got) != fmt.Sprint(w) {
					t.Fatalf("prefix %q delimiter %q pages of %d:\n%v\nwant\n%v", prefix, delim, size, strings.Join(got, "\n"), strings.Join(w, "\n"))
				}
			}
		}
	}
}
