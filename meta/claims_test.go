package meta

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/metadata"

	"cairn/errors"
	"cairn/proto/metapb"
)

// fakeMount is a mount session driven by a test: it acknowledges every
// event and notice at once, and hands each flush request (meta's recall)
// to onFlush, which reports clean when it likes.
type fakeMount struct {
	id      string
	mu      sync.Mutex // Send is not safe for concurrent use
	st      metapb.Meta_MountSessionClient
	flushes chan struct{}
}

func newFakeMount(t *testing.T, ts *testServer, id string) *fakeMount {
	t.Helper()
	m := &fakeMount{id: id, st: openSession(t, ts, id), flushes: make(chan struct{}, 16)}
	go func() {
		for {
			ev, err := m.st.Recv()
			if err != nil {
				return
			}
			switch {
			case ev.MountFlush:
				m.flushes <- struct{}{}
			case ev.MountNotice != 0:
				m.send(&metapb.MountSessionMsg{NoticeAck: ev.MountNotice})
			case ev.Seq != 0:
				m.send(&metapb.MountSessionMsg{Ack: ev.Seq})
			}
		}
	}()
	return m
}

func (m *fakeMount) send(msg *metapb.MountSessionMsg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st.Send(msg)
}

// ctx is a call context from this mount; drain marks a write-behind commit.
func (m *fakeMount) ctx(drain bool) context.Context {
	ctx := metadata.AppendToOutgoingContext(bg, SessionHeader, m.id)
	if drain {
		ctx = metadata.AppendToOutgoingContext(ctx, DrainHeader, "1")
	}
	return ctx
}

// TestSyncMkdirHonoursClaimGrantedMeanwhile is the race in which a
// synchronous mkdir and another mount's create claim of the same name
// both succeeded: the mkdir passed its recall of dirty mounts (here held
// up by a third mount, C, so that the claim comes in between), then B
// was granted the name (free in meta), then the mkdir applied. B had
// answered its mkdir and its queued commit later failed. Now the
// synchronous mkdir recalls B's claim first and fails with Exist.
func TestSyncMkdirHonoursClaimGrantedMeanwhile(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	a := newFakeMount(t, ts, "mount-a")
	b := newFakeMount(t, ts, "mount-b")
	c := newFakeMount(t, ts, "mount-c")

	// C is dirty with a change the mkdir names: the mkdir waits for it.
	if _, err := ts.cl.MountDirty(c.ctx(false), &metapb.MountDirtyRequest{Session: c.id, Epoch: 1, Ns: "data", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	// A's synchronous mkdir of d waits for C's commit...
	syncMkdir := async(func() error {
		_, err := ts.cl.Mkdir(a.ctx(false), &metapb.MkdirRequest{Ns: "data", Path: "d"})
		return err
	})
	<-c.flushes
	// ...while B asks to create d behind, and is granted it: d is not in
	// meta, and no one holds a claim on it.
	_, claimErr := ts.cl.MountDirty(b.ctx(false), &metapb.MountDirtyRequest{Session: b.id, Epoch: 1, Ns: "data", Path: "d", Create: true})
	// B commits its queued mkdir when recalled.
	go func() {
		for range b.flushes {
			if claimErr == nil {
				if _, err := ts.cl.Mkdir(b.ctx(true), &metapb.MkdirRequest{Ns: "data", Path: "d"}); err != nil {
					t.Errorf("B's queued mkdir: %v", err)
				}
			}
			b.send(&metapb.MountSessionMsg{Clean: 1})
		}
	}()
	c.send(&metapb.MountSessionMsg{Clean: 1})
	err := <-syncMkdir
	if claimErr == nil && err == nil {
		t.Fatal("both the synchronous mkdir and B's claim of the same name succeeded")
	}
	if claimErr == nil {
		wantKind(t, err, errors.Exist)
	}
	if claimErr != nil && err != nil {
		t.Fatalf("neither succeeded: claim %v, mkdir %v", claimErr, err)
	}
}

// TestClaimWaitsForSyncCreate: a claim asked while a synchronous create
// of the name is running is answered after it, with Exist.
func TestClaimWaitsForSyncCreate(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "data")
	_ = newFakeMount(t, ts, "mount-a")
	b := newFakeMount(t, ts, "mount-b")
	release := ts.svc.recallDirty(bg, "Mkdir", &metapb.MkdirRequest{Ns: "data", Path: "/d/"})
	claim := async(func() error {
		_, err := ts.cl.MountDirty(b.ctx(false), &metapb.MountDirtyRequest{Session: b.id, Epoch: 1, Ns: "data", Path: "d", Create: true})
		return err
	})
	notYet(t, claim, "MountDirty(create) beside a synchronous mkdir")
	if _, err := ts.cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "data", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	release()
	wantKind(t, <-claim, errors.Exist)
}

func BenchmarkRequestScope(b *testing.B) {
	req := &metapb.RenameRequest{Ns: "data", From: "a/b/c", To: "a/b/d"}
	for b.Loop() {
		requestScope(req.ProtoReflect())
	}
}
