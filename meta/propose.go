package meta

import (
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Proposal batching. Every Raft log entry costs each member a share of an
// fsync, an append on the wire, a log record and an apply, and on two
// shared cores the members' CPU per command sets the group's pace. So the
// leader keeps at most maxInflight entries between Apply and its answer,
// and the commands that arrive meanwhile wait and go together as the next
// entry: the busier meta is, the more commands each entry carries, with
// no timer (a command that finds nothing in flight is proposed at once).
//
// With one entry in flight (the default) an entry is the leader's
// evaluation of its commands, a write set (writeset.go), once every
// member says it reads them (raftlevel.go). Otherwise, an
// entry holding one command is that command's encoding, as before; one
// holding several is batchMarker followed by each encoded command behind
// its length (a uvarint). No encoded Command starts with a zero byte (a
// protobuf field tag is never 0), so the two cannot be confused. The
// commands of one entry are applied in order in one Pebble batch, so an
// entry is applied entirely or not at all (raftFSM.ApplyBatch), and each
// command gets its own answer, as if proposed alone.

// batchMarker starts a log entry that holds several commands.
const batchMarker = 0

// maxInflight is how many entries the leader's proposals keep in Raft at
// once. One: the next entry waits for the last to be applied, gathering
// every command that arrives meanwhile. Two would let the next entry's
// write to the leader's log overlap the last one's replication
// (hashicorp/raft syncs the leader's log before it replicates), but the
// leader loop, busy syncing, then takes in the followers' answers late,
// and every member pays an fsync, an append and an FSM batch per entry:
// in paired runs one in flight cost less CPU per commit (see
// docs/architecture.md). A variable only so that a benchmark can compare
// (BenchmarkGroupCommitGRPCInflight2).
var maxInflight = 1

const (
	// maxEntryCommands and maxEntryBytes bound one entry: what waits
	// beyond them goes in the next (a command larger than maxEntryBytes
	// goes alone).
	maxEntryCommands = 512
	maxEntryBytes    = 1 << 20
)

// Gathering. With one entry in flight and n callers each with one
// command at a time, the entries alternate: the callers of the entry just
// answered send their next commands while the others' entry is in flight,
// so each entry holds about n/2 commands and each caller waits out two
// rounds of the log per command. Every entry costs each member an fsync
// (about 190 us of CPU on this class of VM), an append on the wire and a
// Raft round. So when an entry is answered while commands wait, or an
// entry of several commands is answered and the first of its callers
// comes back within a round, the next entry is not sent at once: its
// first proposer waits, briefly, for the callers just answered to send
// their next commands, and the entry takes them too. It stops waiting
// when as many wait as the entries held (the callers are all back), when
// none arrives within gatherIdle of the last, or after gatherMax: a
// caller that does not come back (a PUT uploading its next body first)
// costs the waiting commands gatherIdle, a small part of a round. A lone
// caller (entries of one command) is still proposed at once: no timer
// stands in its way.
var (
	// gatherIdle bounds the wait for the next arrival, and gatherMax the
	// whole wait, each as a share of the last entry's round (Apply to its
	// answer): a slower group (a loaded machine, a slower disk) waits
	// longer, in proportion.
	gatherIdle = 0.25
	gatherMax  = 0.5
	// maxGatherRound bounds the round gathering takes its waits from.
	maxGatherRound = 40 * time.Millisecond
	// gatherOff turns gathering off in groups started after it is set
	// (a benchmark compares).
	gatherOff = false
)

// proposer is a group's queue of commands waiting for an entry.
type proposer struct {
	depth    int  // maxInflight when the group started
	noGather bool // gatherOff when the group started
	// writeSets: the leader proposes its evaluations (writeset.go), with
	// one entry in flight and writeSetsOff unset when the group started.
	writeSets bool
	mu        sync.Mutex
	waiting   []*proposal
	inflight  int // entries between Apply and their answers
	// arrived is signalled (without blocking) by each command queued
	// while a proposer gathers.
	arrived   chan struct{}
	gathering bool
	round     time.Duration // the last entry's, Apply to answer
	lastSize  int           // the commands it held
	lastDone  time.Time     // when it was answered
}

// proposal is one command on its way through the log.
type proposal struct {
	cmd  *metapb.Command
	size int    // the command's encoded size
	data []byte // its encoding, for an entry of commands (nil with write sets)
	// wake is signalled once: when the command is answered, or when this
	// proposal is to send the entry lead (which holds it) itself.
	wake chan struct{}
	lead []*proposal
	ans  applyAnswer
	// appendErr: the entry could not be appended or its fate is unknown
	// (the answer then is this error, not the state machine's).
	appendErr error
	// gather, when woken without lead: this proposal (first in the
	// queue) holds the slot for the next entry and gathers until this
	// many wait (see Gathering), then sends them.
	gather int
}

// propose appends cmd to the group's log, together with whatever other
// commands wait, and returns its answer once it is committed and applied
// here, the leader.
func (g *group) propose(cmd *metapb.Command) (*result, error) {
	const op = errors.Op("meta.propose")
	cmd.NowNs = time.Now().UnixNano()
	q := &g.props
	p := &proposal{cmd: cmd, wake: make(chan struct{}, 1)}
	if q.writeSets {
		p.size = proto.Size(cmd)
	} else {
		data, err := proto.Marshal(cmd)
		if err != nil {
			return nil, errors.E(op, errors.Invalid, err)
		}
		p.data, p.size = data, len(data)
	}
	if err := g.s.cfg.space.admit(p.size); err != nil { // bounded while the disk is full (storespace.go)
		return nil, err
	}
	q.mu.Lock()
	q.waiting = append(q.waiting, p)
	var lead []*proposal
	want := 0
	if q.inflight < q.depth {
		q.inflight++
		// The entry just answered held several commands: their callers,
		// this one among them, are sending again. Gather them.
		if w := q.lastSize; w > 1 && !q.noGather && q.depth == 1 && time.Since(q.lastDone) < q.round {
			want = w
		} else {
			lead = q.take()
		}
	} else if q.gathering {
		select {
		case q.arrived <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
	for {
		if lead == nil && want == 0 {
			<-p.wake // answered, or chosen to send (or gather) the next entry
			if want, p.gather = p.gather, 0; want == 0 {
				if lead, p.lead = p.lead, nil; lead == nil {
					break
				}
			}
		}
		if want > 0 {
			lead, want = q.gatherFor(want), 0
		}
		mine := slices.Contains(lead, p)
		g.send(p, lead)
		if mine {
			break
		}
		lead = nil
	}
	if p.appendErr != nil {
		return nil, p.appendErr
	}
	return p.ans.res, p.ans.err
}

// take removes the next entry's proposals from the queue. Called with
// q.mu held, with at least one waiting.
func (q *proposer) take() []*proposal {
	n, size := 0, 0
	for n < len(q.waiting) && n < maxEntryCommands {
		size += q.waiting[n].size
		if n > 0 && size > maxEntryBytes {
			break
		}
		n++
	}
	out := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	if len(q.waiting) == 0 {
		q.waiting = nil // let the backing array go
	}
	return out
}

// gatherFor waits until want commands are queued, or the arrivals stop
// (see Gathering), and takes the next entry. Called by the proposal that
// holds the slot, first in the queue.
func (q *proposer) gatherFor(want int) []*proposal {
	q.mu.Lock()
	defer q.mu.Unlock()
	idle := time.Duration(float64(q.round) * gatherIdle)
	end := time.Now().Add(time.Duration(float64(q.round) * gatherMax))
	q.gathering = true
	for len(q.waiting) < want {
		wait := min(idle, time.Until(end))
		if wait <= 0 {
			break
		}
		n := len(q.waiting)
		q.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-q.arrived:
		case <-t.C:
		}
		t.Stop()
		q.mu.Lock()
		if len(q.waiting) == n { // none arrived within idle
			break
		}
	}
	q.gathering = false
	select { // a signal left over
	case <-q.arrived:
	default:
	}
	return q.take()
}

// send proposes ps as one entry from self's goroutine (self is the first
// of ps), waits for it to be applied, answers each proposal, and hands
// the next entry, if commands wait, to the first of those.
func (g *group) send(self *proposal, ps []*proposal) {
	start := time.Now()
	as, err := g.apply(ps)
	round := time.Since(start)
	for i, p := range ps {
		if err != nil {
			p.appendErr = err
		} else {
			p.ans = as[i]
		}
		if p != self { // self reads its answer when send returns
			p.wake <- struct{}{}
		}
	}
	q := &g.props
	q.mu.Lock()
	// A round that failed, or took long (a leader change, a stalled
	// disk), says nothing of how soon callers come back: gathering then
	// waits at most maxGatherRound's shares.
	q.round, q.lastSize, q.lastDone = min(round, maxGatherRound), len(ps), time.Now()
	if err != nil {
		q.lastSize = 0
	}
	var next []*proposal
	var gatherer *proposal
	switch {
	case len(q.waiting) == 0:
		q.inflight--
	case q.noGather || q.depth > 1 || err != nil || len(q.waiting) >= maxEntryCommands:
		next = q.take()
	default:
		// The callers just answered are likely to send again: the next
		// entry's first proposer waits for them (gatherFor). Only with
		// one entry in flight: the gatherer holds the one slot, and no
		// one else takes from the queue meanwhile.
		gatherer = q.waiting[0]
		gatherer.gather = min(len(q.waiting)+len(ps), maxEntryCommands)
	}
	q.mu.Unlock()
	if next != nil {
		next[0].lead = next
		next[0].wake <- struct{}{}
	}
	if gatherer != nil {
		gatherer.wake <- struct{}{}
	}
}

// apply appends ps as one entry and returns the state machine's answers,
// one per proposal, or the error that answers them all.
func (g *group) apply(ps []*proposal) ([]applyAnswer, error) {
	// Write sets only once every member reads them (raftlevel.go).
	if g.props.writeSets && g.writeSetsAgreed() {
		return g.proposeWriteSet(ps) // writeset.go
	}
	return g.proposeCommands(ps)
}

// proposeCommands appends ps as one entry of commands, which every member
// runs, and returns the state machine's answers.
func (g *group) proposeCommands(ps []*proposal) ([]applyAnswer, error) {
	const op = errors.Op("meta.propose")
	for _, p := range ps {
		if p.data == nil { // proposed for a write set first
			data, err := proto.Marshal(p.cmd)
			if err != nil {
				return nil, errors.E(op, errors.Invalid, err)
			}
			p.data = data
		}
	}
	f := g.r.Apply(encodeEntry(ps), 10*time.Second)
	if err := f.Error(); err != nil {
		return nil, g.appendError(err)
	}
	switch a := f.Response().(type) {
	case applyAnswer:
		if len(ps) == 1 {
			return []applyAnswer{a}, nil
		}
		if a.err != nil { // the entry as a whole (unreadable, a failed store)
			return nil, a.err
		}
	case []applyAnswer:
		if len(a) == len(ps) {
			return a, nil
		}
	}
	return nil, errors.E(op, errors.IO, "no answer from the state machine")
}

// appendError is the answer to the commands of an entry whose append
// failed.
func (g *group) appendError(err error) error {
	switch err {
	case raft.ErrNotLeader, raft.ErrLeadershipTransferInProgress:
		return g.notLeader() // never appended: safe to send again
	}
	// Appended perhaps, committed perhaps: the caller cannot know.
	return errors.E(errors.Op("meta.propose"), errors.Unavailable, "meta leadership changed while the command was in flight; it may or may not have been applied", err)
}

// encodeEntry is the log entry of ps: the one command as it is, or the
// batch.
func encodeEntry(ps []*proposal) []byte {
	if len(ps) == 1 {
		return ps[0].data
	}
	n := 1
	for _, p := range ps {
		n += binary.MaxVarintLen32 + len(p.data)
	}
	b := make([]byte, 1, n)
	b[0] = batchMarker
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(len(p.data)))
		b = append(b, p.data...)
	}
	return b
}

// decodeEntry reads the commands of a log entry.
func decodeEntry(data []byte) ([]*metapb.Command, error) {
	const op = errors.Op("meta.decodeEntry")
	if len(data) == 0 || data[0] != batchMarker {
		cmd := &metapb.Command{}
		if err := proto.Unmarshal(data, cmd); err != nil {
			return nil, errors.E(op, errors.Corrupt, err)
		}
		return []*metapb.Command{cmd}, nil
	}
	var out []*metapb.Command
	for rest := data[1:]; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, errors.E(op, errors.Corrupt, "bad command length in a batch entry")
		}
		cmd := &metapb.Command{}
		if err := proto.Unmarshal(rest[k:k+int(n)], cmd); err != nil {
			return nil, errors.E(op, errors.Corrupt, err)
		}
		out = append(out, cmd)
		rest = rest[k+int(n):]
	}
	if len(out) == 0 {
		return nil, errors.E(op, errors.Corrupt, "empty batch entry")
	}
	return out, nil
}
