package meta

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"cairn/capability"
	"cairn/errors"
	"cairn/meta/metatest"
	"cairn/pki"
	"cairn/pki/pkitest"
	"cairn/proto/metapb"
)

// TestEveryMethodHasRule walks the service: a method added without a rule
// (explicit, or derived from a request that names a namespace) fails here,
// and is refused at run time.
func TestEveryMethodHasRule(t *testing.T) {
	for _, m := range metapb.Meta_ServiceDesc.Methods {
		if _, ok := rules[m.MethodName]; !ok {
			t.Errorf("method %s has no authorisation rule", m.MethodName)
		}
	}
	for _, m := range metapb.Meta_ServiceDesc.Streams {
		if _, ok := rules[m.StreamName]; !ok {
			t.Errorf("stream %s has no authorisation rule", m.StreamName)
		}
	}
	if err := (&Service{}).authorize(Caller{Key: "K", Root: true}, "NoSuchMethod", nil); !errors.Is(errors.Permission, err) {
		t.Errorf("an unknown method: %v, want refused", err)
	}
}

// secureMeta is meta served over TLS with a throwaway CA and no trust in
// plaintext: the configuration the authorisation rules are for.
type secureMeta struct {
	svc  *Service
	addr string
	ca   *pkitest.CA
	root Credentials
}

