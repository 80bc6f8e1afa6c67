package meta

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

func TestNamespaces(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	ns, err := cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "photos", Owner: "alice", Visibility: metapb.Visibility_PUBLIC_READ})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Replication != 1 || ns.RootIno == 0 || ns.Owner != "alice" {
		t.Fatalf("namespace %v", ns)
	}
	_, err = cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "photos"})
	wantKind(t, err, errors.Exist)
	_, err = cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "Bad_Name"})
	wantKind(t, err, errors.Invalid)
	mkns(t, cl, "docs")
	list, err := cl.ListNamespaces(bg, &metapb.Empty{})
	if err != nil || len(list.Namespaces) != 2 || list.Namespaces[0].Name != "docs" {
		t.Fatalf("list %v %v", list, err)
	}
	ns, err = cl.SetVisibility(bg, &metapb.SetVisibilityRequest{Name: "photos", Visibility: metapb.Visibility_PRIVATE})
	if err != nil || ns.Visibility != metapb.Visibility_PRIVATE || ns.Version != 2 {
		t.Fatalf("setvis %v %v", ns, err)
	}
	put(t, cl, "photos", "a/b.jpg", 10, 1)
	_, err = cl.DeleteNamespace(bg, &metapb.NamespaceRequest{Name: "photos"})
	wantKind(t, err, errors.NotEmpty)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "photos", Path: "a", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.DeleteNamespace(bg, &metapb.NamespaceRequest{Name: "photos"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.GetNamespace(bg, &metapb.NamespaceRequest{Name: "photos"})
	wantKind(t, err, errors.NotExist)
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "photos", Path: "a"})
	wantKind(t, err, errors.NotExist)
}

