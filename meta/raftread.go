package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Linearizable reads on followers: the read index (Raft thesis, 6.4).
//
// A follower given a read it may answer from its own store (staleReads)
// and not marked stale-tolerant asks the leader for its read index
// (MetaReadIndex): the leader notes its commit index, confirms with a
// heartbeat round to a majority that it still leads (VerifyLeader), and
// answers. The follower waits until it has applied that far and answers
// from its store: every write acknowledged before the read began is
// committed, so at or below that index, and so in the answer.
//
// The leader's own reads must then wait for the same point: a follower
// may apply a committed entry before the leader does, and a read it
// answers must not be followed by a leader's read that misses the entry
// (leaderCatchUp). They usually find nothing to wait for.
//
// The index answered is that of the last command at or below the commit
// index: the entries Raft adds itself (a new leader's no-op, barriers,
// configurations) never reach the store's applied index, which counts
// commands (raftFSM.ApplyBatch), and change nothing a read sees.

// AnyMemberHeader is the gRPC metadata key ("1") of a read that any
// member may answer linearizably (a follower through the read index).
// Set it with AnyMember.
const AnyMemberHeader = "cairn-any-member"

// AnyMember marks the calls made with the returned context as reads any
// member of a group may answer, as up to date as the leader's: a group
// client sends those of staleReads round robin to every member, spreading
// reads over the group at the cost of a round trip from a follower to the
// leader per batch of reads. Other calls ignore the mark.
func AnyMember(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, AnyMemberHeader, "1")
}

// readIndexWait bounds how long a follower waits for the read index and
// for its store to reach it before it refuses the read (the client then
// sends it to the leader).
const readIndexWait = 5 * time.Second

// readIndexAsk bounds each question to the leader for its read index, and
// so a read's wait for one to two questions (the one out when it came,
// then its own). A leader that does not answer (stopped, cut off from
// this member) would hold every read here for readIndexWait, though the
// client could have them answered elsewhere: the follower refuses them
// instead, naming the leader Raft names by then (the client sends them
// there), within about the bound in which a client leaves a member that
// answers nothing (failover.go, hangCheck). A leader answers within a
// heartbeat round.
const readIndexAsk = hangCheck

// MetaReadIndex answers the leader's read index (see above). Only a ready
// leader answers (leaderGate).
func (s *Service) MetaReadIndex(ctx context.Context, _ *metapb.Empty) (*metapb.MetaReadIndexResponse, error) {
	g := s.group
	if g == nil {
		return nil, errors.E(errors.Op("meta.MetaReadIndex"), errors.Invalid, "meta runs alone: there is no group")
	}
	idx, err := g.leaderReadIndex()
	if err != nil {
		return nil, err
	}
	return &metapb.MetaReadIndexResponse{Index: idx}, nil
}

// leaderReadIndex is this leader's read index, once a heartbeat round
// confirmed that it leads.
func (g *group) leaderReadIndex() (uint64, error) {
	applied, commit := g.applied.Load(), g.r.CommitIndex()
	if err := g.r.VerifyLeader().Error(); err != nil {
		return 0, g.notLeader()
	}
	return g.readPoint(applied, commit)
}

// readPoint is the last command at or below commit: the applied index
// that has every command committed up to commit. applied (at most commit)
// is a command's index already applied here, where the search stops.
func (g *group) readPoint(applied, commit uint64) (uint64, error) {
	if commit <= applied {
		return applied, nil
	}
	if p := g.point.Load(); p != nil && p.commit == commit {
		return p.index, nil
	}
	idx := applied
	var l raft.Log
	for i := commit; i > applied; i-- {
		if err := g.logs.GetLog(i, &l); err != nil {
			if err == raft.ErrLogNotFound {
				// Compacted into a snapshot, which this member holds
				// applied: every command below is in applied.
				break
			}
			return 0, errors.E(errors.Op("meta.readIndex"), errors.IO, err)
		}
		if l.Type == raft.LogCommand {
			idx = i
			break
		}
	}
	g.point.Store(&readPoint{commit: commit, index: idx})
	return idx, nil
}

// readPoint memoizes the last readPoint answer: after an election the
// commit index rests on the new leader's barrier until the next write,
// and every read would look the same entries up again.
type readPoint struct{ commit, index uint64 }

// leaderCatchUp makes a read on the leader wait until the leader has
// applied every command committed so far (see above): usually it has.
func (g *group) leaderCatchUp(ctx context.Context) error {
	applied, commit := g.applied.Load(), g.r.CommitIndex()
	if commit <= applied {
		return nil
	}
	idx, err := g.readPoint(applied, commit)
	if err != nil {
		return err
	}
	return g.awaitApplied(ctx, idx)
}

