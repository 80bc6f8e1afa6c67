package meta

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

func appendCmd(id []byte, now int64) *metapb.Command {
	return &metapb.Command{NowNs: now, RequestId: id, Op: &metapb.Command_Append{Append: &metapb.AppendRequest{
		Ns: "fsm", Path: "log", Create: true, Extents: []*metapb.Extent{ext(0, 100, 1, uint64(now))}}}}
}

// applyOne applies cmd as entry index, as a member of a group does.
func applyOne(t *testing.T, svc *Service, cmd *metapb.Command, index uint64) (*result, error) {
	t.Helper()
	svc.mu.Lock()
	defer svc.mu.Unlock()
	res, cmdErr, err := svc.applyEntry(cmd, index, false)
	if err != nil {
		t.Fatal(err)
	}
	return res, cmdErr
}

func sizeOf(t *testing.T, svc *Service, p string) uint64 {
	t.Helper()
	r, err := svc.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: p})
	if err != nil {
		t.Fatal(err)
	}
	return r.Inode.Size
}

// A command sent again with its request id (a client's retry reaching the
// log a second time) changes nothing, publishes nothing, and answers what
// the first answered; its own error included.
func TestRequestIDAppliedOnce(t *testing.T) {
	svc := openFSM(t)
	applyAll(t, svc, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	id := bytes.Repeat([]byte{7}, 16)
	first, err := applyOne(t, svc, appendCmd(id, 10), 2)
	if err != nil {
		t.Fatal(err)
	}
	seq := svc.hub.lastSeq()
	again, err := applyOne(t, svc, appendCmd(id, 20), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := sizeOf(t, svc, "log"); got != 100 {
		t.Fatalf("size %d after an append sent twice with one id, want 100", got)
	}
	if again.inode.Size != first.inode.Size || again.inode.Version != first.inode.Version || again.inode.Seq != first.inode.Seq || first.inode.Seq == 0 {
		t.Fatalf("the repeat answered %v, the first %v", again.inode, first.inode)
	}
	if svc.hub.lastSeq() != seq {
		t.Fatalf("the repeat published events (seq %d -> %d)", seq, svc.hub.lastSeq())
	}
	if got, _ := appliedIndex(svc.db); got != 3 {
		t.Fatalf("applied index %d, want 3: a repeat moves it too", got)
	}
	// Another id is another append.
	if _, err := applyOne(t, svc, appendCmd(bytes.Repeat([]byte{8}, 16), 30), 4); err != nil {
		t.Fatal(err)
	}
	if got := sizeOf(t, svc, "log"); got != 200 {
		t.Fatalf("size %d after a second id's append, want 200", got)
	}

	// A command that failed answers the same error when repeated, not the
	// error its own first attempt would cause (an exclusive create: Exist).
	mk := func(now int64) *metapb.Command {
		return &metapb.Command{NowNs: now, RequestId: bytes.Repeat([]byte{9}, 16), Op: &metapb.Command_Commit{Commit: &metapb.CommitRequest{
			Ns: "fsm", Path: "nodir/f", Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 99)}, IfNoneMatch: true}}}
	}
	_, err1 := applyOne(t, svc, mk(40), 5)
	wantKind(t, err1, errors.NotExist)
	applyAll(t, svc, 6, []*metapb.Command{{NowNs: 50, Op: &metapb.Command_Mkdir{Mkdir: &metapb.MkdirRequest{Ns: "fsm", Path: "nodir"}}}})
	_, err2 := applyOne(t, svc, mk(60), 7)
	wantKind(t, err2, errors.NotExist)
	if a, b := protoError(err1), protoError(err2); !proto.Equal(a, b) { // as a client sees them
		t.Fatalf("the repeat failed with %v, the first with %v", b, a)
	}
	if _, err := svc.Resolve(bg, &metapb.ResolveRequest{Ns: "fsm", Path: "nodir/f"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("a failed command's repeat created the file: %v", err)
	}
}

// The table holds the last requestWindow ids: older ones are forgotten,
// in the same batches, so it stays bounded.
func TestRequestIDWindow(t *testing.T) {
	defer func(w uint64) { requestWindow = w }(requestWindow)
	requestWindow = 4
	svc := openFSM(t)
	applyAll(t, svc, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	idOf := func(i byte) []byte { return bytes.Repeat([]byte{i}, 16) }
	for i := range byte(10) {
		if _, err := applyOne(t, svc, appendCmd(idOf(i), int64(10+i)), uint64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(dump(t, svc.db), `"c/req/`); n != 4 {
		t.Fatalf("%d ids remembered, want the window's 4", n)
	}
	// The newest id is remembered, the oldest forgotten: sent again, it
	// applies again.
	applyOne(t, svc, appendCmd(idOf(9), 100), 20)
	if got := sizeOf(t, svc, "log"); got != 1000 {
		t.Fatalf("size %d, want 1000: the last id's repeat applied", got)
	}
	applyOne(t, svc, appendCmd(idOf(0), 101), 21)
	if got := sizeOf(t, svc, "log"); got != 1100 {
		t.Fatalf("size %d, want 1100: the forgotten id's repeat did not apply", got)
	}
}

// The table travels in snapshots: a member that restored one refuses the
// repeat of a command applied before it.
func TestRequestIDSurvivesSnapshot(t *testing.T) {
	a, b := openFSM(t), openFSM(t)
	applyAll(t, a, 1, []*metapb.Command{{NowNs: 1, Op: &metapb.Command_CreateNamespace{CreateNamespace: &metapb.CreateNamespaceRequest{Name: "fsm", Owner: "o"}}}})
	id := bytes.Repeat([]byte{3}, 16)
	if _, err := applyOne(t, a, appendCmd(id, 10), 2); err != nil {
		t.Fatal(err)
	}
	snap := a.db.NewSnapshot()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, snap, 2); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	br := bufio.NewReader(&buf)
	applied, err := readSnapshotHeader(br)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadSnapshot(b.db, br, applied); err != nil {
		t.Fatal(err)
	}
	if err := b.rebuild(); err != nil {
		t.Fatal(err)
	}
	if _, err := applyOne(t, b, appendCmd(id, 20), 3); err != nil {
		t.Fatal(err)
	}
	if got := sizeOf(t, b, "log"); got != 100 {
		t.Fatalf("size %d on the restored member, want 100", got)
	}
}

func TestParseRequestID(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"00112233445566778899aabbccddeeff", true},
		{"00112233445566778899AABBCCDDEEFF", true},
		{"", false},
		{"0011", false},
		{"00112233445566778899aabbccddeefg", false},
		{"00112233445566778899aabbccddeeff00", false},
	} {
		id, err := ParseRequestID(tc.in)
		if tc.ok != (err == nil) || tc.ok && len(id) != 16 {
			t.Errorf("ParseRequestID(%q) = %x, %v", tc.in, id, err)
		}
		if !tc.ok {
			wantKind(t, err, errors.Invalid)
		}
	}
}

func FuzzParseRequestID(f *testing.F) {
	f.Add("00112233445566778899aabbccddeeff")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseRequestID(s)
		if err != nil {
			if !errors.Is(errors.Invalid, err) {
				t.Fatalf("%q: %v is not Invalid", s, err)
			}
			return
		}
		if len(id) != 16 || hex.EncodeToString(id) != strings.ToLower(s) {
			t.Fatalf("%q read as %x", s, id)
		}
	})
}

