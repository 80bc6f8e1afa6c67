package meta

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/metadata"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// GroupConfig makes meta one member of a Raft group (hashicorp/raft): every
// command is appended to the replicated log and applied, once a majority
// holds it, on every member. Only the leader answers calls; the others
// refuse them as Unavailable, naming the leader (see NotLeader).
type GroupConfig struct {
	// ID is this member's gRPC address as clients dial it. It is also the
	// member's Raft server id, so that any member can name the leader to
	// a client. Required.
	ID string
	// RaftListen is the address the Raft transport listens on. Required.
	RaftListen string
	// RaftListener, when not nil, is used instead of listening on
	// RaftListen (tests and embedders that chose the port already).
	RaftListener net.Listener
	// RaftAdvertise is the Raft address other members dial. Default: the
	// listener's address.
	RaftAdvertise string
	// Bootstrap is the group's first membership, the same on every
	// founding member (a member already holding Raft state ignores it).
	// Empty: this member waits to be added (`cairn admin meta add`).
	Bootstrap []Peer
	// TLS is the member's identity (role meta) from the cluster CA: Raft
	// traffic is mutual TLS, and a peer that is not a meta is refused.
	// Required.
	TLS *pki.Node
	// HeartbeatTimeout and ElectionTimeout are Raft's. Default 500ms each:
	// a leader's death is noticed, and a new one elected, in 1-2 s.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// SnapshotThreshold is the log entries after which a snapshot is taken
	// and the log truncated. Default 8192.
	SnapshotThreshold uint64
	// TrailingLogs is the entries kept after a snapshot, for followers a
	// little behind. Default 4096.
	TrailingLogs uint64
	// SnapshotInterval is how often the threshold is checked. Default 30s.
	SnapshotInterval time.Duration
	// StaleReadBound is how long a follower that has not heard from a
	// leader still answers reads that tolerate staleness (StaleOK).
	// Default 1s.
	StaleReadBound time.Duration
	// CommitTimeout is Raft's: how long a leader whose log is idle waits
	// before it sends the followers its commit index on its own, without
	// new entries. Default 5ms.
	CommitTimeout time.Duration

	// legacyEntries (tests) makes the member behave as one older than
	// write sets: it names no protocol in the Raft transport's handshake
	// (raftlevel.go) and proposes entries of commands.
	legacyEntries bool
}

// Peer is one member of a group: its gRPC address (the Raft server id)
// and its Raft address.
type Peer struct{ ID, Addr string }

// ParsePeers reads "grpc=raft,grpc=raft" (the --meta-group flag).
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" || addr == "" {
			return nil, errors.E(errors.Op("meta.ParsePeers"), errors.Invalid, "want grpc-address=raft-address, got "+p)
		}
		out = append(out, Peer{ID: id, Addr: addr})
	}
	return out, nil
}

func (c *GroupConfig) validate() error {
	const op = errors.Op("meta.GroupConfig")
	switch {
	case c.ID == "":
		return errors.E(op, errors.Invalid, "ID is required")
	case c.RaftListen == "" && c.RaftListener == nil:
		return errors.E(op, errors.Invalid, "RaftListen is required")
	case c.TLS == nil:
		return errors.E(op, errors.Invalid, "TLS is required")
	}
	return nil
}

// group is a Service's membership of a Raft group.
type group struct {
	s        *Service
	cfg      GroupConfig
	r        *raft.Raft
	store    *raftStore
	trans    *raft.NetworkTransport
	applied  atomic.Uint64 // last entry applied to the store (set by noteApplied)
	restores atomic.Uint64 // snapshots loaded into the store
	// ready: this member leads, has applied every entry of earlier terms
	// (a barrier) and ran the set-up of a new leader. Only then does it
	// answer calls.
	ready  atomic.Bool
	gen    atomic.Uint64 // leadership changes seen
	notify chan bool
	done   chan struct{}
	once   sync.Once

	// The read index (raftread.go).
	logs        raft.LogStore // the log, as Raft reads it (cached)
	point       atomic.Pointer[readPoint]
	reads       readIndexer
	amu         sync.Mutex
	appliedWake chan struct{} // closed when applied moves; nil: no one waits
	readWaits   atomic.Int64  // reads waiting for the store to apply

	props proposer // commands waiting for a log entry (propose.go)
	// levels: which members read write sets, as the connections this
	// member dialled negotiated (raftlevel.go).
	levels peerLevels
}

