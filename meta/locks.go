package meta

import (
	"context"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"cairn/errors"
	"cairn/proto/metapb"
)

// File locks across mounts. flock(2) and POSIX record locks (fcntl) taken
// on a mount are arbitrated here, so two mounts exclude each other as two
// processes on one host do. The state is in meta's memory, per session:
//
//   - A lock belongs to (session, owner): the owner is the kernel's (an
//     open file for flock, a process for POSIX locks), the session the
//     mount's. flock and POSIX locks do not conflict with each other, as
//     on Linux.
//   - Locks die with their session: when a mount's session ends and no
//     session of that id is back within SessionLease, its locks are
//     dropped and waiters woken, so a mount that dies releases its locks
//     (a mount whose session only blinked keeps them).
//   - A change of meta leader does not lose them, though they are kept
//     out of the Raft log (a lock or unlock would otherwise cost a log
//     append and an fsync on a majority, and sqlite takes several per
//     transaction): every mount keeps the locks it was granted, and
//     sends them with the first message of its session on the new leader,
//     which takes them back (reassertLocks). So that no other mount is
//     granted one of them first, a new leader grants nothing during its
//     grace of LockGrace (as an NFSv4 server after a restart): lock and
//     test calls wait for its end, and calls from a session not yet
//     reopened here are refused (Unavailable: the mount tries again once
//     its session, and so its locks, are back). A mount whose session
//     comes back after the grace gets back those of its locks no one
//     took meanwhile; the others are logged as lost.
//   - A meta alone that restarts honours the same grace when locks may
//     have been held: the first lock it holds after a start writes a
//     marker to its store (keyLocksHeld, one synced write per start, not
//     per lock); a start that finds it begins with the grace, and removes
//     it once the grace is over if no mount brought a lock back. A fresh
//     store, or one whose locks were all gone before it stopped and
//     started again, has no grace.
//   - F_SETLKW waits here until no conflict remains or the call is
//     cancelled (the waiting process got a signal); every release wakes
//     every waiter, which then checks again, so no wake-up is lost.
//     Deadlocks between mounts are not detected.
type lockTable struct {
	mu      sync.Mutex
	files   map[lockFile][]heldLock
	changed chan struct{} // closed and replaced at every release
	grace   time.Time     // no lock granted before, but re-asserted ones
	marked  bool          // keyLocksHeld is in the store (a meta alone)
}

// keyLocksHeld is in a meta alone's store while locks may be held: a
// restart that finds it waits LockGrace for the mounts to bring them
// back (see lockTable). It is not replicated: a group's new leader always
// takes the grace.
var keyLocksHeld = []byte("c/locksheld")

// startLocks, at the start of a meta alone, begins the grace if its store
// says locks may have been held when it stopped.
func (s *Service) startLocks() error {
	const op = errors.Op("meta.startLocks")
	if s.cfg.Group != nil {
		return nil // leadLocks, at every term
	}
	t := s.lockTable()
	_, closer, err := s.db.Get(keyLocksHeld)
	if err == pebble.ErrNotFound {
		return nil
	}
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	closer.Close()
	t.mu.Lock()
	t.grace = time.Now().Add(LockGrace)
	t.marked = true
	t.mu.Unlock()
	s.log.Info("meta: restarted while mounts may hold file locks: they come back with the mounts' sessions; no other lock granted for the grace", "grace", LockGrace)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-time.After(LockGrace):
		case <-s.closing:
			return
		}
		// No mount brought a lock back: the next start needs no grace.
		t.mu.Lock()
		defer t.mu.Unlock()
		if len(t.files) > 0 || !t.marked {
			return
		}
		if err := s.db.Delete(keyLocksHeld, pebble.Sync); err != nil {
			s.log.Warn("meta: could not clear the locks-held marker (the next start takes a grace it may not need)", "err", err)
			return
		}
		t.marked = false
	}()
	return nil
}

// markLocksHeld records, before a meta alone holds its first lock since it
// started, that a restart must wait for the mounts' locks (t.mu held).
func (s *Service) markLocksHeld(t *lockTable) error {
	if s.group != nil || t.marked {
		return nil
	}
	if err := s.db.Set(keyLocksHeld, []byte{1}, pebble.Sync); err != nil {
		return errors.E(errors.Op("meta.markLocksHeld"), errors.IO, err)
	}
	t.marked = true
	return nil
}

// LockGrace is how long a new meta leader waits for mounts to re-assert
// their locks before it grants any: mounts retry meta with a back-off of
// at most 2s and reopen their session within a few seconds of a leader
// being ready.
const LockGrace = 3 * SessionLease

