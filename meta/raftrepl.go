package meta

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Commit-only appends. hashicorp/raft's leader sends each follower an
// append of no entries every CommitTimeout to CommitTimeout*2 its log is
// idle, "so that followers learn the commit index", whether the commit
// index moved or not: a group of three on two shared cores spent 140-210
// ms of CPU a second on them with no load at all, and under a write load
// the timer fires between entries, one to three times per entry, each an
// RPC both ends pay for. The leader's transport (replTransport) holds
// back such an append (no entries; heartbeats, which carry no commit
// index, are never held) until:
//
//   - entries were stored in the leader's log meanwhile: they go in this
//     append, as the replication loop would have sent them next (the
//     entries after the request's previous entry, of the request's term:
//     this leader's, as setupAppendEntries reads them);
//   - the commit index moved past what the follower was last told in
//     this term: after rideDelay (the next entry's append usually
//     carries it first), or at once while followers answer linearizable
//     reads (a read index asked within readsRecent: such a follower
//     waits for the commit to reach it);
//   - holdMax passed (a follower that restarted learns the commit index
//     within it).
//
// A commit index raised here is one this member applied as an entry of
// the request's term (so committed, and in every log that holds that
// entry), and at most the request's previous entry, or its last entry
// when it carries entries: a follower's log that matches the request
// there holds the same entries up to it (Raft's log matching). Nothing is
// sent that the leader's own loop would not send; the follower is only
// told later, or sooner, than the timer would tell it.
const (
	holdMax     = 50 * time.Millisecond
	readsRecent = time.Second
)

// rideDelay is how long a commit index that moved waits for the next
// entry's append to carry it. A variable so that a benchmark can compare.
var rideDelay = 20 * time.Millisecond

// holdCommits turns the holding on for groups started after it is set
// (a benchmark compares).
var holdCommits = true

// replTransport is the Raft transport a member replicates through: not
// pipelined (unpipelined), and holding back commit-only appends that say
// nothing new.
type replTransport struct {
	unpipelined
	g    *group
	mu   sync.Mutex
	told map[raft.ServerID]toldCommit
	// held counts the appends held back, commitOnly those of no entries
	// sent (tests).
	held, commitOnly atomic.Uint64
}

// toldCommit is the commit index a follower was last told, in a term.
type toldCommit struct{ term, commit uint64 }

// termIndex is a committed entry: its term and index.
type termIndex struct{ term, index uint64 }

// AppendEntries sends an append, after holding it back while it says
// nothing new (see above).
func (t *replTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.g.holdCommits && len(args.Entries) == 0 && args.LeaderCommitIndex > 0 {
		t.hold(id, args)
	}
	err := t.unpipelined.AppendEntries(id, target, args, resp)
	if args.LeaderCommitIndex > 0 { // not a heartbeat
		if len(args.Entries) == 0 {
			t.commitOnly.Add(1)
		}
		t.mu.Lock()
		if err == nil && resp.Success {
			if t.told == nil {
				t.told = map[raft.ServerID]toldCommit{}
			}
			t.told[id] = toldCommit{term: args.Term, commit: args.LeaderCommitIndex}
		} else {
			delete(t.told, id)
		}
		t.mu.Unlock()
	}
	return err
}

