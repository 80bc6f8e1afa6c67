package meta

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// fsmMember is svc as the state machine of a group member, without Raft:
// entries reach it through ApplyBatch as Raft hands them over.
func fsmMember(t testing.TB, svc *Service) *group {
	t.Helper()
	applied, err := appliedIndex(svc.db)
	if err != nil {
		t.Fatal(err)
	}
	g := &group{s: svc}
	g.applied.Store(applied)
	// The request index loaded, as a member's is once it applied a
	// command or led: applying write sets must keep it up to date.
	svc.mu.Lock()
	err = svc.reqs.load(svc.db)
	svc.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// replicate makes to's store a copy of from's, applied index included
// (baseline's copy has none).
func replicate(t testing.TB, from, to *Service) {
	t.Helper()
	applied, err := appliedIndex(from.db)
	if err != nil {
		t.Fatal(err)
	}
	snap := from.db.NewSnapshot()
	defer snap.Close()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, snap, applied); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(&buf)
	if _, err := readSnapshotHeader(br); err != nil {
		t.Fatal(err)
	}
	if err := loadSnapshot(to.db, br, applied); err != nil {
		t.Fatal(err)
	}
	if err := to.rebuild(); err != nil {
		t.Fatal(err)
	}
}

// evalEntry has leader l evaluate cmds as one entry, as its proposer
// does: the log entry and the answers its callers get once it applies.
func evalEntry(t testing.TB, l *group, cmds []*metapb.Command) ([]byte, []applyAnswer) {
	t.Helper()
	ps := make([]*proposal, len(cmds))
	for i, c := range cmds {
		ps[i] = &proposal{cmd: proto.Clone(c).(*metapb.Command)}
	}
	data, answers, err := l.evaluate(ps)
	if err != nil {
		t.Fatal(err)
	}
	if !isWriteSet(data) {
		t.Fatal("the leader's entry is not a write set")
	}
	return data, answers
}

// applyLog has member m apply data as committed entry index.
func applyLog(m *group, index uint64, data []byte) any {
	return (*raftFSM)(m).ApplyBatch([]*raft.Log{{Type: raft.LogCommand, Index: index, Data: data}})[0]
}

// sameMemory checks what members keep in memory of the applied state:
// the request table's index (also against the store's), the volumes and
// draining servers, the last event, the orphans.
func sameMemory(t *testing.T, svcs ...*Service) {
	t.Helper()
	type mem struct {
		next, ids         uint64
		vols, drain, orph string
		last              uint64
	}
	var first mem
	for i, s := range svcs {
		s.mu.Lock()
		got := s.reqs
		s.reqs.forget()
		err := s.reqs.load(s.db)
		stored := s.reqs
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if got.loaded && (got.next != stored.next || len(got.slot) != len(stored.slot) || len(got.id) != len(stored.id)) {
			t.Fatalf("store %d: request index in memory %d/%d, from the store %d/%d", i, got.next, len(got.slot), stored.next, len(stored.slot))
		}
		for id, n := range got.slot {
			if stored.slot[id] != n {
				t.Fatalf("store %d: request id %x in slot %d in memory, %d in the store", i, id, n, stored.slot[id])
			}
		}
		m := mem{next: stored.next, ids: uint64(len(stored.slot))}
		s.pmu.Lock()
		m.vols = fmt.Sprint(len(s.volumes))
		for id := range uint32(64) {
			if v := s.volumes[id]; v != nil {
				m.vols += fmt.Sprintf(" %d:%v", id, v.Servers)
			}
		}
		m.drain = fmt.Sprint(s.cl.draining)
		s.pmu.Unlock()
		s.hub.mu.Lock()
		m.last = s.hub.last
		s.hub.mu.Unlock()
		o := s.openFiles()
		o.mu.Lock()
		m.orph = fmt.Sprint(o.orphans)
		o.mu.Unlock()
		if i == 0 {
			first = m
		} else if m != first {
			t.Fatalf("store %d keeps %+v in memory, store 0 %+v", i, m, first)
		}
	}
}

