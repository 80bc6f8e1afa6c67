package cli

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"cairn"
	"cairn/api"
	"cairn/chunk"
	"cairn/errors"
	"cairn/internal/cork"
	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// dialMeta dials meta as a user: TLS trusting --ca, $CAIRN_CA,
// ./data/meta/ca.pem or the system's roots (api.TLSConfig).
func dialMeta(addr string, extra ...grpc.DialOption) (metapb.MetaClient, *grpc.ClientConn, error) {
	cfg, err := api.TLSConfig()
	if err != nil {
		return nil, nil, err
	}
	opts := []grpc.DialOption{meta.DialTLS(cfg)}
	// Every call carries the user's credentials (the environment's pair,
	// else the root pair): meta authorises each call as that user.
	env, err := api.ConfigFromEnv()
	if err != nil {
		return nil, nil, err
	}
	if env.AccessKey != "" {
		opts = append(opts, meta.WithUser(env.AccessKey, env.SecretKey))
	}
	return meta.Dial(addr, append(opts, extra...)...)
}

// userChunks dials data servers as a user (a mount): https, trusting what
// dialMeta trusts, and refusing a data server whose certificate meta
// revoked (the list followed from mc while ctx lasts).
func userChunks(ctx context.Context, mc metapb.MetaClient) (func(string) cairn.Chunks, error) {
	cfg, err := api.TLSConfig()
	if err != nil {
		return nil, err
	}
	return revokedChunks(ctx, mc, cfg), nil
}

// revocationPoll is how often a gateway or a mount asks meta for the
// revocation list (data servers get it with every heartbeat).
const revocationPoll = 5 * time.Second

// revokedChunks dials data servers with cfg, refusing those whose
// certificate is on meta's revocation list, which it follows from mc.
func revokedChunks(ctx context.Context, mc metapb.MetaClient, cfg *tls.Config) func(string) cairn.Chunks {
	rv := &pki.Revocations{}
	cfg = rv.Guard(cfg) // once: connections are pooled per configuration
	go meta.FollowRevocations(ctx, mc, rv, revocationPoll)
	return func(a string) cairn.Chunks {
		r := chunk.NewRemoteTLS(a, cfg)
		r.SetRevoked(rv)
		return r
	}
}

// identityFlags say how a data server or gateway gets its cluster
// certificate: kept in its data directory from an earlier join, from a
// join token (--join), or from files (--cert, --key, --ca).
type identityFlags struct {
	join, cert, key, ca string
	sans                []string
}

func (f *identityFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.join, "join", os.Getenv("CAIRN_JOIN"), "join token from `cairn admin join-token` (default $CAIRN_JOIN); the certificate it buys is kept in the data directory and reused")
	fs.StringVar(&f.cert, "cert", "", "cluster certificate (PEM) instead of joining; with --key and --ca")
	fs.StringVar(&f.key, "key", "", "key of --cert")
	fs.StringVar(&f.ca, "ca", "", "cluster CA certificate (default: the last certificate of --cert)")
	fs.StringArrayVar(&f.sans, "san", nil, "extra host name or address in the certificate (repeatable)")
}

// node returns the identity: --cert/--key, else the one kept in dir, else
// one bought with the join token from meta at metaAddr.
func (f *identityFlags) node(ctx context.Context, metaAddr, dir, name string, sans []string) (*pki.Node, error) {
	if f.cert != "" || f.key != "" {
		return pki.LoadNode(f.cert, f.key, f.ca)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return meta.JoinCluster(ctx, metaAddr, f.join, dir, name, pki.DefaultSANs(append(sans, f.sans...)...))
}

// userTLSFlags are a user-facing listener's certificate (--tls-cert,
// --tls-key): given, the listener speaks HTTPS (HTTP/2 and HTTP/1.1).
type userTLSFlags struct{ cert, key string }

func (f *userTLSFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "certificate (PEM, chain) the HTTP and S3 APIs serve HTTPS with")
	fs.StringVar(&f.key, "tls-key", "", "key of --tls-cert")
}

// config is the listeners' TLS configuration, nil without --tls-cert.
func (f *userTLSFlags) config() (*tls.Config, error) {
	if f.cert == "" && f.key == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, errors.E(errors.Op("cli.tls"), errors.Invalid, errors.Path(f.cert), err)
	}
	return pki.ServerConfig(pair, nil, pki.HTTPProtos...), nil
}

// serveHTTP serves srv on l, over TLS with cfg when cfg is not nil.
func serveHTTP(srv *http.Server, l net.Listener, cfg *tls.Config) { go cork.Serve(srv, l, cfg) }

// scheme is the URL scheme of a listener served with cfg.
func scheme(cfg *tls.Config) string {
	if cfg == nil {
		return "http"
	}
	return "https"
}

// nodeDir is where a role keeps its joined identity inside its data dir.
func nodeDir(dir string) string { return filepath.Join(dir, "tls") }