// NotLeaderMessage starts the message of the error a member that does not
// lead answers with; the leader's gRPC address follows, when known.
const NotLeaderMessage = "not the meta leader; leader: "

// notLeader is the refusal of a call this member cannot serve. The call
// was not executed: a client may send it to the leader as it is.
func (g *group) notLeader() error {
	_, id := g.r.LeaderWithID()
	return errors.E(errors.Op("meta"), errors.Unavailable, NotLeaderMessage+string(id))
}

// LeaderOf reads the leader a NotLeader refusal names: ok reports that err
// is one ("" leader: none known yet).
func LeaderOf(err error) (leader string, ok bool) {
	var e *errors.Error
	if !errors.As(err, &e) || e.Kind != errors.Unavailable {
		return "", false
	}
	msg := e.Message()
	i := strings.Index(msg, NotLeaderMessage)
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(msg[i+len(NotLeaderMessage):]), true
}

// startGroup opens the Raft log and starts the member.
func (s *Service) startGroup(c GroupConfig) error {
	const op = errors.Op("meta.startGroup")
	if err := c.validate(); err != nil {
		return err
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = 500 * time.Millisecond
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 4096
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.StaleReadBound == 0 {
		c.StaleReadBound = time.Second
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = 5 * time.Millisecond
	}
	dir := filepath.Join(s.cfg.Dir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errors.E(op, errors.IO, err)
	}
	applied, err := appliedIndex(s.db)
	if err != nil {
		return err
	}
	g := &group{s: s, cfg: c, notify: make(chan bool, 16), done: make(chan struct{})}
	g.props.depth = maxInflight
	g.props.arrived = make(chan struct{}, 1)
	g.props.noGather = gatherOff
	g.props.writeSets = maxInflight == 1 && !writeSetsOff && !c.legacyEntries
	g.applied.Store(applied)
	if g.store, err = openRaftStore(dir, s.log); err != nil {
		return err
	}
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: slogWriter{s.log}})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		g.store.Close()
		return errors.E(op, errors.IO, err)
	}
	layer, err := listenTLS(c, s.cfg.Revoked)
	if err != nil {
		g.store.Close()
		return errors.E(op, errors.IO, err)
	}
	layer.levels = &g.levels
	g.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 3, Timeout: 5 * time.Second, Logger: hl,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	// The lease: a leader that has not heard from a majority for this
	// long steps down, before the others can have elected a successor
	// (they wait HeartbeatTimeout at least), so that reads it serves are
	// not stale (see "Reads" in docs/architecture.md).
	rc.LeaderLeaseTimeout = c.HeartbeatTimeout / 2
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.TrailingLogs = c.TrailingLogs
	rc.SnapshotInterval = c.SnapshotInterval
	rc.MaxAppendEntries = 256
	rc.BatchApplyCh = true
	rc.NotifyCh = g.notify
	rc.Logger = hl
	if err := raft.ValidateConfig(rc); err != nil {
		g.trans.Close()
		g.store.Close()
		return errors.E(op, errors.Invalid, err)
	}
	existing, err := raft.HasExistingState(g.store, g.store, snaps)
	if err != nil {
		g.trans.Close()
		g.store.Close()
		return errors.E(op, errors.IO, err)
	}
	// The entries just appended, kept in memory: replication sends them
	// to the followers without reading them back from the store.
	logs, err := raft.NewLogCache(1024, g.store)
	if err != nil {
		g.trans.Close()
		g.store.Close()
		return errors.E(op, errors.Invalid, err)
	}
	g.logs = logs
	if g.r, err = raft.NewRaft(rc, (*raftFSM)(g), logs, g.store, snaps, unpipelined{g.trans}); err != nil {
		g.trans.Close()
		g.store.Close()
		return errors.E(op, errors.IO, err)
	}
	if !existing && len(c.Bootstrap) > 0 {
		var conf raft.Configuration
		for _, p := range c.Bootstrap {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := g.r.BootstrapCluster(conf).Error(); err != nil && err != raft.ErrCantBootstrap {
			g.r.Shutdown().Error()
			g.trans.Close()
			g.store.Close()
			return errors.E(op, errors.IO, err)
		}
	}
	s.group = g
	go g.watchLeadership()
	return nil
}

