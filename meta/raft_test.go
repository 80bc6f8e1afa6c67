package meta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/pki"
	"cairn/proto/metapb"
)

// member is one meta of a test group: a real Service behind a real gRPC
// server over TLS, its Raft transport on its own loopback port.
type member struct {
	dir, addr, raftAddr string
	node                *pki.Node
	svc                 *Service
	gs                  *grpc.Server
}

type testGroup struct {
	t       testing.TB
	ca      *pki.CA
	members []*member
	peers   []Peer
	tweak   func(*GroupConfig)
	// serverOpts, when set, adds options to a member's gRPC server (a
	// test's interceptor).
	serverOpts func(*member) []grpc.ServerOption
	// config, when set, changes a member's configuration before it
	// opens (secrets_test.go: which member holds the CA).
	config func(*member, *Config)
	// listen, when set, wraps a member's gRPC listener (frozen_test.go:
	// a member that answers nothing).
	listen func(*member, net.Listener) net.Listener
}

func listenLoopback(t testing.TB, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newTestGroup starts n members bootstrapped together.
func newTestGroup(t testing.TB, n int, tweak func(*GroupConfig)) *testGroup {
	t.Helper()
	return newTestGroupWith(t, n, tweak, nil)
}

// newTestGroupWith is newTestGroup with options for each member's gRPC
// server.
func newTestGroupWith(t testing.TB, n int, tweak func(*GroupConfig), serverOpts func(*member) []grpc.ServerOption) *testGroup {
	t.Helper()
	g := &testGroup{t: t, tweak: tweak, serverOpts: serverOpts}
	g.boot(n)
	return g
}

// boot starts n members bootstrapped together, as g's fields say.
func (g *testGroup) boot(n int) {
	t := g.t
	t.Helper()
	ca, err := pki.NewCA("raft test")
	if err != nil {
		t.Fatal(err)
	}
	g.ca = ca
	var gls, rls []net.Listener
	for range n {
		gl, rl := listenLoopback(t, "127.0.0.1:0"), listenLoopback(t, "127.0.0.1:0")
		gls, rls = append(gls, gl), append(rls, rl)
		m := &member{dir: t.TempDir(), addr: gl.Addr().String(), raftAddr: rl.Addr().String()}
		if m.node, err = ca.Node(pki.RoleMeta, "meta", pki.DefaultSANs()); err != nil {
			t.Fatal(err)
		}
		g.members = append(g.members, m)
		g.peers = append(g.peers, Peer{ID: m.addr, Addr: m.raftAddr})
	}
	for i, m := range g.members {
		g.start(m, gls[i], rls[i], g.peers)
	}
	t.Cleanup(func() {
		for _, m := range g.members {
			g.stop(m)
		}
	})
}

func (g *testGroup) start(m *member, gl, rl net.Listener, boot []Peer) {
	t := g.t
	t.Helper()
	cfg := testConfig(m.dir, newCluster())
	cfg.TrustPlaintext = false
	cfg.RootUser, cfg.RootPassword = "ROOTKEY", "rootsecret-0123456789"
	gc := &GroupConfig{ID: m.addr, RaftListener: rl, Bootstrap: boot, TLS: m.node}
	if g.tweak != nil {
		g.tweak(gc)
	}
	cfg.Group = gc
	if g.config != nil {
		g.config(m, &cfg)
	}
	// Every goroutine the member starts carries its label, so that a
	// CPU profile of an in-process group tells the members apart
	// (go tool pprof -tagfocus member=...).
	var svc *Service
	var err error
	pprof.Do(context.Background(), pprof.Labels("member", memberLabel(g, m)), func(context.Context) {
		if svc, err = Open(cfg); err != nil {
			return
		}
		opts := []grpc.ServerOption{ServerTLS(m.node.Server())}
		if g.serverOpts != nil {
			opts = append(opts, g.serverOpts(m)...)
		}
		m.gs = NewGRPCServer(svc, opts...)
		if g.listen != nil {
			gl = g.listen(m, gl)
		}
		go m.gs.Serve(gl)
	})
	if err != nil {
		t.Fatal(err)
	}
	m.svc = svc
}

// memberLabel names m in profiles: its place in the group.
func memberLabel(g *testGroup, m *member) string {
	for i, o := range g.members {
		if o == m {
			return "m" + strconv.Itoa(i)
		}
	}
	return "new"
}

// stop ends a member the way a crash does for its peers: its sockets
// close and it answers nothing more.
func (g *testGroup) stop(m *member) {
	if m.svc == nil {
		return
	}
	m.gs.Stop()
	m.svc.Close()
	m.svc = nil
}

// restart brings a stopped member back on its old addresses and store.
func (g *testGroup) restart(m *member) {
	g.start(m, listenLoopback(g.t, m.addr), listenLoopback(g.t, m.raftAddr), nil)
}

func (g *testGroup) leader() *member {
	for _, m := range g.members {
		if m.svc != nil && m.svc.group.ready.Load() {
			return m
		}
	}
	return nil
}

func (g *testGroup) awaitLeader() *member {
	g.t.Helper()
	await.Until(g.t, 20*time.Second, "a leader", func() bool { return g.leader() != nil })
	return g.leader()
}

// client dials every member, as a meta peer.
// follower is a member other than l: the last one, so not the member
// whose certificate client() dials with, when l is not the last.
func (g *testGroup) follower(l *member) *member {
	for i := len(g.members) - 1; i >= 0; i-- {
		if m := g.members[i]; m != l {
			return m
		}
	}
	return nil
}

func (g *testGroup) client() metapb.MetaClient {
	g.t.Helper()
	var addrs []string
	for _, m := range g.members {
		addrs = append(addrs, m.addr)
	}
	cl, conn, err := Dial(strings.Join(addrs, ","), DialTLS(g.members[0].node.Client()))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	return cl
}

func TestGroupFollowerRefusesNamingLeader(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	f := g.follower(l)
	cl, conn, err := Dial(f.addr, DialTLS(f.node.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = cl.ListNamespaces(bg, &metapb.Empty{})
	leader, ok := LeaderOf(err)
	if !ok || leader != l.addr {
		t.Fatalf("follower answered %v; want a not-leader refusal naming %s", err, l.addr)
	}
	wantKind(t, err, errors.Unavailable)
	// A client of the whole group is sent on to the leader.
	mkns(t, g.client(), "grp")
}

// TestGroupLeaderLossNoAckLost writes through a client of the group,
// stops the leader mid-stream, and checks that writes resume on a new
// leader within seconds and that every acknowledged write is there, on
// every member (a restarted one included).
func TestGroupLeaderLossNoAckLost(t *testing.T) {
	g := newTestGroup(t, 3, func(c *GroupConfig) {
		c.SnapshotThreshold, c.TrailingLogs, c.SnapshotInterval = 64, 16, 50*time.Millisecond
	})
	old := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "grp")

	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("d%05d", i)
			if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "grp", Path: p, Parents: true}); err == nil {
				mu.Lock()
				acked = append(acked, p)
				mu.Unlock()
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	await.Until(t, 20*time.Second, "100 writes before the fault", func() bool { return count() >= 100 })
	killed := time.Now()
	before := count()
	g.stop(old)
	await.Until(t, 20*time.Second, "a write on the new leader", func() bool { return count() > before })
	failover := time.Since(killed)
	t.Logf("failover: %v from the leader's stop to the next acknowledged write", failover)
	if failover > 5*time.Second {
		t.Errorf("failover took %v", failover)
	}
	await.Until(t, 20*time.Second, "200 writes after the fault", func() bool { return count() >= before+200 })
	close(stop)
	<-done
	g.restart(old) // more than TrailingLogs behind: it catches up from a snapshot
	l := g.awaitLeader()
	mu.Lock()
	want := append([]string(nil), acked...)
	mu.Unlock()
	for _, m := range g.members {
		await.Until(t, 20*time.Second, "member "+m.addr+" caught up", func() bool {
			for _, p := range []string{want[len(want)-1], want[0]} {
				if _, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: p}); err != nil {
					return false
				}
			}
			return true
		})
		for _, p := range want {
			if _, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: p}); err != nil {
				t.Fatalf("acknowledged %s missing on %s (leader %s): %v", p, m.addr, l.addr, err)
			}
		}
	}
	if n := old.svc.group.restores.Load(); n == 0 {
		t.Errorf("the restarted member caught up without a snapshot; the test wants one")
	}
}

