package meta

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// TestLockDiesWithSession: a mount's locks are released when its session
// ends for good (the mount died), and a waiter on another mount is woken.
func TestLockDiesWithSession(t *testing.T) {
	ts := start(t, newCluster())
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	st, err := ts.cl.MountSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&metapb.MountSessionMsg{Session: "mount-a"})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	openSession(t, ts, "mount-b")
	lock := func(session string, wait bool) (*metapb.MountLockResponse, error) {
		return ts.cl.MountLock(bg, &metapb.MountLockRequest{
			Session: session, Ns: "data", Ino: 7, Owner: 1, Start: 0, End: 99, Type: syscall.F_WRLCK, Wait: wait,
		})
	}
	if r, err := lock("mount-a", false); err != nil || !r.Granted {
		t.Fatalf("A's lock: %v, %v", r, err)
	}
	if r, err := lock("mount-b", false); err != nil || r.Granted || r.Type != syscall.F_WRLCK || r.End != 99 {
		t.Fatalf("B's lock while A holds it: %v, %v", r, err)
	}
	granted := async(func() error {
		r, err := lock("mount-b", true)
		if err == nil && !r.Granted {
			t.Errorf("waiting lock answered %v", r)
		}
		return err
	})
	notYet(t, granted, "B's waiting lock")
	kill() // A's mount dies: its session ends and does not come back
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(SessionLease + 5*time.Second):
		t.Fatal("B still waits a lease after A's session ended")
	}
	// B holds it now; A's session is gone, so A cannot lock.
	if _, err := lock("mount-a", false); err == nil {
		t.Fatal("a lock for a session that ended was granted")
	}
}

// TestLocksReassertedToNewLeader: a new leader (leadLocks) has lost every
// lock; a mount hands back those it holds with its session's first
// message, and until the grace ends no other lock is granted: a
// conflicting call waits and is then refused, and an unlock from a
// session not yet back is refused (the mount retries once it is).
func TestLocksReassertedToNewLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the whole lock grace (LockGrace): not in the -short tier")
	}
	ts := start(t, newCluster())
	ts.svc.leadLocks()
	lock := func(session string, typ uint32) (*metapb.MountLockResponse, error) {
		return ts.cl.MountLock(bg, &metapb.MountLockRequest{
			Session: session, Ns: "data", Ino: 7, Owner: 1, Start: 0, End: 99, Type: typ,
		})
	}
	openSession(t, ts, "mount-b")
	t0 := time.Now()
	if _, err := lock("mount-a", syscall.F_UNLCK); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("an unlock from a session not back yet: %v", err)
	}
	refused := async(func() error {
		r, err := lock("mount-b", syscall.F_WRLCK)
		if err == nil && r.Granted {
			return errors.E(errors.Invalid, "granted")
		}
		return err
	})
	// A's session comes back with its lock.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := ts.cl.MountSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&metapb.MountSessionMsg{Session: "mount-a", Locks: []*metapb.MountLockRequest{
		{Ns: "data", Ino: 7, Owner: 1, Start: 10, End: 19, Type: syscall.F_WRLCK},
	}})
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; err != nil {
		t.Fatalf("B's lock beside A's re-asserted one: %v", err)
	}
	if d := time.Since(t0); d < LockGrace-time.Second {
		t.Fatalf("B was answered %v into a grace of %v", d, LockGrace)
	}
	if r, err := lock("mount-a", syscall.F_UNLCK); err != nil || !r.Granted {
		t.Fatalf("A's unlock: %v, %v", r, err)
	}
	if r, err := lock("mount-b", syscall.F_WRLCK); err != nil || !r.Granted {
		t.Fatalf("B's lock after A's unlock: %v, %v", r, err)
	}
}

