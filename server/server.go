// Package server runs Cairn's roles (meta, one data server, gateway) in
// one process: what `cairn server` starts on a laptop and what most
// end-to-end tests start. Each role still talks to the others the way it
// would across machines (gRPC to meta, the data plane by address), except
// that the gateway reads and writes the in-process data server through
// cairn.Chunks directly and calls meta's methods directly (meta.Local),
// saving a loopback hop and its marshalling on every request.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/console"
	"cairn/errors"
	"cairn/gateway"
	"cairn/gateway/s3"
	"cairn/internal/cork"
	"cairn/meta"
	"cairn/metrics"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Config is what `cairn server` takes; flags fill it.
type Config struct {
	Data  string // data directory: meta/ and chunk/ below it. Default ./data
	HTTP  string // native API listener. Default :8080
	Meta  string // meta gRPC listener. Default 127.0.0.1:8090
	Chunk string // data-plane listener. Default 127.0.0.1:8091
	Admin string // /metrics, /debug/pprof, /debug/profile. Default 127.0.0.1:8092; "off" disables
	S3    string // S3 API listener. Default :9000; "off" disables
	// Console is the web console's listener; "" or "off" disables (the
	// command's flag defaults to :8081). ConsoleTLS, when set, serves it
	// over HTTPS.
	Console    string
	ConsoleTLS *tls.Config

	S3Domain       string        // virtual-host-style requests: bucket.S3Domain
	S3UploadMaxAge time.Duration // abandoned multipart uploads are aborted after this. Default 7 days

	RootUser, RootPassword string // from CAIRN_ROOT_USER / CAIRN_ROOT_PASSWORD

	PublicMaxAge  time.Duration // Cache-Control max-age of public objects. Default 60s
	HotCacheSize  int64         // bytes; 0 disables the hot-object cache; default 256 MiB
	HotObjectMax  int64         // largest object the hot cache keeps. Default 1 MiB
	ExtentSize    int64         // largest needle a write creates. Default 8 MiB
	MaxVolumeSize uint64        // bytes before a volume turns read-only. Default 8 GiB
	NoLocalReads  bool          // clients on this host read over HTTP, not from the volume files (chunk/local.go)
	CapTTL        time.Duration // life of a data-plane capability (meta.Config.CapTTL). Default 10h
	CapRotate     time.Duration // capability key rotation (meta.Config.CapRotate). Default 24h
	// LifecycleClock is the time S3 lifecycle rules age objects by
	// (meta.Config.LifecycleClock); tests move it ahead. Nil: time.Now.
	LifecycleClock func() time.Time
	// TierInterval is meta.Config.TierInterval (tiering scans). Default 1m.
	TierInterval time.Duration

	// Users' TLS on the HTTP and S3 listeners: a certificate and key
	// (PEM files), or TLSAuto for one issued by the cluster CA for this
	// host's names (clients trust DATA/meta/ca.pem). Neither: plain HTTP.
	// Meta's and the data plane's listeners speak TLS always.
	TLSCert, TLSKey string
	TLSAuto         bool
	// Pprof serves /debug/pprof and /debug/profile on the admin listener.
	Pprof bool

	Logger *slog.Logger
}

// Defaults returns a Config with every default filled.
func Defaults() Config {
	return Config{
		Data: "data", HTTP: ":8080", Meta: "127.0.0.1:8090", Chunk: "127.0.0.1:8091",
		Admin: "127.0.0.1:8092", S3: ":9000", PublicMaxAge: 60 * time.Second, HotCacheSize: 256 << 20,
		HotObjectMax: 1 << 20, ExtentSize: 8 << 20, MaxVolumeSize: 8 << 30,
	}
}

// Server is a running one-process store.
type Server struct {
	cfg         Config
	metaSvc     *meta.Service
	grpc        *grpc.Server
	metaConn    *grpc.ClientConn // the data server's
	gatewayConn *grpc.ClientConn // the gateway's, for calls Local does not carry
	store       *chunk.Store
	revoked     *pki.Revocations // meta's list; the data server shares it (one process)
	client      *client.Client
	gateway     *gateway.Gateway
	s3          *s3.Server
	s3Srv       *http.Server
	console     *console.Console
	consoleSrv  *http.Server
	httpSrv     *http.Server
	chunkSrv    *http.Server
	adminSrv    *http.Server
	lis         map[string]net.Listener
	cancel      context.CancelFunc
	generated   [2]string
	ca          *pki.CA
	userTLS     *tls.Config // the HTTP, S3 and console listeners'; nil: plain HTTP
	clientTLS   *tls.Config // UserTLS: one, so that its connections are pooled
}