// leadLocks readies the lock table of a member that has just become the group's
// leader: what it held from an earlier term is stale, and the mounts'
// locks come back with their sessions during the grace.
//
// Every mount session open here is ended: one that stayed open through
// the member's earlier terms would never send its locks again, and the
// table it would find is empty (a member that lost and won back the
// leadership while its streams stayed up lost every lock).
func (s *Service) leadLocks() {
	t := s.lockTable()
	st := s.sessions()
	st.mu.Lock()
	t.mu.Lock()
	clear(t.files)
	t.grace = time.Now().Add(LockGrace)
	t.wake()
	t.mu.Unlock()
	for ms := range st.m {
		ms.cancel()
	}
	st.mu.Unlock()
	s.log.Info("meta: file locks come back from the mounts; no other lock granted for the grace", "grace", LockGrace)
}

// endSessions ends every mount session open here, as a member that
// stops leading must: the mounts then find the leader and bring their
// locks to it.
func (s *Service) endSessions() {
	t := s.lockTable()
	st := s.sessions()
	st.mu.Lock()
	for ms := range st.m {
		ms.cancel()
	}
	st.mu.Unlock()
	// Lock calls waiting here look again, and go to the leader.
	t.mu.Lock()
	t.wake()
	t.mu.Unlock()
}

// leaderTerm counts this member's leadership changes (0 for a meta
// alone): a lock call answers only in the term it began in.
func (s *Service) leaderTerm() uint64 {
	if s.group == nil {
		return 0
	}
	return s.group.gen.Load()
}

// graceLeft is what remains of the grace (0 when over).
func (t *lockTable) graceLeft() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(time.Until(t.grace), 0)
}

// reassertLocks takes back the locks session id holds, which it sent with
// its first message (see lockTable). One that another owner holds
// meanwhile (granted after the grace) is lost: logged, not granted.
func (s *Service) reassertLocks(id string, locks []*metapb.MountLockRequest) {
	if len(locks) == 0 {
		return
	}
	t := s.lockTable()
	t.mu.Lock()
	defer t.mu.Unlock()
	s.log.Info("meta: a mount re-asserts its file locks", "session", id, "locks", len(locks), "in_grace", time.Now().Before(t.grace))
	for _, r := range locks {
		if r.Type == syscall.F_UNLCK || r.Type > syscall.F_UNLCK || r.End < r.Start {
			continue
		}
		r.Session, r.Test, r.Wait = id, false, false
		if r.Flock {
			r.Start, r.End = 0, math.MaxUint64
		}
		f := lockFile{r.Ns, r.Ino}
		if _, ok := t.conflict(f, r); ok {
			s.log.Warn("meta: a mount's lock was taken by another while its session was away: lost", "session", id, "ns", r.Ns, "ino", r.Ino)
			continue
		}
		if err := s.markLocksHeld(t); err != nil {
			// Still taken back: the mount holds it, and refusing it here
			// would not release it there.
			s.log.Warn("meta: a re-asserted lock is not marked in the store: a restart now would lose it", "err", err)
		}
		t.release(f, r)
		t.files[f] = append(t.files[f], heldLock{
			session: id, owner: r.Owner, flock: r.Flock,
			start: r.Start, end: r.End, write: r.Type == syscall.F_WRLCK, pid: r.Pid,
		})
	}
}

type lockFile struct {
	ns  string
	ino uint64
}

type heldLock struct {
	session string
	owner   uint64
	flock   bool
	start   uint64 // inclusive
	end     uint64 // inclusive
	write   bool
	pid     uint32
}

func (l heldLock) sameOwner(r *metapb.MountLockRequest) bool {
	return l.session == r.Session && l.owner == r.Owner && l.flock == r.Flock
}

// conflict returns a lock held by another owner that excludes r.
func (t *lockTable) conflict(f lockFile, r *metapb.MountLockRequest) (heldLock, bool) {
	for _, l := range t.files[f] {
		if l.flock != r.Flock || l.sameOwner(r) || l.end < r.Start || l.start > r.End {
			continue
		}
		if l.write || r.Type == syscall.F_WRLCK {
			return l, true
		}
	}
	return heldLock{}, false
}

// release drops r's owner's locks over r's range, splitting those that
// reach past it (t.mu held).
func (t *lockTable) release(f lockFile, r *metapb.MountLockRequest) {
	var kept []heldLock
	dropped := false
	for _, l := range t.files[f] {
		if !l.sameOwner(r) || l.end < r.Start || l.start > r.End {
			kept = append(kept, l)
			continue
		}
		dropped = true
		if l.start < r.Start {
			left := l
			left.end = r.Start - 1
			kept = append(kept, left)
		}
		if l.end > r.End {
			right := l
			right.start = r.End + 1
			kept = append(kept, right)
		}
	}
	if len(kept) == 0 {
		delete(t.files, f)
	} else {
		t.files[f] = kept
	}
	if dropped {
		t.wake()
	}
}

