package api

import (
	"crypto/tls"
	"os"
	"sync"

	"cairn/errors"
	"cairn/pki"
)

// CAFiles are where `cairn server` keeps the cluster CA's certificate,
// relative to the directory it was started in, found as CredentialsFiles
// are: the quick start's https endpoints then work without --ca.
var CAFiles = []string{"data/meta/ca.pem"}

// CAFile is the CA certificate file a client trusts: $CAIRN_CA, else the
// first of CAFiles that exists, else "" (the system's roots).
func CAFile() string {
	if f := os.Getenv("CAIRN_CA"); f != "" {
		return f
	}
	for _, f := range CAFiles {
		if _, err := os.Stat(f); err == nil {
			return f
		}
	}
	return ""
}

// TLSConfig is the TLS configuration of a user's connections (the API,
// S3, meta and data servers): it trusts CAFile's certificates or the
// system's roots, presents no certificate (users authenticate each call)
// and caches sessions for resumption. One configuration is kept per CA
// file, so that connections made with it are pooled.
func TLSConfig() (*tls.Config, error) {
	file := CAFile()
	tlsMu.Lock()
	defer tlsMu.Unlock()
	if c, ok := tlsConfigs[file]; ok {
		return c, nil
	}
	roots, err := pki.Roots(file)
	if err != nil {
		return nil, errors.E(errors.Op("api.TLSConfig"), err)
	}
	c := pki.ClientConfig(roots, nil)
	tlsConfigs[file] = c
	return c, nil
}

var (
	tlsMu      sync.Mutex
	tlsConfigs = map[string]*tls.Config{}
)

// userTLS is TLSConfig for a transport: a CA file that cannot be read
// fails every TLS connection with its error rather than falling back to
// trusting something else.
func userTLS() *tls.Config {
	cfg, err := TLSConfig()
	if err != nil {
		return &tls.Config{VerifyConnection: func(tls.ConnectionState) error { return err }, InsecureSkipVerify: true}
	}
	return cfg
}