// wsHistory is a mixed history in log entries of one to seven commands:
// creates, renames, deletes, failing commands, a command that fails after
// writing (in an entry of several), request ids (one repeated in a later
// entry and within one), volumes, a draining server, an unlink of a file
// kept open (an orphan).
func wsHistory() [][]*metapb.Command {
	cmds := fsmCommands(0, 60)
	idA, idB := bytes.Repeat([]byte{7}, 16), bytes.Repeat([]byte{8}, 16)
	partial := &metapb.Command{NowNs: 2, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{
		Ns: "fsm", Path: "p1/p2/f", Parents: true, IfMatch: "nope", Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 7)}}}}
	vol := func(id uint32, srv string) *metapb.Command {
		return &metapb.Command{NowNs: 3, Op: &metapb.Command_PutVolume{PutVolume: &metapb.Volume{Id: id, Generation: 1, Servers: []string{srv}, ServerIds: []string{srv}}}}
	}
	drain := &metapb.Command{NowNs: 4, Op: &metapb.Command_ServerState{ServerState: &metapb.ClusterServerState{ServerId: "s1", Draining: true}}}
	kept := &metapb.Command{NowNs: 5, KeepUnlinked: true, Op: &metapb.Command_Delete{Delete: &metapb.DeleteRequest{Ns: "fsm", Path: "open"}}}
	openFile := &metapb.Command{NowNs: 5, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{Ns: "fsm", Path: "open", Size: 3, Extents: []*metapb.Extent{ext(0, 3, 1, 99)}}}}
	var out [][]*metapb.Command
	sizes := []int{1, 3, 7, 2, 5}
	for i, k := 0, 0; i < len(cmds); k++ {
		n := min(sizes[k%len(sizes)], len(cmds)-i)
		out = append(out, cmds[i:i+n])
		i += n
	}
	out = append(out,
		[]*metapb.Command{appendCmd(idA, 10), appendCmd(idB, 11), appendCmd(idA, 12)},
		[]*metapb.Command{appendCmd(idA, 13)},
		[]*metapb.Command{vol(3, "a:1"), drain, vol(4, "b:1")},
		append(append(fsmCommands(60, 63), partial), fsmCommands(63, 66)...),
		[]*metapb.Command{openFile},
		[]*metapb.Command{kept, vol(3, "c:1")},
	)
	return out
}

// TestWriteSetsEqualCommands: a mixed history proposed as write sets
// that the leader evaluates and every member applies (the leader too,
// through its state machine) leaves the follower's store and what it
// keeps in memory equal to the leader's, and both equal to a third store
// that ran the same entries as commands; the answers are the same.
func TestWriteSetsEqualCommands(t *testing.T) {
	a, b, c := openFSM(t), openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	replicate(t, a, b)
	replicate(t, a, c)
	leader, follower := fsmMember(t, a), fsmMember(t, b)
	index := uint64(2)
	for k, cmds := range wsHistory() {
		data, answers := evalEntry(t, leader, cmds)
		for _, m := range []*group{leader, follower} {
			if got := applyLog(m, index, data); got != (applyAnswer{}) {
				t.Fatalf("entry %d: answered %v", k, got)
			}
		}
		es := make([]entry, len(cmds))
		for i, cmd := range cmds {
			es[i] = entry{proto.Clone(cmd).(*metapb.Command), index}
		}
		c.mu.Lock()
		want, err := c.applyEntries(es, false)
		c.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		for i := range cmds {
			got, w := answers[i], want[i]
			if (got.err == nil) != (w.err == nil) || got.err != nil && errors.KindOf(got.err) != errors.KindOf(w.err) {
				t.Fatalf("entry %d command %d: write set answered %v, the command %v", k, i, got.err, w.err)
			}
			if got.res != nil && w.res != nil && got.res.inode != nil && (w.res.inode == nil || got.res.inode.Ino != w.res.inode.Ino || got.res.inode.Seq != w.res.inode.Seq) {
				t.Fatalf("entry %d command %d: write set answered inode %v, the command %v", k, i, got.res.inode, w.res.inode)
			}
		}
		index++
	}
	da, db, dc := dump(t, a.db), dump(t, b.db), dump(t, c.db)
	if da != db {
		t.Fatalf("the follower's store differs from the leader's:\n%s\nvs\n%s", db, da)
	}
	if da != dc {
		t.Fatalf("write sets and commands give different stores:\n%s\nvs\n%s", da, dc)
	}
	if got := sizeOf(t, b, "log"); got != 200 {
		t.Fatalf("log is %d bytes, want 200 (a request id repeated applied once)", got)
	}
	sameMemory(t, a, b, c)
	if !b.cl.draining["s1"] || b.volumes[3] == nil || b.volumes[3].Servers[0] != "c:1" {
		t.Fatalf("the follower's caches missed the volume or draining commands: %v %v", b.cl.draining, b.volumes[3])
	}
}