func TestResolveAndErrorsOverTheWire(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "ns1")
	n := put(t, cl, "ns1", "a/b/c/d/file.txt", 100, 7)
	r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "a/b/c/d/file.txt", WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inode.Ino != n.Ino || r.Inode.Size != 100 || len(r.Extents) != 1 || r.Extents[0].Key != 7 {
		t.Fatalf("resolve %v", r)
	}
	d, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "a/b"})
	if err != nil || d.Inode.Type != metapb.FileType_DIRECTORY {
		t.Fatalf("resolve dir %v %v", d, err)
	}
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "a/b/x/y"})
	wantKind(t, err, errors.NotExist)
	if p := errors.PathOf(err); p != "ns1/a/b/x/y" {
		t.Fatalf("path %q did not survive the wire", p)
	}
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "a/b/c/d/file.txt/z"})
	wantKind(t, err, errors.NotDir)
	_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "a/b/c/d/file.txt/z", Parents: true})
	wantKind(t, err, errors.NotDir)
	_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "a/b"})
	wantKind(t, err, errors.IsDir)
	_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "a/b/c/d/file.txt", Parents: true})
	wantKind(t, err, errors.Exist)
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "a/../b"})
	wantKind(t, err, errors.Invalid)
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: strings.Repeat("x", 300)})
	wantKind(t, err, errors.NameTooLong)
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "nope", Path: "a"})
	wantKind(t, err, errors.NotExist)
	_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "overlap", Size: 10, Extents: []*metapb.Extent{ext(0, 5, 1, 1), ext(4, 6, 1, 2)}})
	wantKind(t, err, errors.Invalid)
	_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "past", Size: 8, Extents: []*metapb.Extent{ext(0, 4, 1, 1), ext(5, 5, 1, 2)}})
	wantKind(t, err, errors.Invalid)
	// A gap is a hole of a sparse file: it costs nothing and reads as zeros.
	if g, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "gap", Size: 20, Extents: []*metapb.Extent{ext(0, 4, 1, 1), ext(8, 5, 1, 2)}}); err != nil || g.Size != 20 {
		t.Fatalf("sparse commit: %v %v", g, err)
	}
	_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "noparent/x", Size: 0})
	wantKind(t, err, errors.NotExist)

	// mkdir -p is idempotent; mkdir without -p of an existing dir is Exist.
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "a/b/c", Parents: true}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "a/b/c"})
	wantKind(t, err, errors.Exist)
	m, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "p/q/r", Parents: true, Mode: 0o700})
	if err != nil || m.Mode != 0o700 || m.Type != metapb.FileType_DIRECTORY {
		t.Fatalf("mkdir -p %v %v", m, err)
	}

	br, err := cl.BatchResolve(bg, &metapb.BatchResolveRequest{Requests: []*metapb.ResolveRequest{
		{Ns: "ns1", Path: "a/b/c/d/file.txt", WantExtents: true},
		{Ns: "ns1", Path: "missing"},
		{Ns: "ns1", Path: "p/q"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(br.Results) != 3 || br.Results[0].Response.Inode.Ino != n.Ino || len(br.Results[0].Response.Extents) != 1 ||
		errors.Kind(br.Results[1].Error.GetKind()) != errors.NotExist || br.Results[2].Response.Inode.Ino != m.Ino-2 && br.Results[2].Error != nil {
		t.Fatalf("batch %v", br)
	}
}

// buildTree makes n files and some empty directories with names chosen to
// trip naive orderings ('-' and '.' sort before '/'); it returns the full
// paths a recursive listing must return.
func buildTree(t testing.TB, cl metapb.MetaClient, ns string, n int) []string {
	t.Helper()
	var want []string
	names := []string{"a", "a-b", "a.c", "ab", "b", "z"}
	i := 0
	for len(want) < n {
		d1, d2 := names[i%len(names)], names[(i/len(names))%len(names)]
		p := fmt.Sprintf("%s/%s/f%d", d1, d2, i)
		if i%7 == 0 {
			p = fmt.Sprintf("%s/%s-%d", d1, d2, i) // a file next to directory d2
		}
		if i%500 == 0 {
			p = fmt.Sprintf("%s/empty%d/", d1, i)
			if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: ns, Path: p, Parents: true}); err != nil {
				t.Fatal(err)
			}
		} else {
			put(t, cl, ns, p, 1, uint64(i+1))
		}
		want = append(want, p)
		i++
	}
	sort.Strings(want)
	return want
}

func listAll(t testing.TB, cl metapb.MetaClient, req *metapb.ListRequest) []string {
	t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		r, err := cl.List(bg, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Entries {
			if e.Dir != strings.HasSuffix(e.Name, "/") || e.Inode == nil {
				t.Fatalf("entry %v", e)
			}
			got = append(got, e.Name)
		}
		if r.NextCursor == "" {
			return got
		}
		if len(r.Entries) == 0 {
			t.Fatal("empty page with a cursor")
		}
		req.Cursor = r.NextCursor
	}
}

func TestListRecursivePagination(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "big")
	n := 5000
	if testing.Short() {
		n = 1200 // still 9 pages of 137, two empty directories: 12 s of the -short tier at load 25 with 5000
	}
	want := buildTree(t, cl, "big", n)
	got := listAll(t, cl, &metapb.ListRequest{Ns: "big", Limit: 137})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("at %d got %q want %q (len got %d want %d)", i, got[i], want[i], len(got), len(want))
			}
		}
		t.Fatalf("len got %d want %d", len(got), len(want))
	}
	// A prefix that is a partial name.
	got = listAll(t, cl, &metapb.ListRequest{Ns: "big", Prefix: "a-b/a", Limit: 50})
	var sub []string
	for _, w := range want {
		if strings.HasPrefix(w, "a-b/a") {
			sub = append(sub, w)
		}
	}
	if strings.Join(got, "\n") != strings.Join(sub, "\n") || len(sub) == 0 {
		t.Fatalf("prefix listing: got %d entries want %d", len(got), len(sub))
	}
	// Cursors survive mutations: delete the entry a cursor points at.
	r, err := cl.List(bg, &metapb.ListRequest{Ns: "big", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "big", Path: r.Entries[9].Name, Recursive: true}); err != nil {
		t.Fatal(err)
	}
	r2, err := cl.List(bg, &metapb.ListRequest{Ns: "big", Limit: 1, Cursor: r.NextCursor})
	if err != nil || r2.Entries[0].Name != want[10] {
		t.Fatalf("resume after deleted cursor entry: %v %v want %s", r2, err, want[10])
	}
	_, err = cl.List(bg, &metapb.ListRequest{Ns: "big", Cursor: "!!not a cursor"})
	wantKind(t, err, errors.Invalid)
	_, err = cl.List(bg, &metapb.ListRequest{Ns: "big", Cursor: r.NextCursor, Delimiter: "/"})
	wantKind(t, err, errors.Invalid)
}

