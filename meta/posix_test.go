package meta

import (
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// The POSIX surface a mount needs from meta: special files, exact modes,
// directory link counts and atime.

func TestMknod(t *testing.T) {
	cl := start(t, nil).cl
	mkns(t, cl, "ns1")
	_, err := cl.Mknod(bg, &metapb.MountMknodRequest{Ns: "ns1", Path: "d/fifo", Type: metapb.FileType_FIFO})
	wantKind(t, err, errors.NotExist) // no parent
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		typ  metapb.FileType
		mode uint32
		rdev uint32
	}{
		{"fifo", metapb.FileType_FIFO, 0o644, 0},
		{"chr", metapb.FileType_CHAR_DEVICE, 0o600, 0x103},
		{"blk", metapb.FileType_BLOCK_DEVICE, 0, 0x801},
		{"sock", metapb.FileType_SOCKET, 0o755, 0},
	} {
		n, err := cl.Mknod(bg, &metapb.MountMknodRequest{Ns: "ns1", Path: "d/" + c.name, Type: c.typ, Mode: c.mode, Rdev: c.rdev, Uid: 7, Gid: 8})
		if err != nil {
			t.Fatal(c.name, err)
		}
		r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "d/" + c.name})
		if err != nil {
			t.Fatal(err)
		}
		if r.Inode.Ino != n.Ino || r.Inode.Type != c.typ || r.Inode.Mode != c.mode || r.Inode.Rdev != c.rdev || r.Inode.Uid != 7 || r.Inode.Nlink != 1 {
			t.Fatalf("%s: %v", c.name, r.Inode)
		}
		_, err = cl.Mknod(bg, &metapb.MountMknodRequest{Ns: "ns1", Path: "d/" + c.name, Type: c.typ})
		wantKind(t, err, errors.Exist)
		if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "ns1", Path: "d/" + c.name}); err != nil {
			t.Fatal(err)
		}
		_, err = cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: "d/" + c.name})
		wantKind(t, err, errors.NotExist)
	}
	_, err = cl.Mknod(bg, &metapb.MountMknodRequest{Ns: "ns1", Path: "d/reg", Type: metapb.FileType_REGULAR})
	wantKind(t, err, errors.Invalid)
}

func TestModeExact(t *testing.T) {
	cl := start(t, nil).cl
	mkns(t, cl, "ns1")
	f, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "f", Etag: "e", ModeExact: true})
	if err != nil || f.Mode != 0 {
		t.Fatalf("exact 0: %v %v", f, err)
	}
	g, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "ns1", Path: "g", Etag: "e"})
	if err != nil || g.Mode != 0o644 {
		t.Fatalf("default: %v %v", g, err)
	}
	d, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "d", ModeExact: true})
	if err != nil || d.Mode != 0 {
		t.Fatalf("mkdir exact 0: %v %v", d, err)
	}
}

func TestDirNlink(t *testing.T) {
	cl := start(t, nil).cl
	mkns(t, cl, "ns1")
	nlink := func(p string) uint32 {
		t.Helper()
		r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: p})
		if err != nil {
			t.Fatal(err)
		}
		return r.Inode.Nlink
	}
	mkdir := func(p string) {
		t.Helper()
		if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: p, Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	rename := func(from, to string) {
		t.Helper()
		if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "ns1", From: from, To: to}); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("a/b/c") // parents made on the way count too
	mkdir("a/b2")
	put(t, cl, "ns1", "a/file", 1, 1) // a file is no link of its directory
	for _, c := range []struct {
		p    string
		want uint32
	}{{"", 3}, {"a", 4}, {"a/b", 3}, {"a/b/c", 2}} {
		if got := nlink(c.p); got != c.want {
			t.Fatalf("nlink %q = %d, want %d", c.p, got, c.want)
		}
	}
	rename("a/b/c", "c") // to another parent
	if nlink("a/b") != 2 || nlink("") != 4 {
		t.Fatalf("after moving a/b/c up: a/b %d, root %d", nlink("a/b"), nlink(""))
	}
	rename("c", "a/b2") // over an empty directory elsewhere
	if nlink("") != 3 || nlink("a") != 4 {
		t.Fatalf("after replacing a/b2: root %d, a %d", nlink(""), nlink("a"))
	}
	rename("a/b2", "a/b") // over an empty directory in the same parent
	if nlink("a") != 3 {
		t.Fatalf("after replacing a/b in place: a %d", nlink("a"))
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "ns1", Path: "a/b"}); err != nil {
		t.Fatal(err)
	}
	if nlink("a") != 2 {
		t.Fatalf("after rmdir: a %d", nlink("a"))
	}
}