// TestWriteSetOfDeposedLeaderLeavesNoTrace: a leader evaluates an entry
// (a commit with a request id), is deposed before it commits, and the
// new leader's entry commits instead. The evaluation left nothing on the
// old leader: its store and memory (the request index above all) equal
// the new leader's, the file is not there. The old entry reaching the
// log later, behind the new one (a deposed leader that leads again and
// appends what it evaluated before), changes nothing on any member but
// the applied index; the same request sent again applies once.
func TestWriteSetOfDeposedLeaderLeavesNoTrace(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	replicate(t, a, b)
	old, cur := fsmMember(t, a), fsmMember(t, b)
	id := bytes.Repeat([]byte{9}, 16)
	ghost := func(now int64) []*metapb.Command {
		return []*metapb.Command{
			{NowNs: now, RequestId: id, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{Ns: "fsm", Path: "ghost/f", Parents: true, Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 5)}}}},
			{NowNs: now, Op: &metapb.Command_PutVolume{PutVolume: &metapb.Volume{Id: 9, Generation: 1}}},
		}
	}
	// The old leader's evaluation, and reads that warm its cache.
	stale, _ := evalEntry(t, old, ghost(2))
	if _, err := a.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "ghost/f"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the evaluated commit is visible before its entry applied: %v", err)
	}
	real, _ := evalEntry(t, cur, []*metapb.Command{{NowNs: 3, Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "fsm", Path: "real"}}}})
	for _, m := range []*group{old, cur} {
		if got := applyLog(m, 2, real); got != (applyAnswer{}) {
			t.Fatalf("the new leader's entry: %v", got)
		}
	}
	check := func(when string) {
		t.Helper()
		if da, db := dump(t, a.db), dump(t, b.db); da != db {
			t.Fatalf("%s: the old leader's store differs from the new one's:\n%s\nvs\n%s", when, da, db)
		}
		sameMemory(t, a, b)
		for _, s := range []*Service{a, b} {
			if _, err := s.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "ghost/f"}); !errors.Is(errors.NotExist, err) {
				t.Fatalf("%s: the deposed leader's commit is visible: %v", when, err)
			}
			if s.volumes[9] != nil {
				t.Fatalf("%s: the deposed leader's volume is cached", when)
			}
		}
	}
	check("after the new leader's entry")

	for _, m := range []*group{old, cur} {
		if got := applyLog(m, 3, stale); got != (applyAnswer{err: errStaleWriteSet}) {
			t.Fatalf("the stale entry answered %v, want errStaleWriteSet", got)
		}
		if got, _ := appliedIndex(m.s.db); got != 3 || m.applied.Load() != 3 {
			t.Fatalf("applied index %d (memory %d) after the stale entry, want 3", got, m.applied.Load())
		}
	}
	check("after the stale entry")

	// The client's retry, to the old leader leading again: applied once.
	again, answers := evalEntry(t, old, ghost(4))
	if answers[0].err != nil || answers[0].res.inode == nil {
		t.Fatalf("the retry answered %v", answers[0])
	}
	for _, m := range []*group{old, cur} {
		if got := applyLog(m, 4, again); got != (applyAnswer{}) {
			t.Fatalf("the retry's entry: %v", got)
		}
	}
	if da, db := dump(t, a.db), dump(t, b.db); da != db {
		t.Fatal("the members differ after the retry")
	}
	sameMemory(t, a, b)
	for _, s := range []*Service{a, b} {
		if got := sizeOf(t, s, "ghost/f"); got != 1 || s.volumes[9] == nil {
			t.Fatalf("the retry did not apply: size %d, volume %v", got, s.volumes[9])
		}
	}
}