func TestListDelimiter(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "d1x")
	for _, p := range []string{"top", "dir/x", "dir/sub/y", "dir-z", "dir/a-b", "dir/sub2/z"} {
		put(t, cl, "d1x", p, 3, 1)
	}
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "d1x", Path: "dir/empty"}); err != nil {
		t.Fatal(err)
	}
	got := listAll(t, cl, &metapb.ListRequest{Ns: "d1x", Delimiter: "/", Limit: 2})
	if want := "dir-z dir/ top"; strings.Join(got, " ") != want {
		t.Fatalf("root: %q want %q", got, want)
	}
	got = listAll(t, cl, &metapb.ListRequest{Ns: "d1x", Prefix: "dir/", Delimiter: "/", Limit: 2})
	if want := "dir/a-b dir/empty/ dir/sub/ dir/sub2/ dir/x"; strings.Join(got, " ") != want {
		t.Fatalf("dir: %q want %q", got, want)
	}
	got = listAll(t, cl, &metapb.ListRequest{Ns: "d1x", Prefix: "dir/s", Delimiter: "/"})
	if want := "dir/sub/ dir/sub2/"; strings.Join(got, " ") != want {
		t.Fatalf("dir/s: %q want %q", got, want)
	}
	got = listAll(t, cl, &metapb.ListRequest{Ns: "d1x", Prefix: "nothing/", Delimiter: "/"})
	if len(got) != 0 {
		t.Fatalf("missing prefix: %q", got)
	}
	got = listAll(t, cl, &metapb.ListRequest{Ns: "d1x"})
	if want := "dir-z dir/a-b dir/empty/ dir/sub/y dir/sub2/z dir/x top"; strings.Join(got, " ") != want {
		t.Fatalf("recursive: %q want %q", got, want)
	}
}

func TestCommitReplaceIsAtomic(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "atom")
	// Version k has size 10*k and k extents of 10 bytes: a mix of old and
	// new is visible as size != 10 * len(extents).
	commitV := func(k int) {
		exts := make([]*metapb.Extent, k)
		for i := range exts {
			exts[i] = ext(uint64(10*i), 10, 1, uint64(k*1000+i))
		}
		if _, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "atom", Path: "f", Size: uint64(10 * k), Extents: exts}); err != nil {
			t.Error(err)
		}
	}
	commitV(1)
	first, _ := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "atom", Path: "f"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "atom", Path: "f", WantExtents: true})
				if err != nil {
					t.Error(err)
					return
				}
				k := len(r.Extents)
				if r.Inode.Size != uint64(10*k) {
					t.Errorf("size %d with %d extents", r.Inode.Size, k)
					return
				}
				for i, e := range r.Extents {
					if e.Key != uint64(k*1000+i) {
						t.Errorf("extent %d of version %d has key %d", i, k, e.Key)
						return
					}
				}
			}
		}()
	}
	for k := 2; k <= 60; k++ {
		commitV(k%9 + 1)
	}
	close(stop)
	wg.Wait()
	last, _ := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "atom", Path: "f"})
	if last.Inode.Ino != first.Inode.Ino || last.Inode.Version <= first.Inode.Version {
		t.Fatalf("replace must keep the ino and bump the version: %v -> %v", first.Inode, last.Inode)
	}
}

func TestConditionalCommit(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "cond")
	req := func(etag, ifMatch string, none bool) error {
		_, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "cond", Path: "f", Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 1)}, Etag: etag, IfMatch: ifMatch, IfNoneMatch: none})
		return err
	}
	wantKind(t, req("v1", "v0", false), errors.Precondition) // if-match on a missing file
	if err := req("v1", "", true); err != nil {
		t.Fatal(err)
	}
	wantKind(t, req("v2", "", true), errors.Precondition)
	wantKind(t, req("v2", "nope", false), errors.Precondition)
	if err := req("v2", "v1", false); err != nil {
		t.Fatal(err)
	}
	_, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "cond", Path: "f", IfMatch: "v1"})
	wantKind(t, err, errors.Precondition)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "cond", Path: "f", IfMatch: "v2"}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAppend(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "logs")
	const workers, each = 8, 40
	var wg sync.WaitGroup
	var want uint64
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l1, l2 := uint64(w+1), uint64(i+1)
				_, err := cl.Append(bg, &metapb.AppendRequest{Ns: "logs", Path: "app/log", Create: true, Parents: true,
					Extents: []*metapb.Extent{ext(0, l1, 1, uint64(w*1000+i)), ext(l1, l2, 2, uint64(w*1000+i))}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want += l1 + l2
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "logs", Path: "app/log", WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inode.Size != want {
		t.Fatalf("size %d want %d", r.Inode.Size, want)
	}
	var at uint64
	for _, e := range r.Extents {
		if e.Offset != at {
			t.Fatalf("extent at %d, expected %d: overlap or gap", e.Offset, at)
		}
		at += e.Length
	}
	if at != want || len(r.Extents) != 2*workers*each {
		t.Fatalf("extents cover %d (%d extents)", at, len(r.Extents))
	}
	_, err = cl.Append(bg, &metapb.AppendRequest{Ns: "logs", Path: "missing", Extents: []*metapb.Extent{ext(0, 1, 1, 1)}})
	wantKind(t, err, errors.NotExist)
	_, err = cl.Append(bg, &metapb.AppendRequest{Ns: "logs", Path: "app", Extents: []*metapb.Extent{ext(0, 1, 1, 1)}})
	wantKind(t, err, errors.IsDir)
}

func TestDelete(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "del")
	put(t, cl, "del", "d/e/f", 1, 1)
	put(t, cl, "del", "d/g", 1, 2)
	put(t, cl, "del", "top", 1, 3)
	_, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: "d"})
	wantKind(t, err, errors.NotEmpty)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: "top"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: "top"})
	wantKind(t, err, errors.NotExist)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: "d", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, cl, &metapb.ListRequest{Ns: "del"}); len(got) != 0 {
		t.Fatalf("left after recursive delete: %q", got)
	}
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "del", Path: "empty"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: "empty"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Delete(bg, &metapb.DeleteRequest{Ns: "del", Path: ""})
	wantKind(t, err, errors.Invalid)
	// Nothing dangles: the store has only the namespace and its root.
	v, _ := ts.svc.readView()
	defer v.close()
	it, _ := v.newIter([]byte("d/"), []byte("j"))
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] == pGarbage {
			continue // queued for the data servers (no Chunks here)
		}
		if it.Key()[0] == pInode && u64(it.Key()[2:]) != 1 || it.Key()[0] != pInode {
			t.Fatalf("dangling key %q", it.Key())
		}
	}
}

