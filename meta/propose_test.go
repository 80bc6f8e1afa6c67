package meta

import (
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// BenchmarkApplyEntries is one member's state machine under
// BenchmarkGroupCommitGRPC's load: new small files committed, one or
// eight commands per Pebble batch (one Raft batch of committed entries),
// with request ids as a group's clients send them or without (the cost of
// the dedup table on every member), no fsync (a member's store has no
// WAL; this one writes its WAL unsynced).
func BenchmarkApplyEntries(b *testing.B) {
	for _, ids := range []bool{true, false} {
		for _, per := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("ids=%v/per=%d", ids, per), func(b *testing.B) { benchApplyEntries(b, per, ids) })
		}
	}
}

func benchApplyEntries(b *testing.B, per int, ids bool) {
	svc := openFSM(b)
	applyAll(b, svc, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "bench", Owner: "o"}}}})
	mk := func(i int) entry {
		var id []byte
		if ids {
			id = make([]byte, 16)
			rand.Read(id)
		}
		return entry{&metapb.Command{NowNs: int64(i), RequestId: id, Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{
			Ns: "bench", Path: fmt.Sprintf("d%d/f%d", i%64, i), Parents: true, Size: 1,
			Extents: []*metapb.Extent{{Length: 1, Volume: 1, Key: uint64(i)}}}}}, uint64(1000 + i)}
	}
	var batches [][]entry
	for i := 0; i < b.N; i += per {
		es := make([]entry, 0, per)
		for j := i; j < i+per; j++ {
			es = append(es, mk(j))
		}
		batches = append(batches, es)
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() {
		// Steadier than ns/op on a loaded machine.
		b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/cmd")
	}()
	for _, es := range batches {
		svc.mu.Lock()
		as, err := svc.applyEntries(es, false)
		svc.mu.Unlock()
		if err != nil || as[0].err != nil {
			b.Fatal(err, as[0].err)
		}
	}
}

// TestGroupBatchesProposals holds the leader's state machine so that the
// first entries stay in flight, and sees the commands that arrive
// meanwhile go to the log together, in one entry, each answered with its
// own result once applied.
func TestGroupBatchesProposals(t *testing.T) {
	// The queue behind the entries in flight is what this test counts:
	// without gathering (propose.go), which could hold the first commands
	// back to wait for more (TestGatherFor).
	defer func(off bool) { gatherOff = off }(gatherOff)
	gatherOff = true
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "batch")
	first, err := l.svc.group.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}

	const n = 24
	l.svc.mu.Lock() // nothing applies on the leader: nothing it proposed is answered
	locked := true
	defer func() {
		if locked {
			l.svc.mu.Unlock()
		}
	}()
	type answer struct {
		ino *metapb.Inode
		err error
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			ino, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "batch", Path: fmt.Sprintf("f%d", i), Size: uint64(i + 1),
				Extents: []*metapb.Extent{ext(0, uint64(i+1), 1, uint64(100+i))}})
			answers <- answer{ino, err}
		}()
	}
	q := &l.svc.group.props
	await.Until(t, 20*time.Second, "commands waiting behind the entries in flight", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.inflight == q.depth && len(q.waiting) == n-q.depth
	})
	l.svc.mu.Unlock()
	locked = false

	for range n {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		// Each caller got its own file's inode.
		r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "batch", Path: fmt.Sprintf("f%d", a.ino.Size-1)})
		if err != nil || r.Inode.Ino != a.ino.Ino {
			t.Fatalf("answered inode %d for f%d, which resolves to %v (%v)", a.ino.Ino, a.ino.Size-1, r, err)
		}
	}
	entries, most := 0, 0
	lastCmd := first // the store's applied index counts commands: Raft's own entries (an election's no-op and barrier, under load) never reach it
	for _, e := range commandEntries(t, l, first) {
		entries++
		most = max(most, commandsIn(t, e.Data))
		lastCmd = e.Index
	}
	if entries >= n || most != n-q.depth {
		t.Fatalf("%d commands went to the log as %d entries, the largest holding %d (want %d)", n, entries, most, n-q.depth)
	}
	// The followers applied the batch as the leader did.
	for _, m := range g.members {
		await.Until(t, 20*time.Second, "every member applied the batch", func() bool {
			return m.svc.group.applied.Load() >= lastCmd
		})
		for i := range n {
			if _, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "batch", Path: fmt.Sprintf("f%d", i)}); err != nil {
				t.Fatalf("member %s: f%d: %v", m.addr, i, err)
			}
		}
	}
}