// Start opens the data directory, starts every role and returns once the
// store accepts requests.
func Start(cfg Config) (s *Server, err error) {
	const op = errors.Op("server.Start")
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	srv := &Server{cfg: cfg, lis: map[string]net.Listener{}, revoked: &pki.Revocations{}}
	s = srv
	defer func() {
		if err != nil {
			srv.Close() // not s: a failing return sets it to nil
		}
	}()
	for name, addr := range map[string]string{"http": cfg.HTTP, "meta": cfg.Meta, "chunk": cfg.Chunk, "admin": cfg.Admin, "s3": cfg.S3, "console": cfg.Console} {
		if (name == "admin" || name == "s3" || name == "console") && (addr == "off" || addr == "") {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, errors.E(op, errors.IO, fmt.Errorf("listen %s on %s: %w", name, addr, err))
		}
		s.lis[name] = l
	}
	metaDir := filepath.Join(cfg.Data, "meta")
	if err := os.MkdirAll(metaDir, 0o700); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	chunkAddr := s.lis["chunk"].Addr().String()
	// Every role gets its certificate from the cluster CA at each start:
	// the process holds the CA, so there is nothing to join or keep.
	if s.ca, err = pki.LoadOrCreateCA(metaDir, "cairn cluster"); err != nil {
		return nil, errors.E(op, err)
	}
	metaNode, err := s.ca.Node(pki.RoleMeta, "meta", pki.DefaultSANs(s.Addr("meta")))
	if err != nil {
		return nil, errors.E(op, err)
	}
	dataNode, err := s.ca.Node(pki.RoleData, chunkAddr, pki.DefaultSANs(chunkAddr))
	if err != nil {
		return nil, errors.E(op, err)
	}
	gatewayNode, err := s.ca.Node(pki.RoleGateway, "gateway", nil)
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.clientTLS = pki.ClientConfig(s.ca.Pool(), nil)
	if s.userTLS, err = userTLS(cfg, s.ca, s.Addr("http"), s.Addr("s3")); err != nil {
		return nil, errors.E(op, err)
	}
	// Meta's and the client's dial functions hand out the in-process store
	// for our own address (meta calls it only after the store registered);
	// other data servers are dialled over TLS as meta or as the gateway.
	var local atomic.Pointer[chunk.Store]
	dialAs := func(cfg *tls.Config) func(string) cairn.Chunks {
		return func(addr string) cairn.Chunks {
			if st := local.Load(); st != nil && addr == chunkAddr {
				return st
			}
			return chunk.NewRemoteTLS(addr, cfg)
		}
	}
	s.metaSvc, err = meta.Open(meta.Config{
		Dir: metaDir, RootUser: cfg.RootUser, RootPassword: cfg.RootPassword,
		MaxVolumeSize: cfg.MaxVolumeSize, Chunks: dialAs(metaNode.Client()), Logger: cfg.Logger, CA: s.ca,
		CapTTL: cfg.CapTTL, CapRotate: cfg.CapRotate, StoreReserve: meta.DefaultStoreReserve, Revoked: s.revoked,
		LifecycleClock: cfg.LifecycleClock, TierInterval: cfg.TierInterval,
	})
	if err != nil {
		return nil, errors.E(op, err)
	}
	if u, p, ok := s.metaSvc.GeneratedRoot(); ok {
		s.generated = [2]string{u, p}
	}
	s.grpc = meta.NewGRPCServer(s.metaSvc, meta.ServerTLS(s.revoked.Guard(metaNode.Server())))
	go s.grpc.Serve(s.lis["meta"])

	mc, conn, err := meta.Dial(s.lis["meta"].Addr().String(), meta.DialTLS(dataNode.Client()))
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.metaConn = conn
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.store, err = chunk.Open(chunk.Config{
		Dir: filepath.Join(cfg.Data, "chunk"), Addr: chunkAddr, Meta: mc,
		MaxVolumeSize: int64(cfg.MaxVolumeSize), NoLocalReads: cfg.NoLocalReads, Logger: cfg.Logger,
		TLS: dataNode.Client(), Revoked: s.revoked,
	})
	if err != nil {
		return nil, errors.E(op, err)
	}
	local.Store(s.store)
	s.chunkSrv = gateway.Server(s.store.Handler())
	go cork.Serve(s.chunkSrv, s.lis["chunk"], s.revoked.Guard(dataNode.Server(pki.HTTPProtos...)))
	go s.store.Run(ctx)
	if err := waitForDataServer(ctx, mc, chunkAddr); err != nil {
		return nil, errors.E(op, err)
	}
	select { // the data server serves once meta has answered it (its lease)
	case <-s.store.Ready():
	case <-time.After(10 * time.Second):
		return nil, errors.E(op, errors.Unavailable, "data server got no lease from meta within 10s")
	}

	// The gateway calls meta in-process; the data server keeps its gRPC
	// client, as in a cluster.
	// The calls Local does not carry go over gRPC as the gateway too: the
	// data server's connection would carry the data role, which may not
	// act for users.
	gmc, gconn, err := meta.Dial(s.lis["meta"].Addr().String(), meta.DialTLS(gatewayNode.Client()))
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.gatewayConn = gconn
	gw := meta.Local(s.metaSvc, meta.Caller{Role: pki.RoleGateway, ID: "server"}, gmc)
	s.client, err = client.New(client.Config{Meta: gw, Dial: dialAs(gatewayNode.Client()), ExtentSize: cfg.ExtentSize, Logger: cfg.Logger})
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.gateway, err = gateway.New(gateway.Config{
		Client: s.client, PublicMaxAge: cfg.PublicMaxAge, HotCacheSize: cfg.HotCacheSize,
		HotObjectMax: cfg.HotObjectMax, MetaAddr: s.Addr("meta"), Logger: cfg.Logger,
	})
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.httpSrv = gateway.Server(s.gateway)
	serve(s.httpSrv, s.lis["http"], s.userTLS)
	// The console's parted uploads and share links go through the S3
	// layer in process, so it exists when either needs it.
	if s.lis["s3"] != nil || s.lis["console"] != nil {
		s.s3, err = s3.New(s3.Config{Client: s.client, Domain: cfg.S3Domain, Small: s.gateway,
			UploadMaxAge: cfg.S3UploadMaxAge, Logger: cfg.Logger})
		if err != nil {
			return nil, errors.E(op, err)
		}
	}
	if l := s.lis["s3"]; l != nil {
		s.s3Srv = gateway.Server(s.s3.Handler())
		serve(s.s3Srv, l, s.userTLS)
	}
	if l := s.lis["console"]; l != nil {
		s.console, err = console.New(console.Config{Gateway: s.gateway, S3: s.s3.Handler(), Meta: gw,
			Ops: []*metrics.Ops{s.gateway.Ops(), s.s3.Ops()}, TLS: s.consoleTLS(), Logger: cfg.Logger,
			KeyFile: filepath.Join(cfg.Data, "console.key")})
		if err != nil {
			return nil, errors.E(op, err)
		}
		s.consoleSrv = s.console.Server()
		go s.console.Serve(s.consoleSrv, l)
	}
	if l := s.lis["admin"]; l != nil {
		s.adminSrv = &http.Server{Handler: metrics.RoleAdmin(cfg.Pprof), ReadHeaderTimeout: 10 * time.Second}
		go s.adminSrv.Serve(l)
	}
	return s, nil
}