func TestRename(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "mv1")
	f := put(t, cl, "mv1", "a/f", 5, 1)
	put(t, cl, "mv1", "a/sub/g", 5, 2)
	put(t, cl, "mv1", "b/target", 7, 3)

	n, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "a/f", To: "b/f2"})
	if err != nil || n.Ino != f.Ino {
		t.Fatalf("rename file: %v %v", n, err)
	}
	_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "mv1", Path: "a/f"})
	wantKind(t, err, errors.NotExist)
	// Replace a file; no_replace refuses.
	_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "b/f2", To: "b/target", NoReplace: true})
	wantKind(t, err, errors.Exist)
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "b/f2", To: "b/target"}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "mv1", Path: "b/target"})
	if err != nil || r.Inode.Ino != f.Ino || r.Inode.Size != 5 {
		t.Fatalf("replaced target %v %v", r, err)
	}
	// Directories: into itself is Invalid; elsewhere moves the subtree.
	_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "a", To: "a/sub/x", Parents: true})
	wantKind(t, err, errors.Invalid)
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "a", To: "c/d/a2", Parents: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "mv1", Path: "c/d/a2/sub/g"}); err != nil {
		t.Fatal(err)
	}
	_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "c", To: "b/target"})
	wantKind(t, err, errors.NotDir)
	_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "b/target", To: "c"})
	wantKind(t, err, errors.IsDir)
	_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "mv1", From: "nope", To: "x"})
	wantKind(t, err, errors.NotExist)
	if got := strings.Join(listAll(t, cl, &metapb.ListRequest{Ns: "mv1"}), " "); got != "b/target c/d/a2/sub/g" {
		t.Fatalf("after renames: %q", got)
	}
}

func TestSetAttrTruncate(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "attr")
	_, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "attr", Path: "f", Size: 30,
		Extents: []*metapb.Extent{ext(0, 10, 1, 1), ext(10, 10, 1, 2), ext(20, 10, 1, 3)}})
	if err != nil {
		t.Fatal(err)
	}
	u32 := func(v uint32) *uint32 { return &v }
	u64p := func(v uint64) *uint64 { return &v }
	n, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "attr", Path: "f", Mode: u32(0o600), Uid: u32(42), Size: u64p(15)})
	if err != nil || n.Mode != 0o600 || n.Uid != 42 || n.Size != 15 {
		t.Fatalf("setattr %v %v", n, err)
	}
	r, _ := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "attr", Path: "f", WantExtents: true})
	if len(r.Extents) != 2 || r.Extents[1].Length != 5 {
		t.Fatalf("after shrink: %v", r.Extents)
	}
	n, err = cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "attr", Path: "f", Size: u64p(100)})
	if err != nil || n.Size != 100 {
		t.Fatal(err)
	}
	r, _ = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "attr", Path: "f", WantExtents: true})
	if len(r.Extents) != 2 || r.Inode.Size != 100 {
		t.Fatalf("grow makes a hole: %v", r)
	}
	n, err = cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "attr", Path: "f", Size: u64p(0)})
	if err != nil || n.Size != 0 {
		t.Fatal(err)
	}
	r, _ = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "attr", Path: "f", WantExtents: true})
	if len(r.Extents) != 0 {
		t.Fatalf("truncate to 0 left %v", r.Extents)
	}
	_, err = cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "attr", Path: "", Size: u64p(1)})
	wantKind(t, err, errors.IsDir)
}