// TestGroupRetryAfterLeaderKilledAppliesOnce kills the leader after it
// applied a call's command and before its answer left: the client sends
// the call again, with the same request id, to the next leader, and the
// command is applied once (an exclusive create does not fail on itself,
// an append is not doubled, a mkdir does not find its own directory).
func TestGroupRetryAfterLeaderKilledAppliesOnce(t *testing.T) {
	var (
		mu     sync.Mutex
		target string       // the method whose next call kills its leader
		killed chan *member // the member killed, once it is down
		g      *testGroup
	)
	killer := func(m *member) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			mu.Lock()
			hit := err == nil && opName(info.FullMethod) == target
			if hit {
				target = ""
			}
			ch := killed
			mu.Unlock()
			if !hit {
				return resp, err
			}
			// Applied, committed on a majority; the answer is lost.
			go func() {
				g.stop(m)
				ch <- m
			}()
			<-ctx.Done()
			return nil, ctx.Err()
		})}
	}
	g = newTestGroupWith(t, 3, nil, killer)
	g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "grp")

	arm := func(method string) chan *member {
		mu.Lock()
		defer mu.Unlock()
		target, killed = method, make(chan *member, 1)
		return killed
	}
	revive := func(ch chan *member) {
		t.Helper()
		select {
		case m := <-ch:
			g.restart(m)
			g.awaitLeader()
		case <-time.After(20 * time.Second):
			t.Fatal("the call did not reach the member armed to die")
		}
	}

	ch := arm("Commit")
	in, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "grp", Path: "f", Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 1)}, IfNoneMatch: true})
	if err != nil {
		t.Fatalf("exclusive create retried after the leader died: %v", err)
	}
	revive(ch)
	if in.Size != 1 {
		t.Fatalf("create answered %v", in)
	}

	ch = arm("Append")
	in, err = cl.Append(bg, &metapb.AppendRequest{Ns: "grp", Path: "f", Extents: []*metapb.Extent{ext(0, 100, 1, 2)}})
	if err != nil {
		t.Fatalf("append retried after the leader died: %v", err)
	}
	revive(ch)
	if in.Size != 101 {
		t.Fatalf("append answered size %d, want 101", in.Size)
	}
	r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inode.Size != 101 {
		t.Fatalf("file is %d bytes after one append of 100 to 1 byte: the retry applied again", r.Inode.Size)
	}

	ch = arm("Mkdir")
	if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "grp", Path: "d"}); err != nil {
		t.Fatalf("mkdir retried after the leader died: %v", err)
	}
	revive(ch)

	// Every member holds the one append.
	for _, m := range g.members {
		await.Until(t, 20*time.Second, "member "+m.addr+" caught up", func() bool {
			_, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: "d"})
			return err == nil
		})
		r, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: "f"})
		if err != nil || r.Inode.Size != 101 {
			t.Fatalf("member %s: %v %v", m.addr, r, err)
		}
	}
}

// A malformed request id is refused: the caller meant the call to be safe
// to send again and it would not be.
func TestGroupRefusesMalformedRequestID(t *testing.T) {
	g := newTestGroup(t, 1, nil)
	g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "grp")
	ctx := metadata.AppendToOutgoingContext(bg, RequestIDHeader, "not-an-id")
	_, err := cl.Mkdir(ctx, &metapb.MkdirRequest{Ns: "grp", Path: "d"})
	wantKind(t, err, errors.Invalid)
}