// hold waits while args, an append of no entries, would tell follower id
// nothing new, and fills args with what became new.
func (t *replTransport) hold(id raft.ServerID, args *raft.AppendEntriesRequest) {
	g := t.g
	t.mu.Lock()
	told, ok := t.told[id]
	t.mu.Unlock()
	if !ok || told.term != args.Term || told.commit > args.LeaderCommitIndex {
		return // what the follower knows is not known here: tell it now
	}
	held := false
	defer func() {
		if held {
			t.held.Add(1)
		}
	}()
	end := time.Now().Add(holdMax)
	var ride time.Time // when a moved commit index goes alone
	for {
		wake := g.replWait()
		if g.handingOver.Load() {
			return
		}
		if t.fill(args) {
			return
		}
		if c := min(g.committedIn(args.Term), args.PrevLogEntry); c > args.LeaderCommitIndex {
			args.LeaderCommitIndex = c
		}
		if args.LeaderCommitIndex > told.commit { // news, that can ride the next entries
			if ride.IsZero() {
				ride = time.Now().Add(rideDelay)
			}
			if !time.Now().Before(ride) || g.readsWanted() {
				return
			}
		}
		until := end
		if !ride.IsZero() && ride.Before(until) {
			until = ride
		}
		d := time.Until(until)
		if d <= 0 {
			return
		}
		held = true
		tm := time.NewTimer(d)
		select {
		case <-wake:
		case <-tm.C:
		case <-g.done:
		}
		tm.Stop()
		select {
		case <-g.done:
			return
		default:
		}
	}
}

// fill puts the entries stored after args' previous entry into args, with
// the commit index raised as far as they allow, and reports whether args
// is to go now: entries are there (filled, or not of args' term: then the
// append goes as it is, and the replication loop sends what is there
// next).
func (t *replTransport) fill(args *raft.AppendEntriesRequest) bool {
	g := t.g
	last := g.lastStored.Load()
	if last <= args.PrevLogEntry {
		return false
	}
	last = min(last, args.PrevLogEntry+uint64(maxAppendEntries))
	entries := make([]*raft.Log, 0, last-args.PrevLogEntry)
	for i := args.PrevLogEntry + 1; i <= last; i++ {
		l := new(raft.Log)
		if err := g.logs.GetLog(i, l); err != nil || l.Term != args.Term {
			return true
		}
		entries = append(entries, l)
	}
	args.Entries = entries
	if c := min(g.committedIn(args.Term), last); c > args.LeaderCommitIndex {
		args.LeaderCommitIndex = c
	}
	return true
}

// replWait returns a channel closed at the next event a held append may
// be waiting for: entries stored, an entry applied, a read index asked.
func (g *group) replWait() <-chan struct{} {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	if g.replWake == nil {
		g.replWake = make(chan struct{})
	}
	return g.replWake
}

// replNotify wakes the held appends (replWait).
func (g *group) replNotify() {
	g.rmu.Lock()
	if g.replWake != nil {
		close(g.replWake)
		g.replWake = nil
	}
	g.rmu.Unlock()
}

// noteCommitted records the last entry handed to the state machine (Raft
// hands over committed entries only).
func (g *group) noteCommitted(l *raft.Log) {
	g.committed.Store(&termIndex{term: l.Term, index: l.Index})
	g.replNotify()
}

// committedIn is the last entry of term known committed here (0: none).
func (g *group) committedIn(term uint64) uint64 {
	if c := g.committed.Load(); c != nil && c.term == term {
		return c.index
	}
	return 0
}

// readsWanted reports whether a follower asked for a read index lately.
func (g *group) readsWanted() bool {
	at := g.readAsked.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < readsRecent
}

// noteReadAsked marks a read index asked: held commit indexes go at once.
func (g *group) noteReadAsked() {
	g.readAsked.Store(time.Now().UnixNano())
	g.replNotify()
}

// storeNoting is the log as Raft writes it: it notes the last index
// stored, for the held appends.
type storeNoting struct {
	raft.LogStore
	g *group
}

func (s storeNoting) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s storeNoting) StoreLogs(logs []*raft.Log) error {
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	if len(logs) > 0 {
		s.g.lastStored.Store(logs[len(logs)-1].Index)
		s.g.replNotify()
	}
	return nil
}

func (s storeNoting) DeleteRange(lo, hi uint64) error {
	err := s.LogStore.DeleteRange(lo, hi)
	if last := s.g.lastStored.Load(); lo <= last && last <= hi && lo > 0 {
		s.g.lastStored.Store(lo - 1)
	}
	return err
}
