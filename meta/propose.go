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
// An entry holding one command is that command's encoding, as before; one
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

// proposer is a group's queue of commands waiting for an entry.
type proposer struct {
	depth    int // maxInflight when the group started
	mu       sync.Mutex
	waiting  []*proposal
	inflight int // entries between Apply and their answers
}

// proposal is one command on its way through the log.
type proposal struct {
	data []byte
	// wake is signalled once: when the command is answered, or when this
	// proposal is to send the entry lead (which holds it) itself.
	wake chan struct{}
	lead []*proposal
	ans  applyAnswer
	// appendErr: the entry could not be appended or its fate is unknown
	// (the answer then is this error, not the state machine's).
	appendErr error
}

// propose appends cmd to the group's log, together with whatever other
// commands wait, and returns its answer once it is committed and applied
// here, the leader.
func (g *group) propose(cmd *metapb.Command) (*result, error) {
	const op = errors.Op("meta.propose")
	cmd.NowNs = time.Now().UnixNano()
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	if err := g.s.cfg.space.admit(len(data)); err != nil { // bounded while the disk is full (storespace.go)
		return nil, err
	}
	p := &proposal{data: data, wake: make(chan struct{}, 1)}
	q := &g.props
	q.mu.Lock()
	q.waiting = append(q.waiting, p)
	var lead []*proposal
	if q.inflight < q.depth {
		q.inflight++
		lead = q.take()
	}
	q.mu.Unlock()
	for {
		if lead == nil {
			<-p.wake // answered, or chosen to send the next entry
			if lead, p.lead = p.lead, nil; lead == nil {
				break
			}
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
		size += len(q.waiting[n].data)
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

// send proposes ps as one entry from self's goroutine (self is the first
// of ps), waits for it to be applied, answers each proposal, and hands
// the next entry, if commands wait, to the first of those.
func (g *group) send(self *proposal, ps []*proposal) {
	as, err := g.apply(ps)
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
	var next []*proposal
	if len(q.waiting) > 0 {
		next = q.take()
	} else {
		q.inflight--
	}
	q.mu.Unlock()
	if next != nil {
		next[0].lead = next
		next[0].wake <- struct{}{}
	}
}

// apply appends ps as one entry and returns the state machine's answers,
// one per proposal, or the error that answers them all.
func (g *group) apply(ps []*proposal) ([]applyAnswer, error) {
	const op = errors.Op("meta.propose")
	f := g.r.Apply(encodeEntry(ps), 10*time.Second)
	if err := f.Error(); err != nil {
		switch err {
		case raft.ErrNotLeader, raft.ErrLeadershipTransferInProgress:
			return nil, g.notLeader() // never appended: safe to send again
		}
		// Appended perhaps, committed perhaps: the caller cannot know.
		return nil, errors.E(op, errors.Unavailable, "meta leadership changed while the command was in flight; it may or may not have been applied", err)
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
