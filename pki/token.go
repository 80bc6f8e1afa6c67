package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"

	"cairn/errors"
)

// A join token is what a new data server or gateway is given to join:
//
//	cairn-join.<id>.<secret>.<sha256 of the CA certificate, hex>
//
// The id names the token in meta; the secret proves the holder was given
// it (meta keeps only its hash); the CA's fingerprint lets the joiner
// verify meta's certificate on first contact, before it trusts anything,
// as kubeadm's discovery hash does.
type JoinToken struct {
	ID     string
	Secret string
	CAHash string // hex SHA-256 of the CA certificate's DER
}

const (
	tokenPrefix    = "cairn-join"
	tokenIDLen     = 8
	tokenSecretLen = 32
	tokenAlphabet  = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// NewJoinToken makes a token for the cluster whose CA is ca.
func NewJoinToken(ca *CA) JoinToken {
	return JoinToken{ID: randomString(tokenIDLen), Secret: randomString(tokenSecretLen), CAHash: ca.Fingerprint()}
}

func (t JoinToken) String() string {
	return tokenPrefix + "." + t.ID + "." + t.Secret + "." + t.CAHash
}

// ParseJoinToken reads a token's text form.
func ParseJoinToken(s string) (JoinToken, error) {
	bad := func(why string) (JoinToken, error) {
		return JoinToken{}, errors.E(errors.Op("pki.ParseJoinToken"), errors.Invalid, "malformed join token: "+why)
	}
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) != 4 || parts[0] != tokenPrefix {
		return bad("want cairn-join.<id>.<secret>.<ca-hash>")
	}
	t := JoinToken{ID: parts[1], Secret: parts[2], CAHash: parts[3]}
	if len(t.ID) != tokenIDLen || !inAlphabet(t.ID, tokenAlphabet) {
		return bad("id")
	}
	if len(t.Secret) != tokenSecretLen || !inAlphabet(t.Secret, tokenAlphabet) {
		return bad("secret")
	}
	if len(t.CAHash) != 2*sha256.Size || !inAlphabet(t.CAHash, "0123456789abcdef") {
		return bad("CA hash")
	}
	return t, nil
}

// SecretHash is what meta keeps of a token's secret. The secret has 165
// random bits, so a fast hash suffices.
func SecretHash(secret string) []byte {
	h := sha256.Sum256([]byte("cairn-join-token\x00" + secret))
	return h[:]
}

// CheckSecret reports, in constant time, whether secret hashes to hash.
func CheckSecret(secret string, hash []byte) bool {
	return subtle.ConstantTimeCompare(SecretHash(secret), hash) == 1
}

// PinnedConfig is the TLS configuration a joiner dials meta with: it
// trusts no one yet, so it accepts meta's certificate only if the chain
// meta presents holds a CA with the token's fingerprint and the leaf is
// signed by it.
func (t JoinToken) PinnedConfig() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified below against the pinned CA instead of by name
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verifyPinned(cs.PeerCertificates)
		},
	}
}

func (t JoinToken) verifyPinned(certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return fmt.Errorf("meta presented no certificate")
	}
	for _, c := range certs {
		if Fingerprint(c) != t.CAHash {
			continue
		}
		p := x509.NewCertPool()
		p.AddCert(c)
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: p, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("meta's certificate is not from the token's CA: %w", err)
		}
		return nil
	}
	return fmt.Errorf("meta's certificate chain holds no CA with the token's fingerprint %s", t.CAHash)
}

func inAlphabet(s, alphabet string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(alphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}

func randomString(n int) string {
	b := make([]byte, n)
	limit := 256 - 256%len(tokenAlphabet)
	buf := make([]byte, 1)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		if int(buf[0]) < limit {
			b[i] = tokenAlphabet[int(buf[0])%len(tokenAlphabet)]
			i++
		}
	}
	return string(b)
}