// TestDecodeWriteSetRefusesDamage: a write set whose batch is cut short,
// miscounted, or writes the applied index is refused as corrupt, on
// every member alike.
func TestDecodeWriteSetRefusesDamage(t *testing.T) {
	a := openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	data, _ := evalEntry(t, fsmMember(t, a), fsmCommands(0, 3))
	ws, err := decodeWriteSet(data)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(ws *metapb.WriteSet) []byte {
		b, err := proto.Marshal(ws)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{writeSetMarker}, b...)
	}
	cut := proto.Clone(ws).(*metapb.WriteSet)
	cut.Batch = cut.Batch[:len(cut.Batch)-3]
	miscount := proto.Clone(ws).(*metapb.WriteSet)
	miscount.Batch[8]++ // the count, after the 8-byte sequence number
	applied := proto.Clone(ws).(*metapb.WriteSet)
	b := a.db.NewBatch()
	b.Set(keyApplied, be64(99), nil)
	applied.Batch = append([]byte(nil), b.Repr()...)
	b.Close()
	for name, bad := range map[string][]byte{"cut": enc(cut), "miscounted": enc(miscount), "applied": enc(applied), "not proto": {writeSetMarker, 0xff}} {
		if _, err := decodeWriteSet(bad); !errors.Is(errors.Corrupt, err) {
			t.Errorf("%s: %v, want Corrupt", name, err)
		}
	}
}

// commandEntries returns m's log entries after index first that carry
// commands or write sets (not Raft's own: no-ops, barriers,
// configurations).
func commandEntries(t testing.TB, m *member, first uint64) []raft.Log {
	t.Helper()
	last, err := m.svc.group.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var out []raft.Log
	for i := first + 1; i <= last; i++ {
		var e raft.Log
		if err := m.svc.group.logs.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if e.Type == raft.LogCommand {
			out = append(out, e)
		}
	}
	return out
}

// commandsIn counts the commands of a log entry: a write set's effects
// (each command of TestGroupBatchesProposals has one), or the commands.
func commandsIn(t testing.TB, data []byte) int {
	t.Helper()
	if isWriteSet(data) {
		ws, err := decodeWriteSet(data)
		if err != nil {
			t.Fatal(err)
		}
		return len(ws.Effects)
	}
	cmds, err := decodeEntry(data)
	if err != nil {
		t.Fatal(err)
	}
	return len(cmds)
}

// TestGroupWriteSetsMembersEqual: a group under a mixed concurrent load
// from several clients (entries of several commands, failing commands,
// request ids) logs only write sets, and every member ends with the
// leader's store and caches.
func TestGroupWriteSetsMembersEqual(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	if !l.svc.group.props.writeSets {
		t.Fatal("the group proposes commands, not write sets")
	}
	await.Until(t, 20*time.Second, "the leader knows every member reads write sets", l.svc.group.writeSetsAgreed)
	cl := g.client()
	mkns(t, cl, "wsload")
	first, err := l.svc.group.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := fmt.Sprintf("w%d", w)
			for i := range 25 {
				f := fmt.Sprintf("%s/f%d", d, i/6) // one file per round of the six ops
				var err error
				switch i % 6 {
				case 0:
					_, err = cl.Commit(bg, &metapb.CommitRequest{Ns: "wsload", Path: f, Parents: true, Size: 10, Extents: []*metapb.Extent{ext(0, 10, 1, uint64(w*1000+i))}, Etag: "e"})
				case 1:
					_, err = cl.Append(bg, &metapb.AppendRequest{Ns: "wsload", Path: d + "/log", Create: true, Parents: true, Extents: []*metapb.Extent{ext(0, 5, 1, uint64(w*1000+i))}})
				case 2:
					_, err = cl.Rename(bg, &metapb.RenameRequest{Ns: "wsload", From: f, To: f + ".r"})
				case 3:
					size := uint64(3)
					_, err = cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "wsload", Path: d + "/log", Size: &size})
				case 4:
					_, err = cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "wsload", Path: d}) // exists: fails
					if errors.Is(errors.Exist, err) {
						err = nil
					}
				case 5:
					_, err = cl.Delete(bg, &metapb.DeleteRequest{Ns: "wsload", Path: f + ".r"})
					if errors.Is(errors.NotExist, err) {
						err = nil
					}
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d op %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	entries, most := 0, 0
	for _, e := range commandEntries(t, l, first) {
		if !isWriteSet(e.Data) {
			t.Fatalf("entry %d is not a write set", e.Index)
		}
		entries++
		most = max(most, commandsIn(t, e.Data))
	}
	t.Logf("%d write sets, the largest of %d commands", entries, most)
	applied := l.svc.group.applied.Load()
	var svcs []*Service
	for _, m := range g.members {
		await.Until(t, 20*time.Second, "every member applied the load", func() bool { return m.svc.group.applied.Load() >= applied })
		svcs = append(svcs, m.svc)
	}
	want := dump(t, l.svc.db)
	for _, m := range g.members {
		if got := dump(t, m.svc.db); got != want {
			t.Fatalf("member %s's store differs from the leader's", m.addr)
		}
	}
	sameMemory(t, svcs...)
}