func (t *lockTable) wake() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// dropSession releases every lock of session id.
func (t *lockTable) dropSession(id string) (dropped int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for f, ls := range t.files {
		var kept []heldLock
		for _, l := range ls {
			if l.session == id {
				dropped++
			} else {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(t.files, f)
		} else {
			t.files[f] = kept
		}
	}
	if dropped > 0 {
		t.wake()
	}
	return dropped
}

func (s *Service) lockTable() *lockTable {
	t := &s.locks
	t.mu.Lock()
	if t.files == nil {
		t.files = map[lockFile][]heldLock{}
		t.changed = make(chan struct{})
	}
	t.mu.Unlock()
	return t
}

// MountLock takes, tests or releases a lock (see lockTable).
func (s *Service) MountLock(ctx context.Context, req *metapb.MountLockRequest) (*metapb.MountLockResponse, error) {
	const op = errors.Op("meta.MountLock")
	if req.Type > syscall.F_UNLCK || req.End < req.Start {
		return nil, errors.E(op, errors.Invalid, "bad lock type or range")
	}
	if req.Flock {
		req.Start, req.End = 0, math.MaxUint64
	}
	st := s.sessions()
	st.mu.Lock()
	live := st.byID(req.Session) != nil
	st.mu.Unlock()
	if !live && req.Type != syscall.F_UNLCK {
		// A lock must die with its session: without one it never would.
		return nil, errors.E(op, errors.Unavailable, "no live session "+req.Session)
	}
	t := s.lockTable()
	if !live && t.graceLeft() > 0 {
		// Its locks come back with its session: an unlock now would be
		// undone by them.
		return nil, errors.E(op, errors.Unavailable, "meta's leader changed: waiting for session "+req.Session)
	}
	// The table is the leader's, of this term: a member that stopped
	// leading while the call waited (for the grace or for a holder) must
	// not answer from it, and sends the mount to the leader instead.
	term := s.leaderTerm()
	f := lockFile{req.Ns, req.Ino}
	for {
		t.mu.Lock()
		if !s.leading() || s.leaderTerm() != term {
			t.mu.Unlock()
			return nil, s.group.notLeader()
		}
		if g := time.Until(t.grace); g > 0 && req.Type != syscall.F_UNLCK {
			ch := t.changed
			t.mu.Unlock()
			select {
			case <-time.After(g):
			case <-ch:
			case <-ctx.Done():
				return nil, errors.E(op, errors.Canceled, ctx.Err())
			}
			continue
		}
		if req.Type == syscall.F_UNLCK {
			if !req.Test {
				t.release(f, req)
			}
			t.mu.Unlock()
			return &metapb.MountLockResponse{Granted: true, Type: syscall.F_UNLCK}, nil
		}
		if c, ok := t.conflict(f, req); ok {
			if req.Test || !req.Wait {
				t.mu.Unlock()
				typ := uint32(syscall.F_RDLCK)
				if c.write {
					typ = syscall.F_WRLCK
				}
				return &metapb.MountLockResponse{Type: typ, Start: c.start, End: c.end, Pid: c.pid}, nil
			}
			ch := t.changed
			t.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, errors.E(op, errors.Canceled, ctx.Err())
			}
		}
		if req.Test {
			t.mu.Unlock()
			return &metapb.MountLockResponse{Granted: true, Type: syscall.F_UNLCK}, nil
		}
		if err := s.markLocksHeld(t); err != nil {
			t.mu.Unlock()
			return nil, errors.E(op, errors.Unavailable, err)
		}
		// Replace the owner's locks over the range (an upgrade, a
		// downgrade or a merge), as one step: no other owner sees the
		// range free in between.
		t.release(f, req)
		t.files[f] = append(t.files[f], heldLock{
			session: req.Session, owner: req.Owner, flock: req.Flock,
			start: req.Start, end: req.End, write: req.Type == syscall.F_WRLCK, pid: req.Pid,
		})
		t.mu.Unlock()
		return &metapb.MountLockResponse{Granted: true, Type: req.Type}, nil
	}
}

// sessionEnded drops the locks of session id unless a session of that
// id is live again within a lease (a reconnect keeps them).
func (s *Service) sessionEnded(id string) {
	time.AfterFunc(SessionLease, func() {
		st := s.sessions()
		st.mu.Lock()
		back := st.byID(id) != nil
		st.mu.Unlock()
		if !back {
			if n := s.lockTable().dropSession(id); n > 0 {
				s.log.Info("meta: a mount's session ended and did not come back: its file locks are released", "session", id, "locks", n)
			}
			s.openFiles().dropSession(id)
			s.reclaim()
		}
	})
}
