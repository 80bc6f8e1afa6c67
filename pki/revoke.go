package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"

	"cairn/errors"
)

// Revocation. A certificate is revoked by its holder's id (every
// certificate naming that id issued at or before the revocation: a server
// whose key was stolen re-joins and gets a new one) or by serial. Meta
// keeps the list; data servers get it in every heartbeat answer. Both
// check it on every handshake (tls.Config.VerifyConnection, which also
// runs for resumed sessions) and again on every call that trusts a peer's
// identity, so a connection opened before the revocation is cut off too.

// Revoked is one entry of the list.
type Revoked struct {
	ID     string    // a certificate's CommonName; "" with Serial
	Serial string    // lower-case hex of one certificate's serial; "" with ID
	At     time.Time // certificates of ID issued at or before At are revoked
}

// Revocations is a revocation list that can be replaced while handshakes
// read it. The zero value (and nil) revokes nothing.
type Revocations struct {
	p atomic.Pointer[revset]
}

type revset struct {
	list    []Revoked
	ids     map[string]time.Time
	serials map[string]bool
}

// Set replaces the list.
func (r *Revocations) Set(list []Revoked) {
	rs := &revset{list: append([]Revoked(nil), list...), ids: map[string]time.Time{}, serials: map[string]bool{}}
	for _, e := range list {
		if e.Serial != "" {
			rs.serials[e.Serial] = true
		}
		if e.ID != "" && e.At.After(rs.ids[e.ID]) {
			rs.ids[e.ID] = e.At
		}
	}
	r.p.Store(rs)
}

// List returns the entries (not to be changed).
func (r *Revocations) List() []Revoked {
	if r == nil {
		return nil
	}
	if rs := r.p.Load(); rs != nil {
		return rs.list
	}
	return nil
}

// IssuedAt is when ca.Sign made cert (it backdates NotBefore by
// clockSkew).
func IssuedAt(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(clockSkew) }

// SerialHex is the form of a certificate's serial in the list.
func SerialHex(cert *x509.Certificate) string { return fmt.Sprintf("%x", cert.SerialNumber) }

// Check is errors.Unauthenticated if cert is revoked.
func (r *Revocations) Check(cert *x509.Certificate) error {
	if r == nil || cert == nil {
		return nil
	}
	rs := r.p.Load()
	if rs == nil {
		return nil
	}
	if at, ok := rs.ids[cert.Subject.CommonName]; ok && !IssuedAt(cert).After(at) {
		return errors.E(errors.Unauthenticated, errors.Path(cert.Subject.CommonName), "certificate revoked")
	}
	if len(rs.serials) > 0 && rs.serials[SerialHex(cert)] {
		return errors.E(errors.Unauthenticated, errors.Path(cert.Subject.CommonName), "certificate revoked (serial "+SerialHex(cert)+")")
	}
	return nil
}

// CheckPeer is Check of a connection's verified peer certificate (none:
// nothing to check).
func (r *Revocations) CheckPeer(cs *tls.ConnectionState) error {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return r.Check(cs.VerifiedChains[0][0])
}

// Guard returns a copy of c that refuses revoked peers in the handshake.
func (r *Revocations) Guard(c *tls.Config) *tls.Config {
	c = c.Clone()
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := r.CheckPeer(&cs); err != nil {
			return err
		}
		if prev != nil {
			return prev(cs)
		}
		return nil
	}
	return c
}
