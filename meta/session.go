package meta

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Mount sessions. A mount caches entries, attributes and listings and
// lets the kernel keep them for minutes; that is safe because a mutation
// is not answered until every other mount's session has acknowledged the
// mutation's events (the mount drops the affected entries, in its cache and
// the kernel's, before it acknowledges). A session that does not answer
// within its lease is cut off: the mount, which stops trusting its cache
// when it has not heard from meta for half a lease, resets when it
// reconnects. Waiting covers every session, not only those that cached the
// path: a superset that costs one loopback round trip per mutation and
// needs no per-entry lease table.

// SessionLease is how long meta waits for a session's acknowledgement
// before it cuts the session off; mounts distrust their caches after half
// of it without word from meta (meta sends a heartbeat every LeaseBeat).
const (
	SessionLease = 4 * time.Second
	LeaseBeat    = 500 * time.Millisecond
)

// SessionHeader is the gRPC metadata key naming the caller's session, so
// that a mount's own mutations do not wait for its own acknowledgement.
const SessionHeader = "cairn-session"

type sessionTable struct {
	mu      sync.Mutex
	m       map[*mountSession]struct{}
	dirty   atomic.Int64     // nonzero: some session may be dirty (writebehind.go)
	notices uint64           // last write-behind notice id
	claims  map[string]claim // ns\x00path -> a mount's granted create (writebehind.go)
	// held counts, by ns\x00path, the synchronous commands in flight that
	// name the path; no create claim of it is granted meanwhile, and
	// heldWake is closed and replaced whenever one ends (writebehind.go).
	held     map[string]int
	heldWake chan struct{}
}

// byID returns the live session named id (t.mu held).
func (t *sessionTable) byID(id string) *mountSession {
	for ms := range t.m {
		if ms.id == id {
			return ms
		}
	}
	return nil
}

type mountSession struct {
	id     string
	cancel context.CancelFunc

	mu      sync.Mutex
	acked   uint64
	dirty   uint64 // last write-behind epoch announced (writebehind.go)
	cleaned uint64 // last write-behind epoch committed
	noticed uint64 // last write-behind notice acknowledged
	// unannounced is the last epoch that began with no other session: the
	// mount announces no path in it (writebehind.go).
	unannounced uint64
	// What the announced changes concern (writebehind.go), each with the
	// last epoch that announced it; clean drops what it covers. names
	// holds the paths announced (by nameKey), dirs the directories above
	// them, inos the files among them that meta had, by inode number.
	names map[string]uint64
	dirs  map[string]uint64
	inos  map[uint64]uint64
	asked uint64        // the last epoch meta asked to be committed unprompted (maxDirtyNames)
	wake  chan struct{} // closed and replaced on every acknowledgement
	dead  chan struct{}
	out   *sessionStream
}

func (s *Service) sessions() *sessionTable {
	t := &s.mountSessions
	t.mu.Lock()
	if t.m == nil {
		t.m = map[*mountSession]struct{}{}
		t.claims = map[string]claim{}
		t.held = map[string]int{}
		t.heldWake = make(chan struct{})
	}
	t.mu.Unlock()
	return t
}

func (h *hub) lastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// MountSession streams events to a mount (like Watch, with a heartbeat)
// and records its acknowledgements.
func (s *Service) MountSession(stream metapb.Meta_MountSessionServer) error {
	const op = errors.Op("meta.MountSession")
	hello, err := stream.Recv()
	if err != nil {
		return err
	}
	if hello.Session == "" {
		return errors.E(op, errors.Invalid, "the first message must name the session")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ms := &mountSession{id: hello.Session, cancel: cancel, wake: make(chan struct{}), dead: make(chan struct{})}
	s.lockTable()
	t := s.sessions()
	t.mu.Lock()
	if !s.leading() {
		// Leadership moved since the stream was let in: the session
		// belongs with the new leader, which takes its locks back.
		t.mu.Unlock()
		return s.group.notLeader()
	}
	// The locks come back and the session goes live in one step under
	// the table's lock, which a new term's leadLocks also takes: either
	// the locks are taken back after leadLocks cleared the table, or the
	// session is ended by it and brings them again (locks.go).
	s.reassertLocks(hello.Session, hello.Locks)
	t.m[ms] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.m, ms)
		t.mu.Unlock()
		close(ms.dead)
		s.sessionEnded(ms.id)
	}()
	go func() {
		defer cancel()
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if m.Clean != 0 {
				ms.clean(m.Clean)
			}
			if m.Open != 0 {
				s.openFiles().hold(ms.id, m.Open)
			}
			if m.Close != 0 && s.openFiles().release(ms.id, m.Close) {
				go s.reclaim()
			}
			if m.NoticeAck != 0 {
				ms.mu.Lock()
				if m.NoticeAck > ms.noticed {
					ms.noticed = m.NoticeAck
					close(ms.wake)
					ms.wake = make(chan struct{})
				}
				ms.mu.Unlock()
			}
			ms.mu.Lock()
			if m.Ack > ms.acked {
				ms.acked = m.Ack
				close(ms.wake)
				ms.wake = make(chan struct{})
			}
			ms.mu.Unlock()
		}
	}()
	w := &sessionStream{Meta_MountSessionServer: stream, ctx: ctx}
	ms.mu.Lock()
	ms.out = w
	ms.mu.Unlock()
	go func() {
		// The heartbeat proves meta alive to the mount while nothing
		// changes; it carries no sequence.
		tick := time.NewTicker(LeaseBeat)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if w.send(&metapb.Event{}) != nil {
					cancel()
					return
				}
			}
		}
	}()
	err = s.Watch(&metapb.WatchRequest{}, w)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// sessionStream serializes sends (events and heartbeats) and ends when
// the session does.
type sessionStream struct {
	metapb.Meta_MountSessionServer
	ctx context.Context
	mu  sync.Mutex
}

func (w *sessionStream) Context() context.Context   { return w.ctx }
func (w *sessionStream) Send(e *metapb.Event) error { return w.send(e) }
func (w *sessionStream) send(e *metapb.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Meta_MountSessionServer.Send(e)
}

// awaitSessions returns once every session but the caller's has
// acknowledged every event published up to target (which includes the
// events of the call just made), cutting off sessions that stay silent
// for a lease.
func (s *Service) awaitSessions(ctx context.Context, target uint64) {
	var self string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(SessionHeader); len(v) > 0 {
			self = v[0]
		}
	}
	t := s.sessions()
	t.mu.Lock()
	var wait []*mountSession
	for ms := range t.m {
		if ms.id != self {
			wait = append(wait, ms)
		}
	}
	t.mu.Unlock()
	if len(wait) == 0 {
		return
	}
	deadline, cancel := context.WithTimeout(context.Background(), SessionLease)
	defer cancel()
	for _, ms := range wait {
		for {
			ms.mu.Lock()
			acked, wake := ms.acked, ms.wake
			ms.mu.Unlock()
			if acked >= target {
				break
			}
			select {
			case <-wake:
				continue
			case <-ms.dead:
			case <-deadline.Done():
				s.log.Warn("mount session silent for a lease: cut off", "session", ms.id)
				ms.cancel()
				<-ms.dead
			}
			break
		}
	}
}