// FuzzDecodeEntry reads log entries as a member receives them from the
// leader: never a panic, and a batch decodes to the commands encoded.
func FuzzDecodeEntry(f *testing.F) {
	enc := func(cmds ...*metapb.Command) []byte {
		var ps []*proposal
		for _, c := range cmds {
			b, err := proto.Marshal(c)
			if err != nil {
				f.Fatal(err)
			}
			ps = append(ps, &proposal{data: b})
		}
		return encodeEntry(ps)
	}
	mk := func(p string) *metapb.Command {
		return &metapb.Command{NowNs: 7, Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "n", Path: p}}}
	}
	f.Add(enc(mk("a")))
	f.Add(enc(mk("a"), mk("b"), mk("c")))
	f.Add([]byte{batchMarker})
	f.Add([]byte{batchMarker, 0x80})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, err := decodeEntry(data)
		if err != nil {
			return
		}
		if len(cmds) == 0 {
			t.Fatal("an entry decoded to no command")
		}
		if len(cmds) > 1 {
			again, err := decodeEntry(enc(cmds...))
			if err != nil || len(again) != len(cmds) {
				t.Fatalf("re-encoded batch of %d: %d, %v", len(cmds), len(again), err)
			}
			for i := range cmds {
				if !proto.Equal(cmds[i], again[i]) {
					t.Fatalf("command %d changed re-encoded", i)
				}
			}
		}
	})
}

// BenchmarkGroupCommitGRPCInflight2 is BenchmarkGroupCommitGRPC with two
// entries in flight instead of one (maxInflight).
func BenchmarkGroupCommitGRPCInflight2(b *testing.B) {
	defer func(n int) { maxInflight = n }(maxInflight)
	maxInflight = 2
	BenchmarkGroupCommitGRPC(b)
}

// BenchmarkGroupCommitGRPCNoGather is BenchmarkGroupCommitGRPC with each
// entry sent as soon as the last is answered (no gathering, propose.go).
func BenchmarkGroupCommitGRPCNoGather(b *testing.B) {
	defer func(off bool) { gatherOff = off }(gatherOff)
	gatherOff = true
	BenchmarkGroupCommitGRPC(b)
}

// TestGatherFor: the proposer that holds the slot takes the commands that
// arrive while it gathers, up to the number it waits for, and sends what
// waits when they stop arriving.
func TestGatherFor(t *testing.T) {
	q := &proposer{depth: 1, arrived: make(chan struct{}, 1), round: time.Hour}
	mk := func() *proposal { return &proposal{data: []byte{1}, wake: make(chan struct{}, 1)} }
	first := mk()
	q.waiting = []*proposal{first}
	go func() {
		for range 3 { // as propose queues them
			q.mu.Lock()
			q.waiting = append(q.waiting, mk())
			if q.gathering {
				select {
				case q.arrived <- struct{}{}:
				default:
				}
			}
			q.mu.Unlock()
		}
	}()
	got := q.gatherFor(4) // an idle wait of 15 minutes: only the arrivals end it
	if len(got) != 4 || got[0] != first || len(q.waiting) != 0 {
		t.Fatalf("gathered %d (first %v), left %d; want the 4", len(got), got[0] == first, len(q.waiting))
	}
	// Nothing more arrives: the wait ends after the idle share of a
	// short round with what waits.
	q.round = 20 * time.Millisecond
	q.waiting = []*proposal{first}
	if got := q.gatherFor(8); len(got) != 1 || q.gathering {
		t.Fatalf("gathered %d with none arriving (gathering %v)", len(got), q.gathering)
	}
}
