package meta

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"cairn/proto/metapb"
)

// dump is every key and value of a store, in order.
func dump(t testing.TB, db *pebble.DB) string {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var b bytes.Buffer
	for it.First(); it.Valid(); it.Next() {
		fmt.Fprintf(&b, "%q=%x\n", it.Key(), it.Value())
	}
	return b.String()
}

// fsmCommands is a mixed history: creates, a failing command (its index
// still moves), renames, appends, deletes.
func fsmCommands(from, to int) []*metapb.Command {
	var out []*metapb.Command
	for i := from; i < to; i++ {
		var c *metapb.Command
		switch i % 5 {
		case 0:
			c = &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "fsm", Path: fmt.Sprintf("d%d", i), Parents: true}}}
		case 1:
			c = &metapb.Command{Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{Ns: "fsm", Path: fmt.Sprintf("d%d/f", i-1), Size: 10, Extents: []*metapb.Extent{ext(0, 10, 1, uint64(i))}, Etag: "e"}}}
		case 2:
			c = &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "fsm", Path: fmt.Sprintf("d%d", i-2)}}} // exists: fails
		case 3:
			c = &metapb.Command{Op: &metapb.Command_Rename{Rename: &metapb.RenameRequest{Ns: "fsm", From: fmt.Sprintf("d%d/f", i-3), To: fmt.Sprintf("d%d/g", i-3)}}}
		case 4:
			if i%10 != 4 {
				c = &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "fsm", Path: fmt.Sprintf("d%d/sub", i-4)}}}
				break
			}
			c = &metapb.Command{Op: &metapb.Command_Delete{Delete: &metapb.DeleteRequest{Ns: "fsm", Path: fmt.Sprintf("d%d", i-4), Recursive: true}}}
		}
		c.NowNs = int64(1_700_000_000_000_000_000 + i)
		out = append(out, c)
	}
	return out
}

func openFSM(t testing.TB) *Service {
	t.Helper()
	svc, err := Open(testConfig(t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// applyAll applies cmds as log entries first, first+1, ...
func applyAll(t testing.TB, svc *Service, first uint64, cmds []*metapb.Command) {
	t.Helper()
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for i, c := range cmds {
		if _, _, err := svc.applyEntry(c, first+uint64(i), false); err != nil {
			t.Fatal(err)
		}
	}
}

// baseline is what both stores start from: the same namespace and ids
// (Open sets up a random cluster id and root, which differ per store).
func baseline(t testing.TB, a, b *Service) {
	t.Helper()
	snap := a.db.NewSnapshot()
	defer snap.Close()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, snap, 0); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&buf)
	if _, err := readSnapshotHeader(br); err != nil {
		t.Fatal(err)
	}
	if err := loadSnapshot(b.db, br, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.rebuild(); err != nil {
		t.Fatal(err)
	}
}

func TestFSMSameCommandsSameState(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	baseline(t, a, b)
	cmds := fsmCommands(0, 100)
	applyAll(t, a, 2, cmds)
	applyAll(t, b, 2, cmds)
	da, db := dump(t, a.db), dump(t, b.db)
	if da != db {
		t.Fatalf("two stores applying the same commands differ:\n%s\nvs\n%s", da, db)
	}
	if got, _ := appliedIndex(a.db); got != 101 {
		t.Fatalf("applied index %d, want 101 (failed commands move it too)", got)
	}
}

func TestFSMSnapshotRestoreThenMoreEqualsAll(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	cmds := fsmCommands(0, 200)
	applyAll(t, a, 2, cmds[:120])

	// b restores a's snapshot taken after 121 entries, then applies the
	// rest; a applies the rest directly.
	snap := a.db.NewSnapshot()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, snap, 121); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	applyAll(t, b, 1, fsmCommands(500, 520)) // b had a history of its own: the restore replaces it
	br := bufio.NewReader(&buf)
	applied, err := readSnapshotHeader(br)
	if err != nil || applied != 121 {
		t.Fatalf("header: %d %v", applied, err)
	}
	if err := loadSnapshot(b.db, br, applied); err != nil {
		t.Fatal(err)
	}
	if err := b.rebuild(); err != nil {
		t.Fatal(err)
	}
	applyAll(t, a, 122, cmds[120:])
	applyAll(t, b, 122, cmds[120:])
	if da, db := dump(t, a.db), dump(t, b.db); da != db {
		t.Fatalf("snapshot + restore + the rest differs from applying everything:\n%s\nvs\n%s", da, db)
	}
	// The caches follow the store: b answers from what it restored.
	if _, err := b.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "d195"}); err != nil {
		t.Fatalf("restored replica does not see d195: %v", err)
	}
}

func TestSnapshotRejectsDamage(t *testing.T) {
	a := openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, a.db, 1); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	for _, cut := range []int{3, len(snapshotMagic) + 4, len(whole) / 2, len(whole) - 1} {
		br := bufio.NewReader(bytes.NewReader(whole[:cut]))
		applied, err := readSnapshotHeader(br)
		if err == nil {
			b := openFSM(t)
			err = loadSnapshot(b.db, br, applied)
		}
		if err == nil {
			t.Errorf("snapshot cut at %d of %d bytes was taken", cut, len(whole))
		}
	}
}

func FuzzSnapshotLoad(f *testing.F) {
	svc := openFSM(f)
	var buf bytes.Buffer
	writeSnapshot(&buf, svc.db, 7)
	f.Add(buf.Bytes())
	f.Add([]byte(snapshotMagic + "\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		applied, err := readSnapshotHeader(br)
		if err != nil {
			return
		}
		loadSnapshot(svc.db, br, applied) // must not panic or allocate without bound
	})
}
