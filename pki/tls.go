package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"

	"cairn/errors"
)

// Node is a server's identity: its certificate and the CA it trusts.
type Node struct {
	Cert tls.Certificate
	CA   *CA
}

// ServerConfig is the TLS configuration of a listener: cert is presented;
// a client certificate is verified against clientCAs when given but not
// required, since users connect without one and authenticate each call
// (pki.PeerIdentity tells the two apart). nextProtos are the ALPN names
// (HTTP/2 first for an HTTP listener; gRPC adds its own). Session tickets
// stay on (Go's default), so a reconnecting client resumes without a full
// handshake.
func ServerConfig(cert tls.Certificate, clientCAs *x509.CertPool, nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    clientCAs,
		NextProtos:   nextProtos,
	}
}

// HTTPProtos are the ALPN names an HTTPS listener offers.
var HTTPProtos = []string{"h2", "http/1.1"}

// ClientConfig is the TLS configuration of a dialer: roots verify the
// server (nil: the system's roots); cert, when not nil, is presented as
// the client's identity. Sessions are cached for resumption.
func ClientConfig(roots *x509.CertPool, cert *tls.Certificate) *tls.Config {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            roots,
		ClientSessionCache: tls.NewLRUClientSessionCache(1024),
	}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

// Server is n's listener configuration (see ServerConfig).
func (n *Node) Server(nextProtos ...string) *tls.Config {
	return ServerConfig(n.Cert, n.CA.Pool(), nextProtos...)
}

// Client is n's dialer configuration: it trusts n's CA and presents n's
// certificate.
func (n *Node) Client() *tls.Config { return ClientConfig(n.CA.Pool(), &n.Cert) }

// Save keeps n in dir: node.pem (the certificate, then the CA's), node.key
// (0600) and ca.pem.
func (n *Node) Save(dir string) error {
	const op = errors.Op("pki.Node.Save")
	var certPEM []byte
	for _, der := range n.Cert.Certificate {
		certPEM = append(certPEM, pemBlock("CERTIFICATE", der)...)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(n.Cert.PrivateKey)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return errors.E(op, errors.IO, err)
	}
	if err := WriteFileSync(filepath.Join(dir, KeyFile), pemBlock("PRIVATE KEY", kder), 0o600); err != nil {
		return errors.E(op, errors.IO, err)
	}
	if err := WriteFileSync(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return errors.E(op, errors.IO, err)
	}
	if err := WriteFileSync(filepath.Join(dir, CAFile), n.CA.PEM, 0o644); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// LoadNode reads a certificate, its key and the CA to trust from files
// (certFile may hold the chain; caFile "" takes the last certificate of
// certFile's chain). A missing file is errors.NotExist.
func LoadNode(certFile, keyFile, caFile string) (*Node, error) {
	const op = errors.Op("pki.LoadNode")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		kind := errors.Invalid
		if os.IsNotExist(err) {
			kind = errors.NotExist
		}
		return nil, errors.E(op, kind, errors.Path(certFile), err)
	}
	var ca *CA
	if caFile != "" {
		if ca, err = ReadCA(caFile); err != nil {
			return nil, errors.E(op, err)
		}
	} else {
		last := pair.Certificate[len(pair.Certificate)-1]
		if ca, err = ParseCA(pemBlock("CERTIFICATE", last)); err != nil {
			return nil, errors.E(op, err)
		}
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, errors.E(op, errors.Invalid, errors.Path(certFile), err)
	}
	return &Node{Cert: pair, CA: ca}, nil
}

// LoadNodeDir reads the identity Save kept in dir.
func LoadNodeDir(dir string) (*Node, error) {
	return LoadNode(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), filepath.Join(dir, CAFile))
}

// ReadCA reads a CA certificate file.
func ReadCA(file string) (*CA, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		kind := errors.IO
		if os.IsNotExist(err) {
			kind = errors.NotExist
		}
		return nil, errors.E(errors.Op("pki.ReadCA"), kind, errors.Path(file), err)
	}
	return ParseCA(b)
}

// Roots returns the pool a client trusts: the certificates of caFile
// (PEM, one or more) or, with caFile "", the system's roots (nil).
func Roots(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, errors.E(errors.Op("pki.Roots"), errors.IO, errors.Path(caFile), err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, errors.E(errors.Op("pki.Roots"), errors.Invalid, errors.Path(caFile), "no certificate in PEM")
	}
	return p, nil
}

// SelfSigned makes a throwaway CA and a certificate from it for sans: the
// certificate `cairn server --tls auto` serves users when no cluster CA is
// at hand. It returns the CA's PEM, which clients are given as --ca.
func SelfSigned(sans []string) (tls.Certificate, []byte, error) {
	ca, err := NewCA("cairn self-signed")
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := ca.Issue("", "cairn", sans, CertLifetime)
	return cert, ca.PEM, err
}