// userTLS is the users' listeners' TLS configuration (Config.TLSCert,
// TLSAuto), nil for plain HTTP.
func userTLS(cfg Config, ca *pki.CA, addrs ...string) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	switch {
	case cfg.TLSCert != "" || cfg.TLSKey != "":
		cert, err = tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, errors.E(errors.Invalid, errors.Path(cfg.TLSCert), err)
		}
	case cfg.TLSAuto:
		// From the cluster CA, which clients on this host find in
		// DATA/meta/ca.pem (or are given as --ca elsewhere).
		if cert, err = ca.Issue("", "cairn", pki.DefaultSANs(addrs...), pki.CertLifetime); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	return pki.ServerConfig(cert, nil, pki.HTTPProtos...), nil
}

// serve serves srv on l, over TLS with cfg unless it is nil.
func serve(srv *http.Server, l net.Listener, cfg *tls.Config) { go cork.Serve(srv, l, cfg) }

// waitForDataServer returns once meta has heard the data server's first
// heartbeat, so the first write finds a server to place data on.
func waitForDataServer(ctx context.Context, mc metapb.MetaClient, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, err := mc.Info(ctx, &metapb.Empty{})
		if err == nil {
			for _, a := range info.DataServers {
				if a == addr {
					return nil
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.E(errors.Unavailable, "data server did not register with meta within 10s")
}

// GeneratedRoot returns the root pair generated on this first start, if any.
func (s *Server) GeneratedRoot() (user, secret string, ok bool) {
	return s.generated[0], s.generated[1], s.generated[0] != ""
}

// CredentialsFile is where a generated root pair is kept.
func (s *Server) CredentialsFile() string {
	return filepath.Join(s.cfg.Data, "meta", "root.credentials")
}

// Addr returns the address a role listens on: "http", "meta", "chunk", "admin".
func (s *Server) Addr(role string) string {
	if l := s.lis[role]; l != nil {
		return l.Addr().String()
	}
	return ""
}

// DataDir is the data directory.
func (s *Server) DataDir() string { return s.cfg.Data }

// S3URL is the S3 API's endpoint ("" when it is off).
func (s *Server) S3URL() string {
	if a := s.Addr("s3"); a != "" {
		return s.scheme() + "://" + a
	}
	return ""
}

// consoleTLS is the console's TLS: Config.ConsoleTLS, else the user
// listeners' (--tls-cert, --tls auto).
func (s *Server) consoleTLS() *tls.Config {
	if s.cfg.ConsoleTLS != nil {
		return s.cfg.ConsoleTLS
	}
	return s.userTLS
}

// ConsoleURL is the web console's URL ("" when it is off).
func (s *Server) ConsoleURL() string {
	a := s.Addr("console")
	switch {
	case a == "":
		return ""
	case s.consoleTLS() != nil:
		return "https://" + a
	}
	return "http://" + a
}

// URL is the native API's base URL.
func (s *Server) URL() string { return s.scheme() + "://" + s.Addr("http") }

func (s *Server) scheme() string {
	if s.userTLS != nil {
		return "https"
	}
	return "http"
}

// CAFile is the cluster CA's certificate: what a client of this server
// trusts (--ca, $CAIRN_CA).
func (s *Server) CAFile() string { return filepath.Join(s.cfg.Data, "meta", pki.CAFile) }

// UserTLS is the TLS configuration of a user's client of this server (a
// mount, the CLI, a test): it trusts the cluster CA and presents no
// certificate. Meta's and the data servers' listeners need it.
func (s *Server) UserTLS() *tls.Config { return s.clientTLS }

// Meta is the in-process meta service; tests wait on its background duties
// (Meta().WaitCollected) rather than sleeping.
func (s *Server) Meta() *meta.Service { return s.metaSvc }

// Client is the in-process client (tests use it to look behind the API).
func (s *Server) Client() *client.Client { return s.client }

// Shutdown stops accepting requests, lets in-flight ones finish (until
// ctx ends), then closes every role, data last.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	if s.httpSrv != nil {
		errs = append(errs, s.httpSrv.Shutdown(ctx))
	}
	if s.s3Srv != nil {
		errs = append(errs, s.s3Srv.Shutdown(ctx))
	}
	if s.consoleSrv != nil {
		errs = append(errs, s.consoleSrv.Shutdown(ctx))
	}
	if s.adminSrv != nil {
		s.adminSrv.Shutdown(ctx)
	}
	if s.chunkSrv != nil {
		errs = append(errs, s.chunkSrv.Shutdown(ctx))
	}
	errs = append(errs, s.Close())
	return errors.Join(errs...)
}

// Close stops everything at once.
func (s *Server) Close() error {
	var errs []error
	if s.cancel != nil {
		s.cancel()
	}
	for _, srv := range []*http.Server{s.httpSrv, s.s3Srv, s.consoleSrv, s.adminSrv, s.chunkSrv} {
		if srv != nil {
			srv.Close()
		}
	}
	if s.console != nil {
		s.console.Close()
	}
	if s.s3 != nil {
		s.s3.Close()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.metaConn != nil {
		s.metaConn.Close()
	}
	if s.gatewayConn != nil {
		s.gatewayConn.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	if s.metaSvc != nil {
		errs = append(errs, s.metaSvc.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	for _, l := range s.lis {
		l.Close()
	}
	return errors.Join(errs...)
}
