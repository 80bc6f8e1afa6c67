package meta

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"cairn/proto/metapb"
)

// session opens a mount session on ts and reads up to its first event.
func openSession(t *testing.T, ts *testServer, id string) metapb.Meta_MountSessionClient {
	t.Helper()
	return openSessionWith(t, ts, id)
}

// openSessionWith opens session id, which says it holds locks.
func openSessionWith(t *testing.T, ts *testServer, id string, locks ...*metapb.MountLockRequest) metapb.Meta_MountSessionClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := ts.cl.MountSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&metapb.MountSessionMsg{Session: id, Locks: locks}); err != nil {
		t.Fatal(err)
	}
	ev, err := st.Recv()
	if err != nil || !ev.Reset_ {
		t.Fatalf("first event %v, %v", ev, err)
	}
	return st
}

// nextEvent returns the next event that is not a heartbeat.
func nextEvent(t *testing.T, st metapb.Meta_MountSessionClient) *metapb.Event {
	t.Helper()
	for {
		ev, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != 0 || ev.MountFlush || ev.MountNotice != 0 {
			return ev
		}
	}
}

func async(f func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func notYet(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) before the session answered", what, err)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestSessionAckBeforeAnswer(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	st := openSession(t, ts, "mount-b")

	// A change is answered only once the session acknowledged its event.
	done := async(func() error {
		_, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "data", Path: "d"})
		return err
	})
	ev := nextEvent(t, st)
	if ev.Path != "d" {
		t.Fatalf("event %v", ev)
	}
	notYet(t, done, "Mkdir")
	if err := st.Send(&metapb.MountSessionMsg{Ack: ev.Seq}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The session's own changes do not wait for itself.
	own := metadata.AppendToOutgoingContext(bg, SessionHeader, "mount-b")
	if _, err := ts.cl.Mkdir(own, &metapb.MkdirRequest{Ns: "data", Path: "e"}); err != nil {
		t.Fatal(err)
	}
	st.Send(&metapb.MountSessionMsg{Ack: nextEvent(t, st).Seq})

	// A session that stays silent is cut off after its lease, and the
	// change goes through.
	t0 := time.Now()
	if _, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "data", Path: "f"}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < SessionLease-time.Second {
		t.Fatalf("silent session waited for %v only", d)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break // cut off
		}
	}
}

func TestWriteBehindRecall(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	a := openSession(t, ts, "mount-a")
	b := openSession(t, ts, "mount-b")
	committed := async(func() error {
		_, err := ts.cl.Commit(bg, &metapb.CommitRequest{Ns: "data", Path: "f", Size: 10, Extents: []*metapb.Extent{ext(0, 10, 1, 1)}, Etag: "e"})
		return err
	})
	for _, st := range []metapb.Meta_MountSessionClient{a, b} {
		st.Send(&metapb.MountSessionMsg{Ack: nextEvent(t, st).Seq})
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}

	// A announces a change of f left behind: B is told before A's
	// MountDirty returns.
	fromA := metadata.AppendToOutgoingContext(bg, SessionHeader, "mount-a")
	dirty := async(func() error {
		_, err := ts.cl.MountDirty(fromA, &metapb.MountDirtyRequest{Session: "mount-a", Epoch: 1, Ns: "data", Path: "f"})
		return err
	})
	notice := nextEvent(t, b)
	if notice.MountNotice == 0 || notice.Path != "f" {
		t.Fatalf("B got %v", notice)
	}
	notYet(t, dirty, "MountDirty")
	b.Send(&metapb.MountSessionMsg{NoticeAck: notice.MountNotice})
	if err := <-dirty; err != nil {
		t.Fatal(err)
	}

	// Another client's read waits until A committed and said so.
	read := async(func() error {
		_, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "data", Path: "f"})
		return err
	})
	if ev := nextEvent(t, a); !ev.MountFlush {
		t.Fatalf("A got %v, want a flush request", ev)
	}
	notYet(t, read, "Resolve")
	// A's own reads and its drain are not held up.
	if _, err := ts.cl.Resolve(fromA, &metapb.ResolveRequest{Ns: "data", Path: "f"}); err != nil {
		t.Fatal(err)
	}
	a.Send(&metapb.MountSessionMsg{Clean: 1})
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}