func startSecure(t *testing.T) *secureMeta {
	t.Helper()
	cfg := testConfig(t.TempDir(), newCluster())
	cfg.TrustPlaintext = false
	cfg.RootUser, cfg.RootPassword = "ROOTKEY", "rootsecret-0123456789"
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ca := pkitest.NewCA(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Revoked certificates fail the handshake, as in `cairn meta`.
	gs := NewGRPCServer(svc, grpc.Creds(credentials.NewTLS(svc.cfg.Revoked.Guard(ca.ServerConfig(t)))))
	go gs.Serve(lis)
	t.Cleanup(func() { gs.Stop(); svc.Close() })
	return &secureMeta{svc: svc, addr: lis.Addr().String(), ca: ca, root: Credentials{cfg.RootUser, cfg.RootPassword}}
}

// dial connects over TLS as a role (cert) and/or a user (creds).
func (m *secureMeta) dial(t *testing.T, cert *tls.Certificate, creds *Credentials) metapb.MetaClient {
	t.Helper()
	var tc *tls.Config
	if cert != nil {
		tc = m.ca.ClientConfig(*cert)
	} else {
		tc = m.ca.ClientConfig()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}
	if creds != nil {
		opts = append(opts, WithUser(creds.AccessKey, creds.Secret))
	}
	cl, conn, err := Dial(m.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return invoker{cl, conn}
}

// invoker is a client that can also call a method by name.
type invoker struct {
	metapb.MetaClient
	cc *grpc.ClientConn
}

func (i invoker) Invoke(ctx context.Context, method string, req, resp any, opts ...grpc.CallOption) error {
	return i.cc.Invoke(ctx, method, req, resp, opts...)
}

func (m *secureMeta) role(t *testing.T, r pki.Role, id string) metapb.MetaClient {
	c := m.ca.Cert(t, r, id)
	return m.dial(t, &c, nil)
}

// world is what the tests attack: root's private namespace "victim" with a
// file, user alice with her own namespace and a read grant on "shared".
type world struct {
	*secureMeta
	rootCl, aliceCl metapb.MetaClient
	alice           Credentials
}

func newWorld(t *testing.T) *world {
	m := startSecure(t)
	w := &world{secureMeta: m}
	w.rootCl = m.dial(t, nil, &m.root)
	ctx := context.Background()
	if _, err := w.rootCl.S3CreateUser(ctx, &metapb.S3User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	k, err := w.rootCl.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: "alice", Grants: map[string]metapb.S3Access{"shared": metapb.S3Access_S3_READ}})
	if err != nil {
		t.Fatal(err)
	}
	w.alice = Credentials{k.Key.AccessKey, k.Secret}
	w.aliceCl = m.dial(t, nil, &w.alice)
	for _, ns := range []struct{ name, owner string }{{"victim", m.root.AccessKey}, {"shared", m.root.AccessKey}, {"alicens", w.alice.AccessKey}} {
		if _, err := w.rootCl.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: ns.name, Owner: ns.owner}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.rootCl.Mkdir(ctx, &metapb.MkdirRequest{Ns: ns.name, Path: "d"}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) snapshot(t *testing.T) string {
	return metatest.Snapshot(t, w.svc, "victim", "shared")
}

// callEvery calls every unary method as cl and hands each error to check.
func callEvery(t *testing.T, cl metapb.MetaClient, ns string, check func(method string, err error)) {
	t.Helper()
	metatest.CallEvery(cl.(invoker).cc, ns, check)
}

func TestAnonymousAndWrongIdentityRefused(t *testing.T) {
	w := newWorld(t)
	before := w.snapshot(t)
	anon := w.dial(t, nil, nil)
	bad := w.dial(t, nil, &Credentials{w.alice.AccessKey, "not-the-secret"})
	// A certificate from another CA names nobody.
	other := pkitest.NewCA(t).Cert(t, pki.RoleGateway, "rogue")
	rogue := w.dial(t, &other, nil)
	// Anyone may learn where volumes are (reading a public namespace
	// needs it) and list the public namespaces.
	anyone := map[string]bool{"Info": true, "Volumes": true, "SecretsRevocations": true, "ListNamespaces": true}
	if l, err := anon.ListNamespaces(context.Background(), &metapb.Empty{}); err != nil || len(l.Namespaces) != 0 {
		t.Errorf("anonymous ListNamespaces: %v %v, want none (none is public)", l, err)
	}
	for name, cl := range map[string]metapb.MetaClient{"anonymous": anon, "wrong secret": bad} {
		callEvery(t, cl, "victim", func(method string, err error) {
			if name == "anonymous" && anyone[method] {
				return
			}
			if !errors.Is(errors.Unauthenticated, err) && !errors.Is(errors.Permission, err) {
				t.Errorf("%s %s: %v, want Unauthenticated or PermissionDenied", name, method, err)
			}
		})
	}
	// The rogue certificate fails the handshake (meta verifies given
	// certificates), so every call fails.
	callEvery(t, rogue, "victim", func(method string, err error) {
		if err == nil {
			t.Errorf("rogue certificate %s: allowed", method)
		}
	})
	// A user: nothing of root's, nothing administrative.
	userOK := map[string]bool{"Authenticate": false, "Info": true, "Volumes": true, "SecretsRevocations": true, "ListNamespaces": true, "Sync": true, "MountReserve": true, "RenewCaps": true}
	callEvery(t, w.aliceCl, "victim", func(method string, err error) {
		if _, ok := userOK[method]; ok {
			return
		}
		if method == "Join" { // the token is the credential: an empty one is refused
			if !errors.Is(errors.Unauthenticated, err) {
				t.Errorf("alice Join without a token: %v, want Unauthenticated", err)
			}
			return
		}
		if !errors.Is(errors.Permission, err) {
			t.Errorf("alice %s on victim: %v, want PermissionDenied", method, err)
		}
	})
	// A data server: its own calls only.
	dataOK := map[string]bool{"Heartbeat": true, "Info": true, "Volumes": true, "SecretsRevocations": true, "Authenticate": true}
	callEvery(t, w.role(t, pki.RoleData, "d1"), "victim", func(method string, err error) {
		if method == "Join" {
			if !errors.Is(errors.Unauthenticated, err) {
				t.Errorf("data Join without a token: %v, want Unauthenticated", err)
			}
			return
		}
		if !dataOK[method] && !errors.Is(errors.Permission, err) {
			t.Errorf("data %s: %v, want PermissionDenied", method, err)
		}
	})
	// A gateway: never a heartbeat, never administration.
	gw := w.role(t, pki.RoleGateway, "g1")
	for _, method := range []string{"Heartbeat", "CreateUser", "S3CreateUser", "S3CreateKey", "S3Grant", "S3ListKeys", "ClusterDrain", "ClusterStatus"} {
		if err := metatest.Call(gw.(invoker).cc, method, "victim"); !errors.Is(errors.Permission, err) {
			t.Errorf("gateway %s: %v, want PermissionDenied", method, err)
		}
	}
	if after := w.snapshot(t); after != before {
		t.Errorf("the attacks changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

func TestUserRights(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	a := w.aliceCl
	// Her own namespace: everything.
	if _, err := a.Mkdir(ctx, &metapb.MkdirRequest{Ns: "alicens", Path: "mine"}); err != nil {
		t.Fatal(err)
	}
	// A read grant: reads yes, writes no.
	if _, err := a.List(ctx, &metapb.ListRequest{Ns: "shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Mkdir(ctx, &metapb.MkdirRequest{Ns: "shared", Path: "no"}); !errors.Is(errors.Permission, err) {
		t.Fatalf("write with a read grant: %v", err)
	}
	// Listing shows what she may read.
	l, err := a.ListNamespaces(ctx, &metapb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range l.Namespaces {
		names = append(names, n.Name)
	}
	if len(names) != 2 || names[0] != "alicens" || names[1] != "shared" {
		t.Fatalf("alice lists %v", names)
	}
	// A namespace is created with its creator as owner.
	if _, err := a.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: "stolen", Owner: w.root.AccessKey}); !errors.Is(errors.Permission, err) {
		t.Fatalf("create for another owner: %v", err)
	}
	if _, err := a.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: "new", Owner: w.alice.AccessKey}); err != nil {
		t.Fatal(err)
	}
	// The secret of a key goes to gateways only.
	if _, err := a.S3GetSecret(ctx, &metapb.S3KeyRequest{AccessKey: w.root.AccessKey}); !errors.Is(errors.Permission, err) {
		t.Fatalf("user S3GetSecret: %v", err)
	}
	gw := w.role(t, pki.RoleGateway, "g1")
	if s, err := gw.S3GetSecret(ctx, &metapb.S3KeyRequest{AccessKey: w.alice.AccessKey}); err != nil || s.Secret != w.alice.Secret {
		t.Fatalf("gateway S3GetSecret: %v", err)
	}
	// A gateway acting for alice has alice's rights, not its own.
	if _, err := gw.Resolve(OnBehalfOf(ctx, w.alice.AccessKey), &metapb.ResolveRequest{Ns: "victim", Path: "d"}); !errors.Is(errors.Permission, err) {
		t.Fatalf("gateway for alice on victim: %v", err)
	}
	if _, err := gw.Resolve(OnBehalfOf(ctx, w.alice.AccessKey), &metapb.ResolveRequest{Ns: "shared", Path: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Resolve(OnBehalfOf(ctx, ""), &metapb.ResolveRequest{Ns: "victim", Path: "d"}); !errors.Is(errors.Unauthenticated, err) {
		t.Fatalf("gateway for an anonymous request on victim: %v", err)
	}
	// Only a gateway may speak for a user.
	if _, err := w.role(t, pki.RoleData, "d1").Resolve(OnBehalfOf(ctx, w.root.AccessKey), &metapb.ResolveRequest{Ns: "victim"}); !errors.Is(errors.Permission, err) {
		t.Fatalf("data server for root: %v", err)
	}
	if _, err := a.Resolve(OnBehalfOf(ctx, w.root.AccessKey), &metapb.ResolveRequest{Ns: "victim"}); !errors.Is(errors.Permission, err) {
		t.Fatalf("alice for root: %v", err)
	}
	// A fake data server without a data identity.
	hb := &metapb.HeartbeatRequest{ServerId: "fake", Addr: "127.0.0.1:1", Capacity: 1 << 40, Free: 1 << 40}
	for name, cl := range map[string]metapb.MetaClient{"root": w.rootCl, "alice": a, "gateway": gw} {
		if _, err := cl.Heartbeat(ctx, hb); !errors.Is(errors.Permission, err) {
			t.Errorf("heartbeat from %s: %v", name, err)
		}
	}
	if _, err := w.role(t, pki.RoleData, "d1").Heartbeat(ctx, hb); err != nil {
		t.Fatalf("heartbeat from a data server: %v", err)
	}
}

// TestRenewFollowsRights: a user gets capabilities renewed only for the
// namespaces they may still use, for the operations they may do.
func TestRenewFollowsRights(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	mint := func(ops capability.Op, ns string) string {
		tok, err := w.svc.caps.Mint(ops, 1, 1, 1, ns, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	req := &metapb.RenewCapsRequest{Caps: []string{
		mint(capability.Read, "victim"), mint(capability.Read, "shared"),
		mint(capability.Write, "shared"), mint(capability.Write, "alicens"),
	}}
	r, err := w.aliceCl.RenewCaps(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{r.Caps[0] != "", r.Caps[1] != "", r.Caps[2] != "", r.Caps[3] != ""}
	if want := []bool{false, true, false, true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("renewed (victim read, shared read, shared write, own write) = %v, want %v", got, want)
	}
}

// TestCredentialsNeverPlaintext: gRPC refuses to send a user's secret over
// a connection without TLS.
func TestCredentialsNeverPlaintext(t *testing.T) {
	ts := start(t, nil)
	cl, conn, err := Dial(ts.addr, WithUser("K", "S"))
	if err == nil {
		defer conn.Close()
		_, err = cl.Info(context.Background(), &metapb.Empty{})
	}
	if err == nil {
		t.Fatal("credentials went over plaintext")
	}
}

// TestWatchFiltered: a user's change stream carries the events of the
// namespaces they may read; others come as bare sequence numbers.
func TestWatchFiltered(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := w.aliceCl.Watch(ctx, &metapb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the stream is live
		t.Fatal(err)
	}
	for _, ns := range []string{"victim", "alicens"} {
		if _, err := w.rootCl.Mkdir(ctx, &metapb.MkdirRequest{Ns: ns, Path: "secret-name"}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []*metapb.Event
	for len(seen) < 2 {
		e, err := st.Recv()
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		seen = append(seen, e)
	}
	if seen[0].Ns != "" || seen[0].Path != "" || seen[0].Seq == 0 {
		t.Errorf("victim's event reached alice: %v", seen[0])
	}
	if seen[1].Ns != "alicens" || seen[1].Path != "secret-name" {
		t.Errorf("alice's own event: %v", seen[1])
	}
	// Anonymous: no stream at all.
	st, err = w.dial(t, nil, nil).Watch(ctx, &metapb.WatchRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if !errors.Is(errors.Unauthenticated, err) {
		t.Fatalf("anonymous watch: %v", err)
	}
}

// BenchmarkAuthorize is what establishing and authorising the caller adds
// to a call (the caller's verification cached, as for every warm call),
// next to the Resolve it guards.
func BenchmarkAuthorize(b *testing.B) {
	svc, err := Open(testConfig(b.TempDir(), nil))
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	ctx := context.Background()
	if _, err := svc.S3CreateUser(ctx, &metapb.S3User{Name: "u"}); err != nil {
		b.Fatal(err)
	}
	k, err := svc.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: "u"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := svc.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: "bns", Owner: k.Key.AccessKey}); err != nil {
		b.Fatal(err)
	}
	if _, err := svc.Mkdir(ctx, &metapb.MkdirRequest{Ns: "bns", Path: "a/b/c", Parents: true}); err != nil {
		b.Fatal(err)
	}
	req := &metapb.ResolveRequest{Ns: "bns", Path: "a/b/c"}
	user := metadata.NewIncomingContext(ctx, metadata.Pairs(mdAccessKey, k.Key.AccessKey, mdSecret, k.Secret))
	gateway := WithCaller(ctx, Caller{Role: pki.RoleGateway, ID: "g"})
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{{"gateway", gateway}, {"user", user}, {"gateway-for-user", OnBehalfOf(gateway, k.Key.AccessKey)}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				c, err := svc.caller(bc.ctx)
				if err == nil {
					err = svc.authorize(c, "Resolve", req)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("resolve", func(b *testing.B) {
		for b.Loop() {
			if _, err := svc.Resolve(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// forUser is a connection whose every call is made on behalf of a user,
// as the S3 gateway makes its calls for the request's signer.
type forUser struct {
	grpc.ClientConnInterface
	key string
}

func (f forUser) Invoke(ctx context.Context, method string, req, resp any, opts ...grpc.CallOption) error {
	return f.ClientConnInterface.Invoke(OnBehalfOf(ctx, f.key), method, req, resp, opts...)
}

// TestGatewayForReadOnlyUser: the S3 gateway names the signer of every
// request (OnBehalfOf), so meta holds a key with a read grant to reading
// even if the gateway's own check let a write through: every method that
// writes the namespace (the S3 ones included: bucket configuration,
// copies, tags, multipart uploads, commits) is refused and nothing
// changes, while the reads the grant allows work.
func TestGatewayForReadOnlyUser(t *testing.T) {
	w := newWorld(t)
	before := w.snapshot(t)
	gw := w.role(t, pki.RoleGateway, "s3gw").(invoker)
	asAlice := forUser{gw.cc, w.alice.AccessKey}
	reads := map[string]bool{}
	for m := range readMethods {
		reads[m] = true
	}
	// Calls any user may make (their answers are filtered to what the
	// user may see), and the ones whose credential is in the request.
	for _, m := range []string{"Info", "Volumes", "SecretsRevocations", "ListNamespaces", "Sync", "MountReserve", "RenewCaps", "Authenticate", "Join", "CreateJoinToken", "CreateNamespace"} {
		reads[m] = true
	}
	s3Writes := map[string]bool{"S3PutBucketConfig": true, "S3Copy": true, "S3SetTags": true, "S3CreateUpload": true,
		"S3PutPart": true, "S3CompleteUpload": true, "S3AbortUpload": true, "Commit": true, "CommitBatch": true,
		"Delete": true, "Mkdir": true, "Assign": true, "Append": true, "Rename": true, "SetAttr": true}
	seen := 0
	metatest.CallEvery(asAlice, "shared", func(method string, err error) {
		if reads[method] {
			return
		}
		if s3Writes[method] {
			seen++
		}
		if !errors.Is(errors.Permission, err) {
			t.Errorf("gateway for alice (read grant) %s on shared: %v, want PermissionDenied", method, err)
		}
	})
	if seen != len(s3Writes) {
		t.Errorf("%d of the %d writes were called", seen, len(s3Writes))
	}
	// The same gateway acting as itself may write (it is trusted to check
	// its users): the refusals above come from alice's rights alone.
	if _, err := gw.Mkdir(context.Background(), &metapb.MkdirRequest{Ns: "shared", Path: "by-gateway"}); err != nil {
		t.Fatalf("gateway as itself: %v", err)
	}
	if _, err := gw.Mkdir(context.Background(), &metapb.MkdirRequest{Ns: "shared", Path: "by-gateway"}); !errors.Is(errors.Exist, err) {
		t.Fatalf("gateway as itself, again: %v", err)
	}
	if _, err := gw.Delete(context.Background(), &metapb.DeleteRequest{Ns: "shared", Path: "by-gateway"}); err != nil {
		t.Fatal(err)
	}
	// Reads the grant allows go through.
	if _, err := gw.List(OnBehalfOf(context.Background(), w.alice.AccessKey), &metapb.ListRequest{Ns: "shared"}); err != nil {
		t.Fatalf("gateway for alice, List on shared: %v", err)
	}
	if after := w.snapshot(t); after != before {
		t.Errorf("refused calls changed the store:\nbefore %s\nafter  %s", before, after)
	}
}