// watchLeadership follows Raft's leadership notices: a member that wins
// becomes ready once it has applied everything before its term and set up
// what a new leader must (the cluster id, the root user); one that loses
// stops answering at once and ends the mount sessions it held.
func (g *group) watchLeadership() {
	for {
		select {
		case <-g.done:
			return
		case leader := <-g.notify:
			gen := g.gen.Add(1)
			g.ready.Store(false)
			// Mount sessions are the leader's: ended here, they reopen
			// on whichever member leads now (locks.go).
			g.s.endSessions()
			if leader {
				go g.takeOver(gen)
			}
		}
	}
}

func (g *group) takeOver(gen uint64) {
	s := g.s
	if err := g.r.Barrier(10 * time.Second).Error(); err != nil {
		s.log.Warn("meta: new leader could not catch up", "err", err)
		return
	}
	if g.gen.Load() != gen {
		return
	}
	// Data servers heartbeat to the leader only: give them DeadAfter to
	// find this one before any is taken for dead. What this member heard
	// when it led before goes: a server it last heard from then may hold
	// a lease from the leader between, which this one must honour, as it
	// honours those of servers it never heard from (dead).
	s.pmu.Lock()
	s.cl.started = time.Now()
	clear(s.servers)
	s.pmu.Unlock()
	if err := s.setupState(); err != nil {
		s.log.Error("meta: new leader's set-up failed", "err", err)
		return
	}
	if g.gen.Load() == gen && g.r.State() == raft.Leader {
		s.leadLocks() // locks.go: the mounts' locks come back during a grace
		g.ready.Store(true)
		s.log.Info("meta: leading the group", "id", g.cfg.ID)
	}
}

// leading reports whether this member serves calls and runs the
// background duties (collection, repair); a meta alone always does.
func (s *Service) leading() bool {
	return s.group == nil || s.group.ready.Load()
}

// leaderGate refuses a call on a member that does not lead. The group's
// own calls that any member answers (MetaMembers) pass.
func (s *Service) leaderGate(method string) error {
	if s.group == nil || s.group.ready.Load() || anyMemberMethods[method] {
		return nil
	}
	return s.group.notLeader()
}

// anyMemberMethods are answered by every member of a group, leader or not.
var anyMemberMethods = map[string]bool{"MetaMembers": true}

// StaleOKHeader is the gRPC metadata key ("1") of a read whose caller
// accepts an answer that may miss the latest writes: a follower answers
// it from what it applied (see staleReads). Set it with StaleOK.
const StaleOKHeader = "cairn-stale-ok"

// StaleOK marks the calls made with the returned context as tolerating
// stale answers: a group client sends those of staleReads to any member
// (round robin), and a follower answers them while it hears from a
// leader (GroupConfig.StaleReadBound). Other calls ignore the mark.
func StaleOK(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, StaleOKHeader, "1")
}

// staleReads are the reads a follower may answer from its own store:
// they read the replicated state alone. Not a Resolve that wants extents
// (its capabilities are the leader's to sign and its reads feed the
// leader's tiering) or names an inode (open files are the leader's), nor
// the cluster's status (data servers heartbeat to the leader only).
var staleReads = map[string]bool{"List": true, "ListNamespaces": true, "GetNamespace": true, "Resolve": true}