// BenchmarkGroupCommitGRPC is BenchmarkCommitGRPC against a group of three
// (in-process members, Raft over loopback TLS, the client following the
// leader): each commit is in a majority's synced log and applied on the
// leader before it returns.
func BenchmarkGroupCommitGRPC(b *testing.B) {
	benchGroupCommits(b, nil)
}

// benchGroupCommits runs benchCommits against a new group and reports
// the commands per log entry too (fewer entries, fewer fsyncs, appends
// and Raft rounds per command).
func benchGroupCommits(b *testing.B, tweak func(*GroupConfig)) {
	g := newTestGroup(b, 3, tweak)
	l := g.awaitLeader()
	cl := g.client()
	mkns(b, cl, "bench")
	first, _ := l.svc.group.logs.LastIndex()
	benchCommits(b, cl)
	if last, _ := l.svc.group.logs.LastIndex(); last > first {
		b.ReportMetric(float64(b.N)/float64(last-first), "cmds/entry")
	}
}

// BenchmarkGroupCommitGRPCCommitTimeout50ms is BenchmarkGroupCommitGRPC
// with the leader sending its commit index on its own after 50ms idle
// instead of 5ms (GroupConfig.CommitTimeout).
func BenchmarkGroupCommitGRPCCommitTimeout50ms(b *testing.B) {
	benchGroupCommits(b, func(c *GroupConfig) { c.CommitTimeout = 50 * time.Millisecond })
}

