package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	cairnapi "cairn/api"
	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// Meta and the data plane speak TLS only: a plaintext client gets
// nothing from either.
func TestPlaintextToInternalListenersFails(t *testing.T) {
	s := servertest.Start(t, nil)
	resp, err := http.Get("http://" + s.Addr("chunk") + "/admin/volumes")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || bytes.Contains(body, []byte("volumes")) {
			t.Fatalf("plain HTTP to the data plane: %s %q", resp.Status, body)
		}
	}
	mc, conn, err := meta.Dial(s.Addr("meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := mc.Info(ctx, &metapb.Empty{}); err == nil {
		t.Fatal("a plaintext gRPC call to meta succeeded")
	}
	// Over TLS with the cluster CA, the same call works.
	mc, conn2, err := meta.Dial(s.Addr("meta"), meta.DialTLS(s.UserTLS()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if _, err := mc.Info(ctx, &metapb.Empty{}); err != nil {
		t.Fatal(err)
	}
}

// The data plane sees a role's certificate through pki.PeerIdentity, and
// a certificate of another CA names no one.
func TestDataPlanePeerIdentity(t *testing.T) {
	s := servertest.Start(t, nil)
	ca, err := pki.LoadCA(s.DataDir() + "/meta")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := ca.Node(pki.RoleGateway, "gw-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", s.Addr("chunk"), gw.Client())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	other, _ := pki.NewCA("other")
	mallory, _ := other.Node(pki.RoleData, "mallory", nil)
	forged := pki.ClientConfig(ca.Pool(), nil)
	forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &mallory.Cert, nil }
	c, err = tls.Dial("tcp", s.Addr("chunk"), forged)
	if err == nil {
		_, err = c.Read(make([]byte, 1)) // TLS 1.3: the server's refusal arrives after the client's side is done
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate of another CA: %v", err)
	}
}

// Profiling is off unless asked for; /metrics stays open.
func TestPprofOffByDefault(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.Pprof = false })
	for path, want := range map[string]int{"/debug/pprof/": 403, "/debug/pprof/heap": 403, "/debug/profile": 403, "/metrics": 200} {
		resp, err := http.Get("http://" + s.Addr("admin") + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
}

// --tls auto: the API serves HTTPS (HTTP/2 offered, sessions resumed) with
// a certificate the cluster CA issued, and the client library trusts it
// through CAIRN_CA.
func TestTLSAuto(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.TLSAuto = true })
	if !strings.HasPrefix(s.URL(), "https://") || !strings.HasPrefix(s.S3URL(), "https://") {
		t.Fatalf("URLs %s %s", s.URL(), s.S3URL())
	}
	t.Setenv("CAIRN_CA", s.CAFile())
	ctx := context.Background()
	cl := cairnapi.New(s.URL(), servertest.Root, servertest.RootSecret)
	if _, err := cl.CreateNamespace(ctx, "tlsauto", cairnapi.Private); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "tlsauto", "a", strings.NewReader("over tls"), 8, cairnapi.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := cl.Get(ctx, "tlsauto", "a", cairnapi.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "over tls" {
		t.Fatalf("got %q", got)
	}

	// HTTP/2 is negotiated by a client that offers it.
	cfg, err := cairnapi.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	h2 := cfg.Clone()
	h2.NextProtos = []string{"h2", "http/1.1"}
	c, err := tls.Dial("tcp", s.Addr("http"), h2)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("ALPN: %q, want h2", p)
	}
	c.Close()

	// A second connection resumes the first's session.
	tr := &http.Transport{TLSClientConfig: pki.ClientConfig(cfg.RootCAs, nil)}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var resumed bool
	for range 2 {
		resp, err := hc.Get(s.URL() + "/tlsauto/a")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resumed = resp.TLS.DidResume
		tr.CloseIdleConnections()
	}
	if !resumed {
		t.Error("the second connection did not resume the TLS session")
	}

	// Without the CA (system roots only) the certificate is not trusted.
	t.Setenv("CAIRN_CA", "")
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(nil, nil)}}
	if _, err := plain.Get(s.URL() + "/tlsauto/a"); err == nil {
		t.Error("a client without the cluster CA trusted the server")
	}
}