func staleAllowed(method string, req any) bool {
	if !staleReads[method] {
		return false
	}
	if r, ok := req.(*metapb.ResolveRequest); ok && (r.WantExtents || r.Ino != 0) {
		return false
	}
	return true
}

func staleRequested(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(StaleOKHeader)
	return len(v) > 0 && v[0] == "1"
}

// memberGate is leaderGate for one call: a follower also answers a read
// its caller marked stale-tolerant, while it is fresh, and one marked
// AnyMember once it applied the leader's read index (raftread.go). The
// leader's reads wait for what it committed to be applied.
func (s *Service) memberGate(ctx context.Context, method string, req any) error {
	err := s.leaderGate(method)
	if err == nil {
		if s.group != nil && (readMethods[method] || moreReads[method]) {
			return s.group.leaderCatchUp(ctx)
		}
		return nil
	}
	if !staleAllowed(method, req) {
		return err
	}
	if staleRequested(ctx) && s.group.fresh() {
		return nil
	}
	if anyMemberRequested(ctx) && s.group.r.State() == raft.Follower {
		if rerr := s.group.followerRead(ctx); rerr == nil {
			return nil
		}
	}
	return err
}

// fresh reports whether this member, a follower, heard from a leader
// within StaleReadBound: its state then lags the leader's by no more
// than what the leader committed since (the commit index reaches
// followers with every append and heartbeat). A member cut off from the
// leader stops answering stale reads once the bound passes, rather than
// answer from a state that grows older without limit.
func (g *group) fresh() bool {
	if g.r.State() != raft.Follower || g.applied.Load() == 0 {
		return false
	}
	last := g.r.LastContact()
	return !last.IsZero() && time.Since(last) < g.cfg.StaleReadBound
}

// applyAnswer is what the state machine returns to the proposer: an
// entry's answer, or a []applyAnswer for an entry of several commands
// (propose.go).
type applyAnswer struct {
	res *result
	err error
}

// shutdown stops the member; the store stays open (Service.Close closes it).
func (g *group) shutdown() {
	g.once.Do(func() {
		close(g.done)
		g.ready.Store(false)
		g.reads.close()
		if err := g.r.Shutdown().Error(); err != nil {
			g.s.log.Warn("meta: raft shutdown", "err", err)
		}
		g.trans.Close()
		g.store.Close()
	})
}

// unpipelined is the transport without pipelined appends. Pipelined,
// the leader sends each batch it stores as its own append, and a follower
// stores each with its own fsync, in turn, while the later ones queue:
// under a write load the followers' fsyncs, not the batches, set the
// pace. Unpipelined, the leader sends the next append when the last is
// answered, with every entry stored meanwhile: one follower fsync per
// round trip, however many batches the leader stored.
type unpipelined struct{ *raft.NetworkTransport }

func (unpipelined) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// raftFSM is the group as Raft's state machine.
type raftFSM group

var _ raft.BatchingFSM = (*raftFSM)(nil)

