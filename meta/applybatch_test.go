package meta

import (
	"bytes"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Applying Raft's batches of committed entries in one Pebble batch
// (applyEntries) gives the state and answers of applying them one by
// one: with commands that fail (their index moves all the same), one that
// fails after writing part of its changes (parents created, then a
// precondition: the shared batch is applied again without it), inside a
// log entry of several commands, and a request id repeated within one
// batch (applied once).
func TestApplyBatchEqualsOneByOne(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	baseline(t, a, b)
	id := bytes.Repeat([]byte{5}, 16)
	partial := &metapb.Command{NowNs: 2, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{
		Ns: "fsm", Path: "p1/p2/f", Parents: true, IfMatch: "nope", Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 7)}}}}
	var cmds []*metapb.Command
	cmds = append(cmds, fsmCommands(0, 40)...)
	cmds = append(cmds, appendCmd(id, 3), appendCmd(bytes.Repeat([]byte{6}, 16), 4), appendCmd(id, 5))
	// Batches without the partial failure (the shared path), then one
	// with it (the fallback).
	withPartial := append(append(append([]*metapb.Command{}, fsmCommands(40, 50)...), partial), fsmCommands(50, 60)...)
	cmds = append(cmds, withPartial...)

	// The batch with the partial failure is one log entry of several
	// commands (propose.go): they share its index.
	split := len(cmds) - len(withPartial)
	index := func(i int) uint64 { return uint64(2 + min(i, split)) }
	var one []error
	a.mu.Lock()
	for i, c := range cmds {
		_, cmdErr, err := a.applyEntry(c, index(i), false)
		if err != nil {
			t.Fatal(err)
		}
		one = append(one, cmdErr)
	}
	a.mu.Unlock()

	var es1, es2 []entry
	for i, c := range cmds {
		e := entry{c, index(i)}
		if i < split {
			es1 = append(es1, e)
		} else {
			es2 = append(es2, e)
		}
	}
	b.mu.Lock()
	ans1, err := b.applyEntries(es1, false)
	if err != nil {
		t.Fatal(err)
	}
	ans2, err := b.applyEntries(es2, false)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	for i, ans := range append(ans1, ans2...) {
		if (ans.err == nil) != (one[i] == nil) || ans.err != nil && errors.KindOf(ans.err) != errors.KindOf(one[i]) {
			t.Fatalf("entry %d answered %v in a batch, %v alone", i, ans.err, one[i])
		}
	}
	if da, db := dump(t, a.db), dump(t, b.db); da != db {
		t.Fatalf("batched and single application differ:\n%s\nvs\n%s", da, db)
	}
	if got := sizeOf(t, b, "log"); got != 200 {
		t.Fatalf("size %d: an id repeated within a batch applied twice (want 200)", got)
	}
	if _, err := b.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "p1"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the failed commit's parents were kept: %v", err)
	}
	// The in-memory index of request ids matches the store's: reloaded
	// from it, it is the same.
	b.mu.Lock()
	mem := b.reqs
	b.reqs.forget()
	if err := b.reqs.load(b.db); err != nil {
		t.Fatal(err)
	}
	if mem.next != b.reqs.next || len(mem.slot) != len(b.reqs.slot) || len(mem.id) != len(b.reqs.id) {
		t.Fatalf("index in memory %d/%d/%d, from the store %d/%d/%d", mem.next, len(mem.slot), len(mem.id), b.reqs.next, len(b.reqs.slot), len(b.reqs.id))
	}
	b.mu.Unlock()
}

// TestApplyBatchReadsItsOwnExtents: a command that reads a file's extents
// after an earlier command of the same batch wrote to them (an append,
// then a truncate) reads the batch's list, not the committed list the
// read cache holds from an earlier Resolve; applied one by one and in one
// batch, the state is the same. Before, the truncate cut the cached list
// and left the appended extent behind in the batched store.
func TestApplyBatchReadsItsOwnExtents(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	baseline(t, a, b)
	applyAll(t, a, 2, []*metapb.Command{appendCmd(nil, 2)})
	applyAll(t, b, 2, []*metapb.Command{appendCmd(nil, 2)})
	for _, s := range []*Service{a, b} { // the committed list, cached
		r, err := s.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "log", WantExtents: true})
		if err != nil || len(r.Extents) != 1 {
			t.Fatalf("resolve: %v %v", r, err)
		}
	}
	size := uint64(150)
	cmds := []*metapb.Command{appendCmd(nil, 3), {NowNs: 4, Op: &metapb.Command_SetAttr{SetAttr: &metapb.SetAttrRequest{Ns: "fsm", Path: "log", Size: &size}}}}
	applyAll(t, a, 3, cmds)
	b.mu.Lock()
	ans, err := b.applyEntries([]entry{{cmds[0], 3}, {cmds[1], 4}}, false)
	b.mu.Unlock()
	if err != nil || ans[0].err != nil || ans[1].err != nil {
		t.Fatalf("batch: %v %v", err, ans)
	}
	if da, db := dump(t, a.db), dump(t, b.db); da != db {
		t.Fatalf("batched and single application differ:\n%s\nvs\n%s", da, db)
	}
	for _, s := range []*Service{a, b} {
		r, err := s.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "log", WantExtents: true})
		if err != nil || len(r.Extents) != 2 || r.Extents[1].Length != 50 {
			t.Fatalf("after the truncate: %v %v", r, err)
		}
	}
}
