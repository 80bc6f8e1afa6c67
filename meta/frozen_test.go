package meta

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// freezer wraps a member's gRPC listener: while frozen, the connections
// it accepted take in nothing and send out nothing, as those of a stopped
// (SIGSTOP) or cut-off process: its peers see silence, not a closed
// socket, and their calls to it hang.
type freezer struct {
	net.Listener
	mu     sync.Mutex
	frozen chan struct{} // closed on thaw; nil: not frozen
	held   atomic.Int64  // reads that came in while frozen
}

func (f *freezer) Accept() (net.Conn, error) {
	c, err := f.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &freezerConn{Conn: c, f: f}, nil
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen == nil {
		f.frozen = make(chan struct{})
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen != nil {
		close(f.frozen)
		f.frozen = nil
	}
}

// wait blocks while frozen and reports whether it did.
func (f *freezer) wait() bool {
	f.mu.Lock()
	ch := f.frozen
	f.mu.Unlock()
	if ch == nil {
		return false
	}
	<-ch
	return true
}

type freezerConn struct {
	net.Conn
	f *freezer
}

// Read holds what came in until the thaw.
func (c *freezerConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.f.mu.Lock()
	frozen := c.f.frozen != nil
	c.f.mu.Unlock()
	if frozen {
		c.f.held.Add(1)
		c.f.wait()
	}
	return n, err
}

func (c *freezerConn) Write(b []byte) (int, error) {
	c.f.wait()
	return c.Conn.Write(b)
}

// TestGroupClientLeavesFrozenMember: reads any member may answer
// (StaleOK, AnyMember) go round robin, and the member one goes to may be
// frozen (stopped, or cut off with its connections open): it answers
// nothing, not even a refusal. The group client must send the read to
// another member rather than wait on it (until TCP gives up, or the
// caller's deadline), pass the frozen member by for the next reads, and
// take it back once it answers again. Here a follower's gRPC connections
// freeze.
func TestGroupClientLeavesFrozenMember(t *testing.T) {
	freezers := map[string]*freezer{}
	var mu sync.Mutex
	served := map[string]int{} // member -> reads marked StaleOK or AnyMember it answered
	g := &testGroup{t: t}
	g.listen = func(m *member, l net.Listener) net.Listener {
		f := &freezer{Listener: l}
		freezers[m.addr] = f
		return f
	}
	g.serverOpts = func(m *member) []grpc.ServerOption {
		addr := m.addr
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if err == nil && (staleRequested(ctx) || anyMemberRequested(ctx)) {
				mu.Lock()
				served[addr]++
				mu.Unlock()
			}
			return resp, err
		})}
	}
	g.boot(3)
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "frozen")
	put(t, cl, "frozen", "a", 1, 1)
	for _, m := range g.members { // every member's stale reads see the file
		await.Until(t, 20*time.Second, "every member to apply the file", func() bool {
			return m.svc.group.applied.Load() >= l.svc.group.applied.Load()
		})
	}
	f := g.follower(l)
	fz := freezers[f.addr]
	fz.freeze()
	t.Cleanup(fz.thaw) // before the members stop

	read := func(what string, mark func(context.Context) context.Context) {
		t.Helper()
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		if _, err := cl.Resolve(mark(ctx), &metapb.ResolveRequest{Ns: "frozen", Path: "a"}); err != nil {
			t.Fatalf("%s read with member %s frozen: %v", what, f.addr, err)
		}
	}
	for range 6 { // round robin: each mark reaches every member
		read("stale-ok", StaleOK)
		read("any-member", AnyMember)
	}
	if fz.held.Load() == 0 {
		t.Fatal("no read reached the frozen member: the test shows nothing")
	}
	mu.Lock()
	if n := served[f.addr]; n != 0 {
		t.Fatalf("the frozen member answered %d reads", n)
	}
	mu.Unlock()

	fz.thaw()
	await.Until(t, 30*time.Second, "the thawed member to answer reads again", func() bool {
		read("stale-ok", StaleOK)
		mu.Lock()
		defer mu.Unlock()
		return served[f.addr] > 0
	})
}

// TestGroupFollowerLeavesSilentLeader: a follower answers an AnyMember
// read once the leader gave it a read index; a leader that leaves the
// question unanswered (stopped, or cut off from the follower) must not
// make the follower hold the read until readIndexWait: it refuses it in
// about a second, naming the leader, and the group client has the leader
// answer it. Here every member holds the MetaReadIndex calls it gets
// (whoever leads, after an election under load, too).
func TestGroupFollowerLeavesSilentLeader(t *testing.T) {
	var silent atomic.Bool
	var held atomic.Int64
	release := make(chan struct{})
	g := newTestGroupWith(t, 3, nil, func(m *member) []grpc.ServerOption {
		return holdCalls(func(method string) bool { return silent.Load() && method == "MetaReadIndex" }, &held, release)
	})
	t.Cleanup(func() { close(release) }) // before the members stop
	cl := g.client()
	mkns(t, cl, "silent")
	put(t, cl, "silent", "a", 1, 1)
	silent.Store(true)

	for {
		f := g.follower(g.awaitLeader())
		gen := f.svc.group.gen.Load()
		fc, conn, err := Dial(f.addr, DialTLS(f.node.Client()))
		if err != nil {
			t.Fatal(err)
		}
		// A caller more patient than a second, less than readIndexWait.
		ctx, cancel := context.WithTimeout(bg, readIndexWait-time.Second)
		_, err = fc.Resolve(AnyMember(ctx), &metapb.ResolveRequest{Ns: "silent", Path: "a"})
		cancel()
		conn.Close()
		if f.svc.group.gen.Load() != gen {
			continue // f came to lead (an election under load): it answered, or refused, as a leader
		}
		if _, ok := LeaderOf(err); !ok {
			t.Fatalf("AnyMember read on a follower whose leader leaves the read index unasked: %v; want a refusal naming the leader within %v", err, readIndexWait-time.Second)
		}
		break
	}
	if held.Load() == 0 {
		t.Fatal("the follower never asked the leader: the test shows nothing")
	}
	for range 6 { // through the group client: answered, by the leader
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		_, err := cl.Resolve(AnyMember(ctx), &metapb.ResolveRequest{Ns: "silent", Path: "a"})
		cancel()
		if err != nil {
			t.Fatalf("AnyMember read through the group client with the leader silent on read indexes: %v", err)
		}
	}
}

// holdCalls is a member's server option that holds each call hold picks
// (by method name) until release is closed or the caller gives up,
// counting them in held: a member that takes calls in and never answers.
func holdCalls(hold func(method string) bool, held *atomic.Int64, release <-chan struct{}) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if hold(opName(info.FullMethod)) {
			held.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return h(ctx, req)
	})}
}
