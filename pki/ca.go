package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"cairn/errors"
)

// Files of a data directory.
const (
	CAFile   = "ca.pem"   // the cluster CA's certificate (0644): what every role and user trusts
	CAKey    = "ca.key"   // its private key (0600), kept by meta only
	CertFile = "node.pem" // this server's certificate, then the CA's
	KeyFile  = "node.key" // its private key (0600)
)

const (
	caLifetime = 20 * 365 * 24 * time.Hour
	// CertLifetime is how long a role's certificate is valid. A server
	// re-joins (new token) or is re-issued one on a restart of meta
	// (meta's own) before it runs out.
	CertLifetime = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so that a peer whose clock is a little
	// behind accepts a certificate issued just now.
	clockSkew = 5 * time.Minute
)

// CA is the cluster's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer // nil for a CA known only by its certificate
	PEM  []byte        // Cert, PEM-encoded
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Fingerprint is the hex SHA-256 of the CA certificate's DER: what a join
// token carries so that the joiner can tell the real meta from another.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is the hex SHA-256 of a certificate's DER.
func Fingerprint(c *x509.Certificate) string {
	h := sha256.Sum256(c.Raw)
	return hex.EncodeToString(h[:])
}

// NewCA makes a self-signed ECDSA P-256 CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Cairn"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadOrCreateCA reads the CA kept in dir, creating it on the first start
// (the key first, written and synced with mode 0600, as root.credentials).
func LoadOrCreateCA(dir, name string) (*CA, error) {
	const op = errors.Op("pki.LoadOrCreateCA")
	ca, err := LoadCA(dir)
	if err == nil || !errors.Is(errors.NotExist, err) {
		return ca, err
	}
	ca, err = NewCA(name)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	if err := WriteFileSync(filepath.Join(dir, CAKey), pemBlock("PRIVATE KEY", kder), 0o600); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	if err := WriteFileSync(filepath.Join(dir, CAFile), ca.PEM, 0o644); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return ca, nil
}

// LoadCA reads the CA certificate and key kept in dir; errors.NotExist
// when there is none.
func LoadCA(dir string) (*CA, error) {
	const op = errors.Op("pki.LoadCA")
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKey))
	if err != nil {
		kind := errors.Invalid
		if os.IsNotExist(err) {
			kind = errors.NotExist
		}
		return nil, errors.E(op, kind, errors.Path(dir), err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.E(op, errors.Invalid, errors.Path(dir), "CA key cannot sign")
	}
	pemBytes, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return &CA{Cert: pair.Leaf, Key: signer, PEM: pemBytes}, nil
}

// ParseCA reads a CA certificate (PEM; the first certificate counts).
func ParseCA(pemBytes []byte) (*CA, error) {
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.E(errors.Op("pki.ParseCA"), errors.Invalid, "no certificate in PEM")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, errors.E(errors.Op("pki.ParseCA"), errors.Invalid, err)
		}
		return &CA{Cert: c, PEM: pemBlock("CERTIFICATE", b.Bytes)}, nil
	}
}

// Sign issues a certificate for pub naming role and id, valid for
// lifetime, for server and client use, with sans (host names and IP
// addresses) as subject alternative names. It returns the certificate's
// DER.
func (ca *CA) Sign(pub crypto.PublicKey, role Role, id string, sans []string, lifetime time.Duration) ([]byte, error) {
	const op = errors.Op("pki.Sign")
	if ca.Key == nil {
		return nil, errors.E(op, errors.Invalid, "CA without its key")
	}
	if role != "" && !role.Valid() {
		return nil, errors.E(op, errors.Invalid, errors.Path(string(role)), "not a role")
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id, Organization: []string{"Cairn"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if role != "" {
		tmpl.Subject.OrganizationalUnit = []string{string(role)}
	}
	for _, s := range sans {
		if h, _, err := net.SplitHostPort(s); err == nil {
			s = h
		}
		if s == "" {
			continue
		}
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	return der, nil
}

// Issue makes a key pair and a certificate for it (see Sign). The
// tls.Certificate's chain ends with the CA, so that a joiner that pinned
// the CA's fingerprint finds it in the handshake.
func (ca *CA) Issue(role Role, id string, sans []string, lifetime time.Duration) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	der, err := ca.Sign(key.Public(), role, id, sans, lifetime)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// DefaultSANs are the names a server on this host answers to besides its
// listen and advertised addresses: localhost, the loopback addresses and
// the host name.
func DefaultSANs(addrs ...string) []string {
	sans := append([]string{"localhost", "127.0.0.1", "::1"}, addrs...)
	if h, err := os.Hostname(); err == nil {
		sans = append(sans, h)
	}
	return sans
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// WriteFileSync writes a file with mode perm and syncs it before closing,
// so that a crash right after leaves the whole file or none.
func WriteFileSync(name string, data []byte, perm os.FileMode) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil { // an older file may have had other bits
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// Node issues a fresh identity for a role this process plays itself (meta
// at each start, every role of `cairn server`): nothing to keep, since the
// CA is at hand at the next start too.
func (ca *CA) Node(role Role, id string, sans []string) (*Node, error) {
	cert, err := ca.Issue(role, id, sans, CertLifetime)
	if err != nil {
		return nil, err
	}
	return &Node{Cert: cert, CA: &CA{Cert: ca.Cert, PEM: ca.PEM}}, nil
}

// KeyPEM is the CA's private key, PKCS#8 PEM: what a meta group keeps in
// its replicated state so that every member can sign (meta/secrets.go).
func (ca *CA) KeyPEM() ([]byte, error) {
	if ca.Key == nil {
		return nil, errors.E(errors.Op("pki.CA.KeyPEM"), errors.Invalid, "the CA is known by its certificate only")
	}
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, errors.E(errors.Op("pki.CA.KeyPEM"), errors.Invalid, err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

// ParseCAKeyPair reads a CA from its certificate and key (PEM), as
// LoadCA does from files.
func ParseCAKeyPair(certPEM, keyPEM []byte) (*CA, error) {
	const op = errors.Op("pki.ParseCAKeyPair")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.E(op, errors.Invalid, "CA key cannot sign")
	}
	if !pair.Leaf.IsCA {
		return nil, errors.E(op, errors.Invalid, "not a CA certificate")
	}
	return &CA{Cert: pair.Leaf, Key: signer, PEM: append([]byte(nil), certPEM...)}, nil
}
