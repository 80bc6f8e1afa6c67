package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"cairn/api"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// dialMeta connects a command to meta as the user whose credentials are in
// the environment (CAIRN_ACCESS_KEY/CAIRN_SECRET_KEY, else the root pair):
// every call carries them and meta authorises it. Credentials travel only
// over TLS: with the cluster CA in $CAIRN_CA (a PEM file) meta is dialled
// over TLS verified against it; without, the connection is plaintext,
// carries no credentials, and only a meta that trusts plaintext callers
// (the trusted network of before) answers.
func dialMeta(addr string, extra ...grpc.DialOption) (metapb.MetaClient, *grpc.ClientConn, error) {
	const op = errors.Op("cli.dialMeta")
	var opts []grpc.DialOption
	if ca := os.Getenv("CAIRN_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, nil, errors.E(op, errors.IO, errors.Path(ca), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, errors.E(op, errors.Invalid, errors.Path(ca), fmt.Errorf("no PEM certificate in $CAIRN_CA"))
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
		cfg, err := api.ConfigFromEnv()
		if err != nil {
			return nil, nil, err
		}
		if cfg.AccessKey != "" {
			opts = append(opts, meta.WithUser(cfg.AccessKey, cfg.SecretKey))
		}
	}
	return meta.Dial(addr, append(opts, extra...)...)
}
