package pki

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve accepts TLS connections with cfg on a loopback port and sends the
// peer identity each handshake found on ids.
func serve(t *testing.T, cfg *tls.Config) (addr string, ids chan string) {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ids = make(chan string, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					ids <- "handshake: " + err.Error()
					return
				}
				cs := tc.ConnectionState()
				role, id, ok := PeerIdentity(&cs)
				if !ok {
					ids <- "anonymous"
				} else {
					ids <- string(role) + "/" + id
				}
				tc.Write([]byte("ok\n"))
			}()
		}
	}()
	return l.Addr().String(), ids
}

func newNode(t *testing.T, ca *CA, role Role, id string) *Node {
	t.Helper()
	cert, err := ca.Issue(role, id, DefaultSANs(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &Node{Cert: cert, CA: ca}
}

func TestMutualTLS(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	metaNode := newNode(t, ca, RoleMeta, "meta")
	addr, ids := serve(t, metaNode.Server())

	// A data server's certificate names it to the server.
	data := newNode(t, ca, RoleData, "127.0.0.1:9001")
	c, err := tls.Dial("tcp", addr, data.Client())
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("read %q %v", line, err)
	}
	c.Close()
	if got := <-ids; got != "data/127.0.0.1:9001" {
		t.Fatalf("server saw %q", got)
	}

	// A user (no certificate) connects and has no identity.
	c, err = tls.Dial("tcp", addr, ClientConfig(ca.Pool(), nil))
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(c).ReadString('\n')
	c.Close()
	if got := <-ids; got != "anonymous" {
		t.Fatalf("server saw %q for a user", got)
	}

	// A certificate from another CA names no one: the client does not
	// even offer it (it matches none of the CAs the server asks for), and
	// a client that did would fail the handshake.
	other, _ := NewCA("other")
	mallory := newNode(t, other, RoleData, "mallory")
	if c, err := tls.Dial("tcp", addr, ClientConfig(ca.Pool(), &mallory.Cert)); err == nil {
		bufio.NewReader(c).ReadString('\n')
		c.Close()
	}
	if got := <-ids; got != "anonymous" && !strings.HasPrefix(got, "handshake:") {
		t.Fatalf("server saw %q for another CA's certificate", got)
	}
	forced := ClientConfig(ca.Pool(), nil)
	forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &mallory.Cert, nil }
	if c, err := tls.Dial("tcp", addr, forced); err == nil {
		bufio.NewReader(c).ReadString('\n')
		c.Close()
	}
	if got := <-ids; !strings.HasPrefix(got, "handshake:") {
		t.Fatalf("server saw %q for a forced certificate of another CA", got)
	}
	// ... and a server with one is refused by a client of this cluster.
	addr2, _ := serve(t, mallory.Server())
	if c, err := tls.Dial("tcp", addr2, data.Client()); err == nil {
		c.Close()
		t.Fatal("a server with another CA's certificate was trusted")
	}
}

func TestPlaintextToTLSListenerFails(t *testing.T) {
	ca, _ := NewCA("test")
	addr, ids := serve(t, newNode(t, ca, RoleMeta, "m").Server())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if got := <-ids; !strings.HasPrefix(got, "handshake:") {
		t.Fatalf("plaintext request got %q", got)
	}
	c.Close()
}

func TestCAFilesAndNodeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "c")
	if err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{CAFile: 0o644, CAKey: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v %v, want mode %v", name, fi.Mode(), err, mode)
		}
	}
	again, err := LoadOrCreateCA(dir, "c")
	if err != nil || again.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("second start made another CA: %v", err)
	}
	n := newNode(t, ca, RoleGateway, "gw")
	nd := filepath.Join(dir, "node")
	if err := n.Save(nd); err != nil {
		t.Fatal(err)
	}
	m, err := LoadNodeDir(nd)
	if err != nil {
		t.Fatal(err)
	}
	if role, id, ok := IdentityOf(m.Cert.Leaf); !ok || role != RoleGateway || id != "gw" || m.CA.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("loaded %v %v %v", role, id, ok)
	}
	// A node certificate that the given CA did not sign is refused at load.
	other, _ := NewCA("other")
	os.WriteFile(filepath.Join(nd, CAFile), other.PEM, 0o644)
	if _, err := LoadNodeDir(nd); err == nil {
		t.Fatal("a certificate was loaded against a CA that did not sign it")
	}
}

func TestJoinTokenPinning(t *testing.T) {
	ca, _ := NewCA("test")
	tok := NewJoinToken(ca)
	parsed, err := ParseJoinToken(tok.String())
	if err != nil || parsed != tok {
		t.Fatalf("round trip: %+v %v", parsed, err)
	}
	if !CheckSecret(tok.Secret, SecretHash(tok.Secret)) || CheckSecret(tok.Secret+"x", SecretHash(tok.Secret)) {
		t.Fatal("CheckSecret")
	}
	addr, _ := serve(t, newNode(t, ca, RoleMeta, "m").Server())
	c, err := tls.Dial("tcp", addr, tok.PinnedConfig())
	if err != nil {
		t.Fatalf("pinned dial to the real meta: %v", err)
	}
	c.Close()
	// Another cluster's meta (an impostor) does not pass the pin.
	other, _ := NewCA("other")
	addr2, _ := serve(t, newNode(t, other, RoleMeta, "m").Server())
	if c, err := tls.Dial("tcp", addr2, tok.PinnedConfig()); err == nil {
		c.Close()
		t.Fatal("an impostor meta passed the CA pin")
	}
}

func FuzzParseJoinToken(f *testing.F) {
	ca, _ := NewCA("fuzz")
	f.Add(NewJoinToken(ca).String())
	f.Add("cairn-join.abcdefgh.0123456789abcdefghijklmnopqrstuv." + strings.Repeat("0", 64))
	f.Add("cairn-join....")
	f.Add("")
	f.Add("cairn-join.ABCDEFGH.x.y")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseJoinToken(s)
		if err != nil {
			return
		}
		// What parses prints back to itself (after trimming) and parses again.
		if tok.String() != strings.TrimSpace(s) {
			t.Fatalf("%q parsed to %q", s, tok.String())
		}
		if again, err := ParseJoinToken(tok.String()); err != nil || again != tok {
			t.Fatalf("reparse of %q: %v", s, err)
		}
	})
}

func TestCAKeyPairRoundTrip(t *testing.T) {
	ca, err := NewCA("round trip")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCAKeyPair(ca.PEM, key)
	if err != nil {
		t.Fatal(err)
	}
	if back.Fingerprint() != ca.Fingerprint() || back.Key == nil {
		t.Fatalf("round trip lost the CA: %s vs %s", back.Fingerprint(), ca.Fingerprint())
	}
	// The parsed CA signs certificates the original's pool verifies.
	n, err := back.Node(RoleData, "d", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatal(err)
	}
	other, _ := NewCA("other")
	otherKey, _ := other.KeyPEM()
	if _, err := ParseCAKeyPair(ca.PEM, otherKey); err == nil {
		t.Fatal("a certificate with another CA's key parsed")
	}
	if _, err := (&CA{Cert: ca.Cert, PEM: ca.PEM}).KeyPEM(); err == nil {
		t.Fatal("KeyPEM of a CA without key")
	}
}