// noteApplied records the store's applied index and wakes the reads
// waiting for it.
func (g *group) noteApplied(i uint64) {
	g.applied.Store(i)
	g.amu.Lock()
	if g.appliedWake != nil {
		close(g.appliedWake)
		g.appliedWake = nil
	}
	g.amu.Unlock()
}

// awaitApplied waits until the store has applied index idx.
func (g *group) awaitApplied(ctx context.Context, idx uint64) error {
	for {
		g.amu.Lock()
		if g.applied.Load() >= idx {
			g.amu.Unlock()
			return nil
		}
		if g.appliedWake == nil {
			g.appliedWake = make(chan struct{})
		}
		wake := g.appliedWake
		g.amu.Unlock()
		g.readWaits.Add(1)
		select {
		case <-wake:
			g.readWaits.Add(-1)
		case <-ctx.Done():
			g.readWaits.Add(-1)
			return errors.E(errors.Op("meta.readIndex"), errors.Unavailable, "this member did not apply the leader's read index in time", ctx.Err())
		case <-g.done:
			g.readWaits.Add(-1)
			return errors.E(errors.Op("meta.readIndex"), errors.Unavailable, "meta is shutting down")
		}
	}
}

// followerRead makes this follower's store answer a linearizable read:
// it waits for the leader's read index, then for its store to reach it.
func (g *group) followerRead(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readIndexWait)
	defer cancel()
	idx, err := g.reads.index(ctx, g)
	if err != nil {
		return err
	}
	return g.awaitApplied(ctx, idx)
}

// readIndexer asks the leader for read indexes, one question at a time:
// the reads that arrive while a question is out share the next one (not
// the one out: the leader may have noted its commit index before they
// arrived), so a burst of reads costs the leader a heartbeat round or
// two, not one each.
type readIndexer struct {
	mu       sync.Mutex
	asking   bool
	next     *readRound // the question the reads arriving now wait for
	peers    map[string]*peerConn
	closed   bool
	roundsOK atomic.Uint64 // questions answered (a test sees reads share them)
}

type readRound struct {
	done  chan struct{}
	index uint64
	err   error
}

type peerConn struct {
	mc   metapb.MetaClient
	conn *grpc.ClientConn
}

// index waits for the answer of a question asked after it was called.
func (ri *readIndexer) index(ctx context.Context, g *group) (uint64, error) {
	ri.mu.Lock()
	if ri.next == nil {
		ri.next = &readRound{done: make(chan struct{})}
	}
	r := ri.next
	if !ri.asking {
		ri.startLocked(g)
	}
	ri.mu.Unlock()
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, errors.E(errors.Op("meta.readIndex"), errors.Unavailable, "no read index from the leader in time", ctx.Err())
	}
}

// startLocked asks the question the waiting reads share. Called with
// ri.mu held and no question out.
func (ri *readIndexer) startLocked(g *group) {
	r := ri.next
	ri.next, ri.asking = nil, true
	go func() {
		r.index, r.err = ri.ask(g)
		close(r.done)
		ri.mu.Lock()
		ri.asking = false
		if ri.next != nil {
			ri.startLocked(g)
		}
		ri.mu.Unlock()
	}()
}

// ask asks the leader for its read index, over the members' gRPC with
// this member's identity, within readIndexAsk.
func (ri *readIndexer) ask(g *group) (uint64, error) {
	_, id := g.r.LeaderWithID()
	if id == "" || string(id) == g.cfg.ID {
		return 0, g.notLeader()
	}
	mc, err := ri.peer(g, string(id))
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), readIndexAsk)
	defer cancel()
	resp, err := mc.MetaReadIndex(ctx, &metapb.Empty{})
	if err != nil {
		return 0, err
	}
	ri.roundsOK.Add(1)
	return resp.Index, nil
}

// peer returns a client of the member at addr, dialled once.
func (ri *readIndexer) peer(g *group, addr string) (metapb.MetaClient, error) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if ri.closed {
		return nil, errors.E(errors.Op("meta.readIndex"), errors.Unavailable, "meta is shutting down")
	}
	if p, ok := ri.peers[addr]; ok {
		return p.mc, nil
	}
	mc, conn, err := Dial(addr, DialTLS(g.cfg.TLS.Client()))
	if err != nil {
		return nil, err
	}
	if ri.peers == nil {
		ri.peers = map[string]*peerConn{}
	}
	ri.peers[addr] = &peerConn{mc: mc, conn: conn}
	return mc, nil
}

// close closes the connections to the other members.
func (ri *readIndexer) close() {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	ri.closed = true
	for _, p := range ri.peers {
		p.conn.Close()
	}
	ri.peers = nil
}

func anyMemberRequested(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(AnyMemberHeader)
	return len(v) > 0 && v[0] == "1"
}

// isAnyMember reports whether an outgoing call is marked AnyMember.
func isAnyMember(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(AnyMemberHeader)
	return len(v) > 0 && v[0] == "1"
}
