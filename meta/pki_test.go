package meta

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

const testRoot, testRootSecret = "ROOTKEY", "root-secret-0123456789"

// tlsMeta starts a meta with a cluster CA behind a real TLS gRPC listener.
// seen receives the identity pki.PeerIdentity found for each call.
func tlsMeta(t *testing.T) (svc *Service, addr string, ca *pki.CA, seen chan string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(dir, nil)
	cfg.CA, cfg.RootUser, cfg.RootPassword = ca, testRoot, testRootSecret
	svc, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(pki.RoleMeta, "meta", pki.DefaultSANs(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	node := &pki.Node{Cert: cert, CA: ca}
	seen = make(chan string, 16)
	observe := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		id := "anonymous"
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				if role, name, ok := pki.PeerIdentity(&ti.State); ok {
					id = string(role) + "/" + name
				}
			}
		}
		select {
		case seen <- id:
		default:
		}
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(svc, ServerTLS(node.Server()), grpc.ChainUnaryInterceptor(observe))
	go gs.Serve(lis)
	t.Cleanup(func() { gs.Stop(); svc.Close() })
	return svc, lis.Addr().String(), ca, seen
}

func rootClient(t *testing.T, addr string, ca *pki.CA) metapb.MetaClient {
	t.Helper()
	mc, conn, err := Dial(addr, DialTLS(pki.ClientConfig(ca.Pool(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return mc
}

func joinToken(t *testing.T, mc metapb.MetaClient, role string, ttl time.Duration, uses uint32) string {
	t.Helper()
	resp, err := mc.CreateJoinToken(bg, &metapb.CreateJoinTokenRequest{Role: role, TtlNs: int64(ttl), Uses: uses,
		AccessKey: testRoot, Secret: testRootSecret})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Token
}

func TestJoinOverTLS(t *testing.T) {
	_, addr, ca, seen := tlsMeta(t)
	mc := rootClient(t, addr, ca)

	tok := joinToken(t, mc, "data", time.Hour, 1)
	<-seen
	dir := filepath.Join(t.TempDir(), "d1")
	n, err := JoinCluster(bg, addr, tok, dir, "127.0.0.1:9001", []string{"127.0.0.1:9001"})
	if err != nil {
		t.Fatal(err)
	}
	<-seen
	if role, id, ok := pki.IdentityOf(n.Cert.Leaf); !ok || role != pki.RoleData || id != "127.0.0.1:9001" {
		t.Fatalf("joined as %q %q %v", role, id, ok)
	}
	// Its calls carry its identity.
	dc, conn, err := Dial(addr, DialTLS(n.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := dc.Info(bg, &metapb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "data/127.0.0.1:9001" {
		t.Fatalf("meta saw %q", got)
	}
	// A restart reuses the kept certificate: no token needed.
	again, err := JoinCluster(bg, addr, "", dir, "127.0.0.1:9001", nil)
	if err != nil || pki.Fingerprint(again.Cert.Leaf) != pki.Fingerprint(n.Cert.Leaf) {
		t.Fatalf("restart: %v", err)
	}
	// The token was single-use.
	_, err = JoinCluster(bg, addr, tok, t.TempDir(), "x", nil)
	wantKind(t, err, errors.Unauthenticated)
}

func TestJoinRefusals(t *testing.T) {
	_, addr, ca, seen := tlsMeta(t)
	go func() { // nobody reads identities here
		for range seen {
		}
	}()
	mc := rootClient(t, addr, ca)
	good, err := pki.ParseJoinToken(joinToken(t, mc, "gateway", time.Hour, 2))
	if err != nil {
		t.Fatal(err)
	}
	expired := joinToken(t, mc, "data", time.Nanosecond, 1)
	forged := good
	forged.Secret = strings.Repeat("a", len(good.Secret))
	unknown := good
	unknown.ID = "zzzzzzzz"
	for name, tok := range map[string]string{"expired": expired, "forged secret": forged.String(), "unknown id": unknown.String()} {
		_, err := JoinCluster(bg, addr, tok, t.TempDir(), "x", nil)
		if !errors.Is(errors.Unauthenticated, err) {
			t.Errorf("%s token: %v, want Unauthenticated", name, err)
		}
	}
	// A token naming another cluster's CA fails before anything is sent:
	// the joiner does not trust this meta.
	other, _ := pki.NewCA("other")
	alien := good
	alien.CAHash = other.Fingerprint()
	if _, err := JoinCluster(bg, addr, alien.String(), t.TempDir(), "x", nil); err == nil {
		t.Error("a token pinning another CA joined")
	}
	// Uses are counted: two joins, then refused.
	for i := range 3 {
		_, err := JoinCluster(bg, addr, good.String(), t.TempDir(), "gw", nil)
		if (i < 2) != (err == nil) {
			t.Errorf("join %d with a 2-use token: %v", i+1, err)
		}
	}
	// Only root makes tokens.
	_, err = mc.CreateJoinToken(bg, &metapb.CreateJoinTokenRequest{Role: "data", AccessKey: testRoot, Secret: "wrong"})
	wantKind(t, err, errors.Permission)
	_, err = mc.CreateJoinToken(bg, &metapb.CreateJoinTokenRequest{Role: "root", AccessKey: testRoot, Secret: testRootSecret})
	wantKind(t, err, errors.Invalid)
	// A meta token (a new member of the meta group, secrets.go) is made by root only too.
	if _, err = mc.CreateJoinToken(bg, &metapb.CreateJoinTokenRequest{Role: "meta", AccessKey: testRoot, Secret: testRootSecret}); err != nil {
		t.Errorf("a meta join token: %v", err)
	}
}

func TestPlaintextToTLSMetaFails(t *testing.T) {
	_, addr, _, _ := tlsMeta(t)
	mc, conn, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	defer cancel()
	if _, err := mc.Info(ctx, &metapb.Empty{}); err == nil {
		t.Fatal("a plaintext call to a TLS meta succeeded")
	}
	// A client that does not trust the cluster CA (system roots) fails too.
	mc2, conn2, _ := Dial(addr, DialTLS(pki.ClientConfig(nil, nil)))
	defer conn2.Close()
	if _, err := mc2.Info(ctx, &metapb.Empty{}); err == nil {
		t.Fatal("a client without the cluster CA trusted meta")
	}
}
