package meta

import (
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// packed is a commit of a file whose bytes are [off, off+n) of needle key.
func packed(p string, off, n, key uint64) *metapb.CommitRequest {
	e := ext(0, n, 1, key)
	e.NeedleOffset = off
	return &metapb.CommitRequest{Ns: "nsp", Path: p, Size: n, Extents: []*metapb.Extent{e}, Etag: p, IfNoneMatch: true}
}

// TestCommitBatch: files packed into one needle commit together, each
// counts as an owner of the needle, and a batch with one bad commit
// changes nothing.
func TestCommitBatch(t *testing.T) {
	ts := start(t, nil) // no data servers: garbage stays queued for inspection
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "nsp")
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "nsp", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	r, err := cl.CommitBatch(bg, &metapb.CommitBatchRequest{Commits: []*metapb.CommitRequest{
		packed("d/a", 0, 10, 7), packed("d/b", 10, 20, 7), packed("c", 30, 5, 7),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Inodes) != 3 {
		t.Fatalf("%d inodes, want 3", len(r.Inodes))
	}
	var seq uint64
	for i, want := range []uint64{10, 20, 5} {
		n := r.Inodes[i]
		if n.Size != want || n.Seq <= seq {
			t.Fatalf("inode %d: size %d seq %d (previous seq %d), want size %d and a later seq", i, n.Size, n.Seq, seq, want)
		}
		seq = n.Seq
	}
	got, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "nsp", Path: "d/b", WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Extents[0]; got.Inode.Size != 20 || e.Key != 7 || e.NeedleOffset != 10 || e.Length != 20 {
		t.Fatalf("d/b resolves to %v %v", got.Inode, got.Extents)
	}

	// All or nothing: the second commit's name exists.
	_, err = cl.CommitBatch(bg, &metapb.CommitBatchRequest{Commits: []*metapb.CommitRequest{
		packed("new", 0, 1, 8), packed("d/a", 1, 1, 8),
	}})
	wantKind(t, err, errors.Precondition)
	if errors.PathOf(err) != "nsp/d/a" {
		t.Fatalf("error names %q, want nsp/d/a: %v", errors.PathOf(err), err)
	}
	if _, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "nsp", Path: "new"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("a failed batch left new behind: %v", err)
	}

	// The needle is garbage only once all three owners let go.
	for _, p := range []string{"d/a", "c"} {
		if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "nsp", Path: p}); err != nil {
			t.Fatal(err)
		}
		if garbage(t, svc, 7) {
			t.Fatalf("needle 7 queued after deleting %s, while d/b still owns it", p)
		}
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "nsp", Path: "d/b"}); err != nil {
		t.Fatal(err)
	}
	if !garbage(t, svc, 7) {
		t.Fatal("needle 7 not queued after its last owner went")
	}

	big := &metapb.CommitBatchRequest{}
	for range maxCommitBatch + 1 {
		big.Commits = append(big.Commits, packed("x", 0, 1, 9))
	}
	_, err = cl.CommitBatch(bg, big)
	wantKind(t, err, errors.TooLarge)
	_, err = cl.CommitBatch(bg, &metapb.CommitBatchRequest{Commits: []*metapb.CommitRequest{packed("../x", 0, 1, 9)}})
	wantKind(t, err, errors.Invalid)
}

// TestCommitCreateRetry: a mount's create names the inode number it
// reserved, so repeating a create whose answer was lost replaces the file
// it made instead of failing, while a file made by anyone else still
// fails the create.
func TestCommitCreateRetry(t *testing.T) {
	ts := start(t, nil)
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "nsp")
	res, err := cl.MountReserve(bg, &metapb.MountReserveRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := packed("f", 0, 10, 1)
	c.Ino = res.First
	if _, err := cl.Commit(bg, c); err != nil {
		t.Fatal(err)
	}
	again := packed("f", 0, 12, 2)
	again.Ino = res.First
	n, err := cl.Commit(bg, again)
	if err != nil {
		t.Fatalf("the repeated create failed: %v", err)
	}
	if n.Ino != res.First || n.Size != 12 {
		t.Fatalf("repeated create gave %v", n)
	}
	if !garbage(t, svc, 1) {
		t.Fatal("the first attempt's needle was not released")
	}
	other := packed("f", 0, 1, 3)
	other.Ino = res.First + 1
	_, err = cl.Commit(bg, other)
	wantKind(t, err, errors.Precondition)
	_, err = cl.Commit(bg, packed("f", 0, 1, 3))
	wantKind(t, err, errors.Precondition)
}

// TestMkdirReserved: a mount's mkdir takes the inode number it reserved,
// and repeating it (its answer lost) finds the directory it made.
func TestMkdirReserved(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "nsp")
	res, err := cl.MountReserve(bg, &metapb.MountReserveRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := &metapb.MkdirRequest{Ns: "nsp", Path: "d", Mode: 0o750, Ino: res.First, NoSyncWait: true}
	for range 2 {
		n, err := cl.Mkdir(bg, req)
		if err != nil {
			t.Fatal(err)
		}
		if n.Ino != res.First || n.Type != metapb.FileType_DIRECTORY || n.Mode != 0o750 {
			t.Fatalf("mkdir gave %v", n)
		}
	}
	_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "nsp", Path: "e", Ino: res.First})
	wantKind(t, err, errors.Exist) // number in use
	_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "nsp", Path: "e", Ino: res.First + 1000})
	wantKind(t, err, errors.Invalid) // not reserved
	_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "nsp", Path: "d"})
	wantKind(t, err, errors.Exist) // anyone else's mkdir of the name
}
