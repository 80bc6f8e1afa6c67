package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func TestIdentityOf(t *testing.T) {
	cases := []struct {
		ou, cn string
		role   Role
		ok     bool
	}{
		{"data", "3f2a", RoleData, true},
		{"gateway", "gw1", RoleGateway, true},
		{"meta", "m1", RoleMeta, true},
		{"root", "x", "", false}, // not a role a certificate may carry
		{"data", "", "", false},  // no id
		{"", "x", "", false},
	}
	for _, c := range cases {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: c.cn}}
		if c.ou != "" {
			cert.Subject.OrganizationalUnit = []string{c.ou}
		}
		role, id, ok := IdentityOf(cert)
		if ok != c.ok || role != c.role || (ok && id != c.cn) {
			t.Errorf("IdentityOf(OU=%q CN=%q) = %q %q %v", c.ou, c.cn, role, id, ok)
		}
	}
}

func TestPeerIdentityNeedsVerifiedChain(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "d1", OrganizationalUnit: []string{"data"}}}
	// Presented but not verified: no identity.
	if _, _, ok := PeerIdentity(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}); ok {
		t.Fatal("an unverified peer certificate gave an identity")
	}
	if _, _, ok := PeerIdentity(nil); ok {
		t.Fatal("no connection state gave an identity")
	}
	role, id, ok := PeerIdentity(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}})
	if !ok || role != RoleData || id != "d1" {
		t.Fatalf("verified peer: %q %q %v", role, id, ok)
	}
}