// BenchmarkGroupCommitGRPCNoIDs is BenchmarkGroupCommitGRPC with commits
// sent without request ids: the cost of remembering them (dedup.go).
func BenchmarkGroupCommitGRPCNoIDs(b *testing.B) {
	delete(dedupMethods, "Commit")
	defer func() { dedupMethods["Commit"] = true }()
	BenchmarkGroupCommitGRPC(b)
}

// TestGroupMembershipAndBackup adds a fourth member (started with no
// bootstrap: it waits to be added), sees it catch up, removes it, and
// takes a backup over the API that a new meta starts from.
func TestGroupMembershipAndBackup(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "grp")
	for i := range 20 {
		if _, err := cl.Mkdir(bg, &metapb.MkdirRequest{Ns: "grp", Path: fmt.Sprintf("d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	gl, rl := listenLoopback(t, "127.0.0.1:0"), listenLoopback(t, "127.0.0.1:0")
	m := &member{dir: t.TempDir(), addr: gl.Addr().String(), raftAddr: rl.Addr().String()}
	var err error
	if m.node, err = g.ca.Node(pki.RoleMeta, "meta", pki.DefaultSANs()); err != nil {
		t.Fatal(err)
	}
	g.start(m, gl, rl, nil)
	g.members = append(g.members, m)
	if _, err := cl.MetaAddMember(bg, &metapb.MetaMemberRequest{Id: m.addr, RaftAddr: m.raftAddr}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "the new member caught up", func() bool {
		_, err := m.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: "d19"})
		return err == nil
	})
	r, err := cl.MetaMembers(bg, &metapb.Empty{})
	if err != nil || len(r.Members) != 4 {
		t.Fatalf("members: %v %v", r, err)
	}
	if _, err := cl.MetaRemoveMember(bg, &metapb.MetaMemberRequest{Id: m.addr}); err != nil {
		t.Fatal(err)
	}
	if r, err = cl.MetaMembers(bg, &metapb.Empty{}); err != nil || len(r.Members) != 3 {
		t.Fatalf("members after the removal: %v %v", r, err)
	}

	// Backup: stream it, restore it into a new directory, open a meta alone there.
	st, err := cl.MetaSnapshot(bg, &metapb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for {
		c, err := st.Recv()
		if err != nil {
			break
		}
		buf = append(buf, c.Data...)
	}
	dir := t.TempDir()
	if err := RestoreBackup(dir, strings.NewReader(string(buf))); err != nil {
		t.Fatal(err)
	}
	if err := RestoreBackup(dir, strings.NewReader(string(buf))); !errors.Is(errors.Exist, err) {
		t.Fatalf("a second restore over a store: %v, want Exist", err)
	}
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for i := range 20 {
		if _, err := svc.Resolve(bg, &metapb.ResolveRequest{Ns: "grp", Path: fmt.Sprintf("d%d", i)}); err != nil {
			t.Fatalf("restored meta: d%d: %v", i, err)
		}
	}
	if _, err := svc.Mkdir(bg, &metapb.MkdirRequest{Ns: "grp", Path: "after"}); err != nil {
		t.Fatalf("restored meta takes no writes: %v", err)
	}
}

// A revoked member's certificate no longer opens a Raft connection to the
// others: the transport checks the revocation list both ways, and every
// member learns the list by applying the revocation.
func TestGroupRefusesRevokedMember(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	f := g.follower(l)
	leaf, err := x509.ParseCertificate(f.node.Cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	dial := func(to *member) error {
		c, err := tls.Dial("tcp", to.raftAddr, f.node.Client())
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: the server's verdict on the client's certificate
		// arrives with the first read.
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil // accepted: the server waits for Raft's first request
		}
		return err
	}
	if err := dial(l); err != nil {
		t.Fatalf("before the revocation the leader refused the member: %v", err)
	}
	if _, err := g.client().RevokeCert(bg, &metapb.RevokedCert{Serial: pki.SerialHex(leaf)}); err != nil {
		t.Fatal(err)
	}
	for _, m := range g.members {
		if m == f {
			continue
		}
		await.Until(t, 10*time.Second, "member "+m.addr+" to refuse the revoked certificate", func() bool { return dial(m) != nil })
	}
}

// TestRevokedMemberLosesPooledConnections: Raft keeps its connections open
// for as long as they work, so refusing new handshakes alone would let a
// member revoked after joining go on taking appends over the old ones.
// Once revoked, the member must stop hearing from the leader (it stands
// for election, and nobody votes for it).
func TestRevokedMemberLosesPooledConnections(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	f := g.follower(l)
	// The pool is warm: f has been applying the leader's appends.
	if _, err := g.client().CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "warm"}); err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(f.node.Cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.client().RevokeCert(bg, &metapb.RevokedCert{Serial: pki.SerialHex(leaf)}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "the revoked member to lose the leader", func() bool {
		addr, _ := f.svc.group.r.LeaderWithID()
		return f.svc.group.r.State() != raft.Follower || addr == ""
	})
	// The rest of the group goes on without it.
	if _, err := g.client().CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "after"}); err != nil {
		t.Fatal(err)
	}
}
