package meta

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestRequestScope: the names a call carries are read from its fields,
// each path with the namespace of its role.
func TestRequestScope(t *testing.T) {
	for _, c := range []struct {
		req      proto.Message
		names    []string
		prefixes []string
		inos     []uint64
		unknown  bool
	}{
		{req: &metapb.ResolveRequest{Ns: "data", Path: "/a/b/"}, names: []string{"data\x00a/b"}},
		{req: &metapb.ResolveRequest{Ns: "data"}, names: []string{"data\x00"}}, // the root
		{req: &metapb.ResolveRequest{Ns: "data", Path: "a", Ino: 7}, names: []string{"data\x00a"}, inos: []uint64{7}},
		{req: &metapb.ListRequest{Ns: "data", Prefix: "a/f", Delimiter: "/"}, prefixes: []string{"data\x00a/f"}},
		{req: &metapb.ListRequest{Ns: "data"}, prefixes: []string{"data\x00"}},
		{req: &metapb.RenameRequest{Ns: "data", From: "a", To: "c/d"}, names: []string{"data\x00a", "data\x00c/d"}},
		{req: &metapb.MountLinkRequest{Ns: "data", From: "f", To: "g"}, names: []string{"data\x00f", "data\x00g"}},
		{req: &metapb.S3CopyRequest{SrcNs: "x", SrcPath: "p", DstNs: "y", DstPath: "q"}, names: []string{"x\x00p", "y\x00q"}},
		{req: &metapb.NamespaceRequest{Name: "data"}, names: []string{"data\x00"}},
		{req: &metapb.BatchResolveRequest{Requests: []*metapb.ResolveRequest{{Ns: "data", Path: "a"}, {Ns: "o", Path: "b"}}}, names: []string{"data\x00a", "o\x00b"}},
		{req: &metapb.S3CompleteRequest{Upload: &metapb.S3UploadRequest{Bucket: "bk", Key: "k/1"}}, names: []string{"bk\x00k/1"}},
		{req: &metapb.CommitRequest{Ns: "data", Path: "f", OpenIno: 9}, names: []string{"data\x00f"}, inos: []uint64{9}},
		{req: &metapb.CommitRequest{Path: "f"}, unknown: true}, // no namespace: cannot be told
		{req: &metapb.Empty{}, unknown: true},
	} {
		sc := requestScope(c.req.ProtoReflect())
		if !slices.Equal(sc.names, c.names) || !slices.Equal(sc.prefixes, c.prefixes) || !slices.Equal(sc.inos, c.inos) || sc.unknown != c.unknown {
			t.Errorf("%T %v: scope %+v, want names %q prefixes %q inos %v unknown %v", c.req, c.req, sc, c.names, c.prefixes, c.inos, c.unknown)
		}
	}
}

// TestConcerns: which calls a session's announced changes concern.
func TestConcerns(t *testing.T) {
	ms := &mountSession{dirty: 3, wake: make(chan struct{})}
	ms.mark(nameKey("data", "a/x"), 2)
	ms.mark(nameKey("data", "m/made"), 3) // a directory made behind
	ms.inos = map[uint64]uint64{42: 2}
	for _, c := range []struct {
		req  proto.Message
		want uint64
	}{
		{&metapb.ResolveRequest{Ns: "data", Path: "a/x"}, 2},
		{&metapb.ResolveRequest{Ns: "data", Path: "a"}, 2},              // the directory: look-up, stat
		{&metapb.ResolveRequest{Ns: "data"}, 3},                         // the root, above both
		{&metapb.ResolveRequest{Ns: "data", Path: "m/made/in/deep"}, 3}, // under a directory made behind
		{&metapb.ResolveRequest{Ns: "data", Path: "a/y"}, 0},            // a sibling
		{&metapb.ResolveRequest{Ns: "data", Path: "b/x"}, 0},
		{&metapb.ResolveRequest{Ns: "data", Path: "a/xy"}, 0},
		{&metapb.ResolveRequest{Ns: "other", Path: "a/x"}, 0},
		{&metapb.ResolveRequest{Ns: "data", Path: "q", Ino: 42}, 2}, // the file by inode
		{&metapb.ListRequest{Ns: "data", Prefix: "a/", Delimiter: "/"}, 2},
		{&metapb.ListRequest{Ns: "data", Prefix: "a/x"}, 2}, // S3: not a directory boundary
		{&metapb.ListRequest{Ns: "data", Prefix: "a"}, 2},
		{&metapb.ListRequest{Ns: "data", Prefix: "a/y"}, 0},
		{&metapb.ListRequest{Ns: "data", Prefix: "ab"}, 0},
		{&metapb.ListRequest{Ns: "data", Prefix: "m/made/in/"}, 3}, // inside a directory made behind
		{&metapb.ListRequest{Ns: "data"}, 3},
		{&metapb.RenameRequest{Ns: "data", From: "a", To: "c"}, 2}, // the directory renamed
		{&metapb.RenameRequest{Ns: "data", From: "z", To: "a/x"}, 2},
		{&metapb.RenameRequest{Ns: "data", From: "z", To: "a/z"}, 0},
		{&metapb.DeleteRequest{Ns: "data", Path: "m", Recursive: true}, 3},
		{&metapb.NamespaceRequest{Name: "data"}, 3},
		{&metapb.NamespaceRequest{Name: "other"}, 0},
		{&metapb.Empty{}, 3}, // cannot be told: every dirty mount
	} {
		sc := requestScope(c.req.ProtoReflect())
		if got := ms.concerns(&sc); got != c.want {
			t.Errorf("%T %v: concerns %d, want %d", c.req, c.req, got, c.want)
		}
	}
	// A clean covering epoch 2 leaves only what epoch 3 announced.
	ms.clean(2)
	for _, c := range []struct {
		path string
		want uint64
	}{{"a/x", 0}, {"a", 0}, {"m/made", 3}, {"", 3}} {
		sc := requestScope((&metapb.ResolveRequest{Ns: "data", Path: c.path}).ProtoReflect())
		if got := ms.concerns(&sc); got != c.want {
			t.Errorf("after clean(2), %q: concerns %d, want %d", c.path, got, c.want)
		}
	}
	ms.clean(3)
	if len(ms.names)+len(ms.dirs)+len(ms.inos) != 0 {
		t.Errorf("clean(3) left %v %v %v", ms.names, ms.dirs, ms.inos)
	}
	// Alone, the mount announced no path: every call concerns it.
	ms.dirty, ms.unannounced = 4, 4
	sc := requestScope((&metapb.ResolveRequest{Ns: "data", Path: "b/x"}).ProtoReflect())
	if got := ms.concerns(&sc); got != 4 {
		t.Errorf("unannounced epoch: concerns %d, want 4", got)
	}
}