// Apply applies one committed entry (Raft calls ApplyBatch).
func (f *raftFSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies committed entries: the runs of write sets
// (writeset.go) each in one Pebble batch (applyWriteSets), the runs of
// entries of commands each in one batch too (applyEntries). Entries the
// store already holds (a restart replays the log from the last snapshot)
// are skipped. The batches are not synced: the entries are in the synced
// Raft log, and a store that lost its last batches in a crash has an
// applied index that says so, from which they are applied again.
func (f *raftFSM) ApplyBatch(logs []*raft.Log) []any {
	g := (*group)(f)
	out := make([]any, len(logs))
	var cmds commandRun
	var sets []writeSetLog
	var failed error // the store's: nothing after it is applied
	flushSets := func() {
		if len(sets) > 0 && failed == nil {
			if failed = g.applyWriteSets(sets, out); failed != nil {
				g.storeFailed(sets[0].index, failed)
				for _, w := range sets {
					out[w.i] = applyAnswer{err: failed}
				}
			}
		}
		sets = sets[:0]
	}
	applied := g.applied.Load()
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= applied {
			continue
		}
		if failed != nil {
			out[i] = applyAnswer{err: failed}
			continue
		}
		if isWriteSet(l.Data) {
			ws, err := decodeWriteSet(l.Data)
			if err != nil {
				g.s.log.Error("meta: unreadable log entry", "index", l.Index, "err", err)
				out[i] = applyAnswer{err: err}
				continue
			}
			if failed = g.applyCommands(&cmds, out); failed != nil {
				out[i] = applyAnswer{err: failed}
				continue
			}
			sets = append(sets, writeSetLog{i: i, index: l.Index, ws: ws})
			continue
		}
		if flushSets(); failed != nil {
			out[i] = applyAnswer{err: failed}
			continue
		}
		cs, err := decodeEntry(l.Data)
		if err != nil {
			g.s.log.Error("meta: unreadable log entry", "index", l.Index, "err", err)
			out[i] = applyAnswer{err: errors.E(errors.Op("meta.apply"), errors.Corrupt, err)}
			continue
		}
		if len(cs) > 1 {
			out[i] = make([]applyAnswer, len(cs))
		}
		for k, cmd := range cs {
			cmds.es, cmds.at, cmds.sub = append(cmds.es, entry{cmd, l.Index}), append(cmds.at, i), append(cmds.sub, k)
		}
	}
	if flushSets(); failed == nil {
		failed = g.applyCommands(&cmds, out)
	}
	return out
}

// commandRun is a run of entries of commands to apply in one batch:
// es[j] is a command of logs[at[j]], its sub[j]-th when it holds several.
type commandRun struct {
	es      []entry
	at, sub []int
}

// applyCommands applies run (applyEntries) and answers its entries in
// out. An error is the store's: nothing was applied.
func (g *group) applyCommands(run *commandRun, out []any) error {
	es, at, sub := run.es, run.at, run.sub
	*run = commandRun{}
	if len(es) == 0 {
		return nil
	}
	g.s.mu.Lock()
	answers, err := g.s.applyEntries(es, false)
	if err == nil {
		g.noteApplied(es[len(es)-1].index)
	}
	g.s.mu.Unlock()
	if err != nil {
		g.storeFailed(es[0].index, err)
		for _, i := range at {
			out[i] = applyAnswer{err: err}
		}
		return err
	}
	for j, i := range at {
		if several, ok := out[i].([]applyAnswer); ok {
			several[sub[j]] = answers[j]
		} else {
			out[i] = answers[j]
		}
	}
	return nil
}

// storeFailed leaves the group: the store cannot take what the majority
// agreed, and this member must not go on applying later entries over a
// gap.
func (g *group) storeFailed(first uint64, err error) {
	g.s.log.Error("meta: store failed applying committed entries; leaving the group", "first", first, "err", err)
	go g.shutdown()
}

// Snapshot takes a Pebble snapshot, consistent with the entries applied
// so far; Persist streams it while Apply goes on.
func (f *raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	g := (*group)(f)
	return &fsmSnapshot{snap: g.s.db.NewSnapshot(), applied: g.applied.Load()}, nil
}

// Restore replaces the store with a snapshot, unless the store already
// holds as much (at a restart Raft restores its latest snapshot, which a
// store that survived is at least as new as).
func (f *raftFSM) Restore(rc io.ReadCloser) error {
	g := (*group)(f)
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 1<<20)
	applied, err := readSnapshotHeader(br)
	if err != nil {
		return err
	}
	if applied <= g.applied.Load() {
		_, err := io.Copy(io.Discard, br)
		return err
	}
	g.s.mu.Lock()
	defer g.s.mu.Unlock()
	if err := loadSnapshot(g.s.db, br, applied); err != nil {
		return err
	}
	g.noteApplied(applied)
	g.restores.Add(1)
	return g.s.rebuild()
}

