package pki

import (
	"crypto/tls"
	"crypto/x509"
)

// Role is what a cluster certificate allows its holder to be.
type Role string

const (
	RoleMeta    Role = "meta"
	RoleData    Role = "data"
	RoleGateway Role = "gateway"
)

// Valid reports whether r is one of the roles a certificate may carry.
func (r Role) Valid() bool {
	switch r {
	case RoleMeta, RoleData, RoleGateway:
		return true
	}
	return false
}

// IdentityOf reads the role and id a cluster certificate names. It does
// not verify the certificate: callers pass one from a verified chain.
func IdentityOf(cert *x509.Certificate) (role Role, id string, ok bool) {
	if cert == nil || len(cert.Subject.OrganizationalUnit) == 0 {
		return "", "", false
	}
	role = Role(cert.Subject.OrganizationalUnit[0])
	if !role.Valid() || cert.Subject.CommonName == "" {
		return "", "", false
	}
	return role, cert.Subject.CommonName, true
}

// PeerIdentity returns the identity of a TLS peer whose certificate was
// verified against the cluster CA during the handshake. A connection
// without a client certificate, or one that was not verified (plain
// TCP, VerifyClientCertIfGiven with none given), has no identity.
func PeerIdentity(cs *tls.ConnectionState) (role Role, id string, ok bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", "", false
	}
	return IdentityOf(cs.VerifiedChains[0][0])
}