// dirtyMount is mount A of the tests below: it announces changes behind
// with a new epoch each time.
type dirtyMount struct {
	*fakeMount
	ts    *testServer
	epoch uint64
}

func (a *dirtyMount) dirty(t *testing.T, p string, create bool) {
	t.Helper()
	a.epoch++
	if _, err := a.ts.cl.MountDirty(a.ctx(false), &metapb.MountDirtyRequest{Session: a.id, Epoch: a.epoch, Ns: "data", Path: p, Create: create}); err != nil {
		t.Fatalf("MountDirty %s: %v", p, err)
	}
}

// recalled runs call and reports whether it recalled A (which then
// reports clean, so that the call is served): a recalled call cannot be
// answered before A's clean, so whichever comes first tells.
func (a *dirtyMount) recalled(t *testing.T, call func() error) bool {
	t.Helper()
	done := async(call)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		return false
	case <-a.flushes:
		a.send(&metapb.MountSessionMsg{Clean: a.epoch})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return true
	}
}

// TestRecallOnlyConcerned: with mount A dirty in directory a, the calls
// of another mount (or the HTTP API) that name nothing A changed are
// served without recalling A; those that name what A changed, a
// directory above it, a listing of it, or the file by another of its
// names, recall A first (close-to-open). Every call recalled every dirty
// mount: two mounts working in two directories recalled each other on
// every look-up.
func TestRecallOnlyConcerned(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	mkns(t, ts.cl, "other")
	a := &dirtyMount{fakeMount: newFakeMount(t, ts, "mount-a"), ts: ts}
	b := newFakeMount(t, ts, "mount-b")
	put(t, ts.cl, "data", "a/old", 10, 1)
	put(t, ts.cl, "data", "b/old", 10, 2)
	put(t, ts.cl, "other", "a/new", 10, 3)
	fromB := b.ctx(false)
	// The fake mount commits nothing: what it announced stays missing.
	resolve := func(ns, p string) func() error {
		return func() error {
			_, err := ts.cl.Resolve(fromB, &metapb.ResolveRequest{Ns: ns, Path: p})
			return missingOK(err)
		}
	}
	list := func(prefix, delim string) func() error {
		return func() error {
			_, err := ts.cl.List(fromB, &metapb.ListRequest{Ns: "data", Prefix: prefix, Delimiter: delim})
			return err
		}
	}

	// A closed a/new behind (its create is queued).
	a.dirty(t, "a/new", true)
	for what, call := range map[string]func() error{
		"resolve b/old":                 resolve("data", "b/old"),
		"resolve a/old (A's directory)": resolve("data", "a/old"),
		"resolve a/new in another ns":   resolve("other", "a/new"),
		"list b/":                       list("b/", "/"),
		"list prefix a/o":               list("a/o", ""),
		"commit b/new": func() error {
			_, err := ts.cl.Commit(fromB, &metapb.CommitRequest{Ns: "data", Path: "b/new", Etag: "e"})
			return err
		},
		"mkdir b/d": func() error { _, err := ts.cl.Mkdir(fromB, &metapb.MkdirRequest{Ns: "data", Path: "b/d"}); return err },
		"batch resolve b/old, b/new": func() error {
			_, err := ts.cl.BatchResolve(fromB, &metapb.BatchResolveRequest{Requests: []*metapb.ResolveRequest{{Ns: "data", Path: "b/old"}, {Ns: "data", Path: "b/new"}}})
			return err
		},
		"resolve b/old from the HTTP side": func() error {
			_, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "data", Path: "b/old"})
			return err
		},
	} {
		if a.recalled(t, call) {
			t.Errorf("%s recalled A, whose queued change is a/new only", what)
		}
	}
	for what, call := range map[string]func() error{
		"resolve a/new":     resolve("data", "a/new"),
		"resolve a":         resolve("data", "a"),
		"resolve the root":  resolve("data", ""),
		"list a/":           list("a/", "/"),
		"list prefix a/n":   list("a/n", ""),
		"list everything":   list("", ""),
		"get the namespace": func() error { _, err := ts.cl.GetNamespace(fromB, &metapb.NamespaceRequest{Name: "data"}); return err },
		"chmod a (HTTP)": func() error {
			_, err := ts.cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "data", Path: "a", Mode: proto.Uint32(0o750)})
			return err
		},
	} {
		a.dirty(t, "a/new", false)
		if !a.recalled(t, call) {
			t.Errorf("%s did not recall A, whose queued change is a/new", what)
		}
	}

	// A's file by inode number: B's open of it after another client
	// renamed it away.
	old := put(t, ts.cl, "data", "a/byino", 10, 4)
	a.dirty(t, "a/byino", false)
	if !a.recalled(t, func() error {
		_, err := ts.cl.Resolve(fromB, &metapb.ResolveRequest{Ns: "data", Path: "gone", Ino: old.Ino})
		return missingOK(err)
	}) {
		t.Error("resolving A's file by inode number did not recall A")
	}

	// A hard-linked file: its other name recalls A too.
	if _, err := ts.cl.Link(bg, &metapb.MountLinkRequest{Ns: "data", From: "a/old", To: "b/link"}); err != nil {
		t.Fatal(err)
	}
	a.dirty(t, "a/old", false)
	if !a.recalled(t, resolve("data", "b/link")) {
		t.Error("the other name of A's hard-linked file did not recall A")
	}

	// A renames its directory a, holding a/queued behind: the new name's
	// look-up recalls A (A's queued commit goes to c/queued).
	a.dirty(t, "a/queued", true)
	if _, err := ts.cl.Rename(a.ctx(false), &metapb.RenameRequest{Ns: "data", From: "a", To: "c"}); err != nil {
		t.Fatal(err)
	}
	if !a.recalled(t, func() error {
		_, err := ts.cl.Resolve(fromB, &metapb.ResolveRequest{Ns: "data", Path: "c/queued"})
		return missingOK(err)
	}) {
		t.Error("a path through the directory A renamed did not recall A")
	}

	// A change announced while a command naming it runs (it passed its
	// recall before): the command may give the file a name no
	// announcement names, so the whole namespace concerns A.
	release := ts.svc.recallDirty(bg, "Link", &metapb.MountLinkRequest{Ns: "data", From: "b/old", To: "b/other"})
	a.dirty(t, "b/old", false)
	release()
	if !a.recalled(t, resolve("data", "b/other")) {
		t.Error("a name given while A announced did not recall A")
	}
}