func TestAtimeAccess(t *testing.T) {
	cl := start(t, nil).cl
	mkns(t, cl, "ns1")
	f := put(t, cl, "ns1", "f", 1, 1)
	at := f.MtimeNs + 5
	a, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "ns1", Path: "f", AtimeNs: &at, Access: true})
	if err != nil {
		t.Fatal(err)
	}
	// An access moves atime alone: no new version (caches stay), no ctime.
	if a.AtimeNs != at || a.Version != f.Version || a.CtimeNs != f.CtimeNs {
		t.Fatalf("access: %v (was %v)", a, f)
	}
	at2 := at + 100
	b, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "ns1", Path: "f", AtimeNs: &at2})
	if err != nil {
		t.Fatal(err)
	}
	if b.AtimeNs != at2 || b.Version == f.Version {
		t.Fatalf("utimensat of atime: %v", b)
	}
}

// TestMountAccess: a batch of a mount's accesses moves each file's atime
// forward only, in one command, with no new version or ctime; a path that
// no longer names the inode read is skipped.
func TestMountAccess(t *testing.T) {
	cl := start(t, nil).cl
	mkns(t, cl, "ns1")
	f := put(t, cl, "ns1", "f", 1, 1)
	g := put(t, cl, "ns1", "g", 1, 2)
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "ns1", From: "g", To: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "ns1", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	x := put(t, cl, "ns1", "d/x", 1, 3)
	y := put(t, cl, "ns1", "d/y", 1, 4)
	at := f.MtimeNs + 1000
	if _, err := cl.MountAccess(bg, &metapb.MountAccessRequest{Ns: "ns1", Files: []*metapb.MountAccess{
		{Path: "f", Ino: f.Ino, AtimeNs: at},
		{Path: "g", Ino: g.Ino, AtimeNs: at},   // renamed away: nothing there
		{Path: "h", Ino: f.Ino, AtimeNs: at},   // h is another inode than the one read
		{Path: "f/z", Ino: f.Ino, AtimeNs: at}, // through a file
		{Path: "e/z", Ino: x.Ino, AtimeNs: at}, // no such directory
		{Path: "d/x", Ino: x.Ino, AtimeNs: at},
		{Path: "d/y", Ino: y.Ino, AtimeNs: at},
	}}); err != nil {
		t.Fatal(err)
	}
	stat := func(p string) *metapb.Inode {
		t.Helper()
		r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "ns1", Path: p})
		if err != nil {
			t.Fatal(err)
		}
		return r.Inode
	}
	a := stat("f")
	if a.AtimeNs != at || a.Version != f.Version || a.CtimeNs != f.CtimeNs {
		t.Fatalf("access batch: atime %d version %d ctime %d, want %d %d %d", a.AtimeNs, a.Version, a.CtimeNs, at, f.Version, f.CtimeNs)
	}
	if h := stat("h"); h.AtimeNs == at {
		t.Fatalf("the access of f moved the atime of h, another inode")
	}
	for _, p := range []string{"d/x", "d/y"} {
		if got := stat(p).AtimeNs; got != at {
			t.Fatalf("%s: atime %d, want %d", p, got, at)
		}
	}
	// An older access (a batch landing after a newer atime) takes nothing back.
	if _, err := cl.MountAccess(bg, &metapb.MountAccessRequest{Ns: "ns1", Files: []*metapb.MountAccess{{Path: "f", Ino: f.Ino, AtimeNs: at - 10}}}); err != nil {
		t.Fatal(err)
	}
	if got := stat("f").AtimeNs; got != at {
		t.Fatalf("an older access moved atime back: %d, want %d", got, at)
	}
	if _, err := cl.MountAccess(bg, &metapb.MountAccessRequest{Ns: "ns1", Files: []*metapb.MountAccess{{Path: "../x", Ino: 1, AtimeNs: at}}}); err == nil {
		t.Fatal("a bad path was taken")
	}
}

// FuzzSparse: a commit's extent list (outside input) is accepted only if
// sorted it is disjoint, without empty or overflowing extents, and within
// the size; gaps are holes.
func FuzzSparse(f *testing.F) {
	f.Add(uint64(0), uint64(4), uint64(8), uint64(5), uint64(20))
	f.Add(uint64(0), uint64(5), uint64(4), uint64(6), uint64(10))
	f.Add(uint64(1<<63), uint64(1<<63), uint64(0), uint64(1), uint64(1))
	f.Fuzz(func(t *testing.T, o1, l1, o2, l2, size uint64) {
		exts, err := sparse([]*metapb.Extent{ext(o2, l2, 1, 2), ext(o1, l1, 1, 1)}, size)
		if err != nil {
			return
		}
		var at uint64
		for _, e := range exts {
			if e.Length == 0 || e.Offset < at || e.Offset+e.Length < e.Offset {
				t.Fatalf("accepted %v", exts)
			}
			at = e.Offset + e.Length
		}
		if at > size {
			t.Fatalf("accepted extents past size %d: %v", size, exts)
		}
	})
}