// TestNewTermEndsMountSessions: a member that wins the leadership again
// while a mount's session stream stayed open to it (it lost and regained
// it under load) starts from an empty lock table; the session must end so
// that the mount reopens it and brings its locks back. Before, the stream
// stayed up, the locks were never sent again, and another mount was
// granted them after the grace.
func TestNewTermEndsMountSessions(t *testing.T) {
	ts := start(t, newCluster())
	st := openSession(t, ts, "mount-a")
	if r, err := ts.cl.MountLock(bg, &metapb.MountLockRequest{
		Session: "mount-a", Ns: "data", Ino: 7, Owner: 1, Start: 0, End: 99, Type: syscall.F_WRLCK,
	}); err != nil || !r.Granted {
		t.Fatalf("A's lock: %v, %v", r, err)
	}
	ended := async(func() error {
		for {
			if _, err := st.Recv(); err != nil {
				return nil // the stream ended: the mount reconnects
			}
		}
	})
	ts.svc.leadLocks()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the session stream stayed open through a new term: its locks would never come back")
	}
	// The mount reopens its session with its lock, and holds it again.
	openSessionWith(t, ts, "mount-a", &metapb.MountLockRequest{Ns: "data", Ino: 7, Owner: 1, Start: 0, End: 99, Type: syscall.F_WRLCK})
	openSession(t, ts, "mount-b")
	r, err := ts.cl.MountLock(bg, &metapb.MountLockRequest{
		Session: "mount-b", Ns: "data", Ino: 7, Owner: 2, Start: 50, End: 60, Type: syscall.F_WRLCK,
	})
	if err != nil || r.Granted {
		t.Fatalf("B's lock over A's after the new term: %v, %v", r, err)
	}
}

// TestLoneMetaRestartKeepsLocks: a meta alone that restarts while a mount
// holds a lock takes the grace, so the holder's session brings it back
// before another mount can take it; a fresh store takes none, and a store
// whose restart saw no lock come back takes none the time after. Before,
// a lone meta always started without a grace and B was granted A's lock.
func TestLoneMetaRestartKeepsLocks(t *testing.T) {
	dir := t.TempDir()
	c := newCluster()
	open := func() *testServer {
		t.Helper()
		svc, err := Open(testConfig(dir, c))
		if err != nil {
			t.Fatal(err)
		}
		return serve(t, svc)
	}
	ts := open()
	if g := ts.svc.lockTable().graceLeft(); g != 0 {
		t.Fatalf("a fresh store took a grace of %v", g)
	}
	aLock := &metapb.MountLockRequest{Ns: "data", Ino: 7, Owner: 1, Start: 0, End: 99, Type: syscall.F_WRLCK}
	openSession(t, ts, "mount-a")
	req := proto.Clone(aLock).(*metapb.MountLockRequest)
	req.Session = "mount-a"
	if r, err := ts.cl.MountLock(bg, req); err != nil || !r.Granted {
		t.Fatalf("A's lock: %v, %v", r, err)
	}
	ts.stop()

	// Restart: B's session is back first and asks for A's range; A's
	// session comes back with its lock during the grace.
	ts = open()
	if ts.svc.lockTable().graceLeft() == 0 {
		t.Fatal("a restart after a lock was held took no grace")
	}
	openSession(t, ts, "mount-b")
	bAnswer := async(func() error {
		r, err := ts.cl.MountLock(bg, &metapb.MountLockRequest{
			Session: "mount-b", Ns: "data", Ino: 7, Owner: 2, Start: 50, End: 60, Type: syscall.F_WRLCK,
		})
		if err == nil && r.Granted {
			return errors.E(errors.Op("test"), "B was granted A's range after the restart")
		}
		return err
	})
	notYet(t, bAnswer, "B's lock during the grace")
	openSessionWith(t, ts, "mount-a", aLock)
	if err := <-bAnswer; err != nil {
		t.Fatal(err)
	}
	ts.stop()

	// Restart again, and no mount comes back: once the grace is over the
	// marker goes, and the start after that takes no grace.
	ts = open()
	if ts.svc.lockTable().graceLeft() == 0 {
		t.Fatal("a restart while A's re-asserted lock was held took no grace")
	}
	await.Until(t, LockGrace+30*time.Second, "the marker cleared after a grace with no lock back", func() bool {
		_, closer, err := ts.svc.db.Get(keyLocksHeld)
		if err == nil {
			closer.Close()
		}
		return err != nil
	})
	ts.stop()
	ts = open()
	if g := ts.svc.lockTable().graceLeft(); g != 0 {
		t.Fatalf("a restart after a grace in which no lock came back took a grace of %v", g)
	}
}
