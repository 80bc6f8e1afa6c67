package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"testing"
	"time"

	"cairn/errors"
)

func TestRevocationsCheck(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	cert := func(cn string, issued time.Time, serial int64) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotBefore: issued.Add(-clockSkew), SerialNumber: big.NewInt(serial)}
	}
	var r Revocations
	if err := r.Check(cert("d1", at, 1)); err != nil {
		t.Fatalf("an empty list revoked: %v", err)
	}
	if err := (*Revocations)(nil).Check(cert("d1", at, 1)); err != nil {
		t.Fatalf("a nil list revoked: %v", err)
	}
	r.Set([]Revoked{{ID: "d1", At: at}, {Serial: "ff"}, {ID: "d1", At: at.Add(-time.Hour)}})
	for _, tc := range []struct {
		name    string
		c       *x509.Certificate
		revoked bool
	}{
		{"issued before", cert("d1", at.Add(-time.Minute), 1), true},
		{"issued at the revocation", cert("d1", at, 1), true},
		{"issued after (re-joined)", cert("d1", at.Add(time.Second), 1), false},
		{"another id", cert("d2", at.Add(-time.Minute), 1), false},
		{"revoked serial", cert("d3", at.Add(time.Hour), 255), true},
	} {
		err := r.Check(tc.c)
		if (err != nil) != tc.revoked || err != nil && !errors.Is(errors.Unauthenticated, err) {
			t.Errorf("%s: %v, revoked %v", tc.name, err, tc.revoked)
		}
	}
	if len(r.List()) != 3 {
		t.Fatalf("list of %d", len(r.List()))
	}
}

// TestGuardRefusesHandshake: a listener guarded by the list refuses a
// revoked client certificate in the handshake, resumed sessions included
// (VerifyConnection runs for them; VerifyPeerCertificate would not).
func TestGuardRefusesHandshake(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	srvNode, _ := ca.Node(RoleMeta, "meta", []string{"127.0.0.1"})
	victim, _ := ca.Node(RoleData, "d1", nil)
	other, _ := ca.Node(RoleData, "d2", nil)
	var r Revocations
	addr, _ := serve(t, r.Guard(srvNode.Server()))
	dial := func(cfg *tls.Config) (resumed bool, err error) {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return false, err
		}
		defer c.Close()
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err != nil {
			return false, err // TLS 1.3: the refusal arrives after the client's side is done
		}
		return c.ConnectionState().DidResume, nil
	}
	vc := victim.Client()
	if _, err := dial(vc); err != nil {
		t.Fatalf("before the revocation: %v", err)
	}
	if resumed, err := dial(vc); err != nil || !resumed {
		t.Fatalf("second connection: resumed %v, %v (want a resumed session)", resumed, err)
	}
	r.Set([]Revoked{{ID: "d1", At: time.Now()}})
	if _, err := dial(vc); err == nil {
		t.Fatal("a revoked certificate resumed its session")
	}
	if _, err := dial(victim.Client()); err == nil {
		t.Fatal("a revoked certificate made a new connection")
	}
	if _, err := dial(other.Client()); err != nil {
		t.Fatalf("another certificate: %v", err)
	}
}