// missingOK is err, except that NotExist is no failure.
func missingOK(err error) error {
	if errors.Is(errors.NotExist, err) {
		return nil
	}
	return err
}

// TestDirtyNamesBounded: a mount whose changes no one looks at is asked
// to commit once it announced maxDirtyNames names in an epoch, so meta
// does not keep them for ever.
func TestDirtyNamesBounded(t *testing.T) {
	defer func(n int) { maxDirtyNames = n }(maxDirtyNames)
	maxDirtyNames = 50
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	a := &dirtyMount{fakeMount: newFakeMount(t, ts, "mount-a"), ts: ts}
	_ = newFakeMount(t, ts, "mount-b")
	announce := func(i int) {
		if _, err := ts.cl.MountDirty(a.ctx(false), &metapb.MountDirtyRequest{Session: a.id, Epoch: 1, Ns: "data", Path: fmt.Sprintf("d/f%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range maxDirtyNames - 1 {
		announce(i)
	}
	select {
	case <-a.flushes:
		t.Fatalf("asked to commit after %d names", maxDirtyNames-1)
	default:
	}
	announce(maxDirtyNames - 1)
	<-a.flushes // sent before MountDirty answered
	a.send(&metapb.MountSessionMsg{Clean: 1})
	await.Until(t, time.Minute, "meta to take A's clean", func() bool {
		st := ts.svc.sessions()
		st.mu.Lock()
		defer st.mu.Unlock()
		ms := st.byID(a.id)
		ms.mu.Lock()
		defer ms.mu.Unlock()
		return ms.cleaned >= 1
	})
	// Once clean, nothing is left of the names.
	a.epoch = 1
	a.dirty(t, "e/x", false)
	if a.recalled(t, func() error {
		_, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "data", Path: "d/f0"})
		return missingOK(err)
	}) {
		t.Error("a name of a clean epoch recalled the mount")
	}
}