// TestGroupLargeWriteSetGoesAsCommands: a recursive delete whose write set
// passes maxWriteSetBytes goes to the log as the command, which every
// member runs; the write sets around it apply as before, and the members
// end equal.
func TestGroupLargeWriteSetGoesAsCommands(t *testing.T) {
	defer func(n int) { maxWriteSetBytes = n }(maxWriteSetBytes)
	maxWriteSetBytes = 4096
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	await.Until(t, 20*time.Second, "the leader knows every member reads write sets", l.svc.group.writeSetsAgreed)
	cl := g.client()
	mkns(t, cl, "big")
	first, err := l.svc.group.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		put(t, cl, "big", fmt.Sprintf("tree/f%d", i), 1, uint64(i+1))
	}
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "big", Path: "tree", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	put(t, cl, "big", "after", 1, 100)
	sets, commands := 0, 0
	for _, e := range commandEntries(t, l, first) {
		if isWriteSet(e.Data) {
			sets++
			continue
		}
		cmds, err := decodeEntry(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cmds[0].Op.(*metapb.Command_Delete); !ok || len(cmds) != 1 {
			t.Fatalf("entry %d holds commands %v; only the delete's write set is too large", e.Index, cmds)
		}
		commands++
	}
	if sets < 61 || commands != 1 {
		t.Fatalf("%d write sets and %d entries of commands, want 61 (or more: meta's own commands) and 1", sets, commands)
	}
	applied := l.svc.group.applied.Load()
	var svcs []*Service
	want := dump(t, l.svc.db)
	for _, m := range g.members {
		await.Until(t, 20*time.Second, "every member applied the delete", func() bool { return m.svc.group.applied.Load() >= applied })
		if got := dump(t, m.svc.db); got != want {
			t.Fatalf("member %s's store differs from the leader's", m.addr)
		}
		if _, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "big", Path: "tree/f7"}); !errors.Is(errors.NotExist, err) {
			t.Fatalf("member %s still has a deleted file: %v", m.addr, err)
		}
		svcs = append(svcs, m.svc)
	}
	sameMemory(t, svcs...)
}

// BenchmarkApplyWriteSets is BenchmarkApplyEntries for a follower of a
// group that proposes write sets: the cost per command of applying the
// leader's evaluation (ids=true: with request ids).
func BenchmarkApplyWriteSets(b *testing.B) {
	for _, per := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("ids=true/per=%d", per), func(b *testing.B) { benchApplyWriteSets(b, per) })
	}
}

func benchApplyWriteSets(b *testing.B, per int) {
	leader, follower := openFSM(b), openFSM(b)
	applyAll(b, leader, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "bench", Owner: "o"}}}})
	replicate(b, leader, follower)
	l, f := fsmMember(b, leader), fsmMember(b, follower)
	var entries [][]byte
	index := uint64(2)
	for i := 0; i < b.N; i += per {
		cmds := make([]*metapb.Command, 0, per)
		for j := i; j < i+per; j++ {
			id := make([]byte, 16)
			rand.Read(id)
			cmds = append(cmds, &metapb.Command{NowNs: int64(j), RequestId: id, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{
				Ns: "bench", Path: fmt.Sprintf("d%d/f%d", j%64, j), Parents: true, Size: 1,
				Extents: []*metapb.Extent{{Length: 1, Volume: 1, Key: uint64(j)}}}}})
		}
		data, _ := evalEntry(b, l, cmds)
		if got := applyLog(l, index, data); got != (applyAnswer{}) {
			b.Fatal(got)
		}
		entries = append(entries, data)
		index++
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() {
		b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/cmd")
	}()
	for k, data := range entries {
		if got := applyLog(f, uint64(2+k), data); got != (applyAnswer{}) {
			b.Fatal(got)
		}
	}
}

// BenchmarkGroupCommitGRPCCommandEntries is BenchmarkGroupCommitGRPC with
// the leader proposing commands that every member runs, as before write
// sets (writeSetsOff).
func BenchmarkGroupCommitGRPCCommandEntries(b *testing.B) {
	defer func(off bool) { writeSetsOff = off }(writeSetsOff)
	writeSetsOff = true
	BenchmarkGroupCommitGRPC(b)
}