type fsmSnapshot struct {
	snap    *pebble.Snapshot
	applied uint64
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, s.snap, s.applied); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() { s.snap.Close() }

// tlsLayer is Raft's transport over mutual TLS: both ends present a
// certificate of the cluster CA with role meta.
type tlsLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
	revoked   *pki.Revocations
	levels    *peerLevels // noted at each dial (raftlevel.go)
}

// Both directions check the revocation list: a revoked member can neither
// call nor be called.
func listenTLS(c GroupConfig, revoked *pki.Revocations) (*tlsLayer, error) {
	srv := revoked.Guard(c.TLS.Server())
	srv.ClientAuth = tls.RequireAndVerifyClientCert
	l := c.RaftListener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", c.RaftListen); err != nil {
			return nil, err
		}
	}
	adv := l.Addr()
	if c.RaftAdvertise != "" {
		var err error
		if adv, err = net.ResolveTCPAddr("tcp", c.RaftAdvertise); err != nil {
			l.Close()
			return nil, err
		}
	}
	client := revoked.Guard(c.TLS.Client())
	if !c.legacyEntries {
		// What this member reads (raftlevel.go).
		srv.NextProtos, client.NextProtos = raftProtos, raftProtos
	}
	return &tlsLayer{Listener: tls.NewListener(l, srv), advertise: adv, client: client, revoked: revoked, levels: &peerLevels{}}, nil
}

func (t *tlsLayer) Addr() net.Addr { return t.advertise }

// Accept returns the next connection whose peer proved to be a meta; the
// others are closed.
func (t *tlsLayer) Accept() (net.Conn, error) {
	for {
		c, err := t.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := c.(*tls.Conn)
		if err := handshakeMeta(tc, 5*time.Second); err != nil {
			c.Close()
			continue
		}
		return t.watch(tc), nil
	}
}

func (t *tlsLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", string(addr))
	if err != nil {
		return nil, err
	}
	cfg := t.client.Clone()
	if host, _, err := net.SplitHostPort(string(addr)); err == nil {
		cfg.ServerName = host
	}
	c := tls.Client(raw, cfg)
	if err := handshakeMeta(c, timeout); err != nil {
		c.Close()
		return nil, err
	}
	t.levels.note(addr, c.ConnectionState().NegotiatedProtocol == protoWriteSets)
	return t.watch(c), nil
}

// watch wraps a member's connection so that it dies with its peer's
// certificate: Raft pools connections for as long as they work, and the
// handshake's check alone would let one opened before a revocation carry
// appends and votes forever.
func (t *tlsLayer) watch(c *tls.Conn) net.Conn {
	cs := c.ConnectionState()
	if t.revoked == nil || len(cs.PeerCertificates) == 0 {
		return c
	}
	return &revocableConn{Conn: c, peer: cs.PeerCertificates[0], revoked: t.revoked}
}

// revocableConn checks the revocation list before every read and write (a
// map lookup behind an atomic pointer; Raft's transport buffers, so these
// are few) and closes itself once its peer is revoked.
type revocableConn struct {
	net.Conn
	peer    *x509.Certificate
	revoked *pki.Revocations
}

func (c *revocableConn) check() error {
	if err := c.revoked.Check(c.peer); err != nil {
		c.Conn.Close()
		return err
	}
	return nil
}

func (c *revocableConn) Read(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *revocableConn) Write(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// handshakeMeta completes the TLS handshake and checks that the peer is a
// meta of the cluster.
func handshakeMeta(c *tls.Conn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	cs := c.ConnectionState()
	if role, _, ok := pki.PeerIdentity(&cs); !ok || role != pki.RoleMeta {
		return errors.E(errors.Permission, "raft peer is not a meta of this cluster")
	}
	return nil
}

// slogWriter carries Raft's log lines (warnings and errors: a peer down,
// an election) into meta's logger.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
