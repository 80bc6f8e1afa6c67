package cli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"cairn"
	"cairn/bench"
	"cairn/chunk"
	"cairn/client"
	"cairn/console"
	"cairn/errors"
	"cairn/gateway"
	"cairn/gateway/s3"
	"cairn/meta"
	"cairn/metrics"
	"cairn/pki"
	"cairn/server"
)

// serverCommands are the commands that run the store's roles.
func serverCommands() []*cobra.Command {
	cmds := []*cobra.Command{serverCmd(), metaCmd(), chunkCmd(), gatewayCmd()}
	for _, c := range cmds {
		var headroom int64
		gcHeadroomFlag(c.Flags(), &headroom, garbageHeadroom)
		c.PreRun = func(*cobra.Command, []string) { tuneGC(uint64(cmp.Or(headroom, garbageHeadroom))) }
	}
	return cmds
}

// gcHeadroomFlag is --gc-headroom, the most garbage a process lets pile up
// between collections (limitGarbage): its resident memory settles at its
// live heap plus about this much (0: def).
func gcHeadroomFlag(fs *pflag.FlagSet, p *int64, def int64) {
	sizeFlag(fs, p, "gc-headroom", fmt.Sprintf("most garbage held between collections: memory settles at the live heap plus about this; ignored when GOMEMLIMIT is set (default %s)", bench.FormatSize(def)))
}

// tuneGC makes the garbage collector run a quarter as often as Go's
// default unless GOGC says otherwise. The servers' live heaps are small
// and their garbage is per-request, so at the default they spend a large
// share of the CPU collecting: at GOGC=400 a meta Resolve over gRPC cost
// about a fifth less CPU and doubled throughput on 2 loaded cores
// (BenchmarkResolveGRPC, 200,000 calls). Unless GOMEMLIMIT says
// otherwise, the garbage is also held under headroom (--gc-headroom,
// garbageHeadroom by default; gc.go), so
// that a large live heap is not multiplied by five.
func tuneGC(headroom uint64) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limitGarbage(headroom)
	}
}

// sizeValue is a pflag.Value taking sizes like 256MiB, 8GiB or 0.
type sizeValue struct{ p *int64 }

func (v sizeValue) String() string { return fmt.Sprint(*v.p) }
func (v sizeValue) Type() string   { return "size" }
func (v sizeValue) Set(s string) error {
	n, err := bench.ParseSize(s)
	if err == nil {
		*v.p = n
	}
	return err
}

func sizeFlag(fs *pflag.FlagSet, p *int64, name, usage string) {
	fs.Var(sizeValue{p}, name, usage)
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// untilSignal blocks until SIGINT or SIGTERM, then calls stop with a
// context that bounds the graceful shutdown.
func untilSignal(stop func(context.Context) error) error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	sig := <-ch
	slog.Info("shutting down; in-flight requests finish", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return stop(ctx)
}

func serverCmd() *cobra.Command {
	cfg := server.Defaults()
	var maxVol int64 = int64(cfg.MaxVolumeSize)
	var users userTLSFlags
	var tlsMode string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run meta, one data server and the gateway in one process",
		Long: `Run a whole store in one process: the metadata service, one data server
and the HTTP gateway, with data under --data. The root access key and secret
come from CAIRN_ROOT_USER / CAIRN_ROOT_PASSWORD; when unset on first start a
pair is generated, printed once and kept (mode 0600) in DATA/meta/root.credentials.

The roles talk over mutual TLS with certificates from the cluster CA that the
first start creates (DATA/meta/ca.pem, key in ca.key, mode 0600). The HTTP and
S3 APIs serve HTTPS with --tls-cert/--tls-key, or with --tls auto a certificate
from that CA for this host's names (clients started in the same directory find
data/meta/ca.pem; elsewhere give them --ca or CAIRN_CA).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.MaxVolumeSize = uint64(maxVol)
			cfg.TLSCert, cfg.TLSKey = users.cert, users.key
			switch tlsMode {
			case "auto":
				cfg.TLSAuto = true
			case "", "off":
			default:
				return fmt.Errorf(`--tls %q: want "auto" or "off" (or give --tls-cert and --tls-key)`, tlsMode)
			}
			cfg.RootUser, cfg.RootPassword = os.Getenv("CAIRN_ROOT_USER"), os.Getenv("CAIRN_ROOT_PASSWORD")
			cfg.Logger = logger()
			s, err := server.Start(cfg)
			if err != nil {
				return err
			}
			if u, p, ok := s.GeneratedRoot(); ok {
				fmt.Printf("Generated root credentials (kept in %s, shown only now):\n  CAIRN_ROOT_USER=%s\n  CAIRN_ROOT_PASSWORD=%s\n",
					s.CredentialsFile(), u, p)
			}
			fmt.Printf("cairn server: HTTP API on %s  (meta %s, data %s, admin %s, data dir %s)\n",
				s.URL(), s.Addr("meta"), s.Addr("chunk"), s.Addr("admin"), cfg.Data)
			if u := s.S3URL(); u != "" {
				fmt.Printf("cairn server: S3 API on %s\n", u)
			}
			if u := s.ConsoleURL(); u != "" {
				fmt.Printf("cairn server: web console on %s\n", u)
			}
			return untilSignal(s.Shutdown)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Data, "data", cfg.Data, "data directory")
	fs.StringVar(&cfg.HTTP, "http", cfg.HTTP, "native HTTP API listen address")
	fs.StringVar(&cfg.Meta, "meta-listen", cfg.Meta, "meta gRPC listen address")
	fs.StringVar(&cfg.Chunk, "chunk-listen", cfg.Chunk, "data-plane listen address")
	fs.StringVar(&cfg.Admin, "admin", cfg.Admin, `admin listen address (/metrics; /debug/pprof and /debug/profile with --pprof); "off" disables`)
	fs.DurationVar(&cfg.PublicMaxAge, "public-max-age", cfg.PublicMaxAge, "Cache-Control max-age for objects in public namespaces")
	sizeFlag(fs, &cfg.HotCacheSize, "hot-cache-size", "hot-object cache size (0 disables), e.g. 256MiB")
	sizeFlag(fs, &cfg.HotObjectMax, "hot-object-max", "largest object the hot cache keeps")
	sizeFlag(fs, &cfg.ExtentSize, "extent-size", "largest needle one write creates; bigger files are split")
	sizeFlag(fs, &maxVol, "max-volume-size", "volume size at which a volume turns read-only")
	fs.BoolVar(&cfg.NoLocalReads, "no-local-reads", false, "mounts and gateways on this host read over HTTP, not from the volume files")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof and /debug/profile on the admin listener")
	fs.StringVar(&tlsMode, "tls", "off", `"auto": HTTPS on the HTTP and S3 APIs with a certificate from the cluster CA`)
	users.add(fs)
	s3Flags(fs, &cfg.S3, &cfg.S3Domain, &cfg.S3UploadMaxAge)
	cfg.Console = ":8081"
	consoleFlag(fs, &cfg.Console)
	return cmd
}

// consoleFlag is the web console's flag, shared by `cairn server` and
// `cairn gateway`.
func consoleFlag(fs *pflag.FlagSet, addr *string) {
	fs.StringVar(addr, "console", *addr, `web console listen address; "off" disables`)
}

// adminServe starts the role's admin listener unless addr is "off";
// profiling is served only with pprof (metrics.RoleAdmin).
func adminServe(addr string, pprof bool) error {
	if addr == "" || addr == "off" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	srv := &http.Server{Handler: metrics.RoleAdmin(pprof), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return nil
}

func metaCmd() *cobra.Command {
	var dir, listen, admin string
	var maxVol int64 = 8 << 30
	var repl uint32 = 3
	var dead time.Duration = 10 * time.Second
	var repairRate int64 = 64 << 20
	var blockCache, readCache, memTable int64 // 0: meta.Config's defaults
	var rebalanceOnJoin, pprof bool
	var sans, classFlags []string
	var ecCell int64
	var tierInterval time.Duration
	var grp metaGroupFlags
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Run the metadata service",
		Long: `Run the metadata service. At its first start it creates the cluster CA in
--data (ca.pem, and ca.key with mode 0600); it serves gRPC over TLS with a
certificate from it, and data servers and gateways join with tokens from
` + "`cairn admin join-token`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			var classes []meta.Class
			for _, f := range classFlags {
				c, err := meta.ParseClass(f)
				if err != nil {
					return err
				}
				classes = append(classes, c)
			}
			id := cmp.Or(grp.advertise, listen)
			node, ca, fresh, err := grp.identity(cmd.Context(), dir, id, pki.DefaultSANs(append(grp.sans(listen), sans...)...)) // metagroup.go
			if err != nil {
				return err
			}
			revoked := &pki.Revocations{} // meta fills it; handshakes both ways check it
			group, err := grp.config(listen, node)
			if err != nil {
				return err
			}
			if grp.restore != "" {
				if err := restoreBackup(dir, grp.restore); err != nil {
					return err
				}
			}
			dataTLS := revoked.Guard(node.Client())
			svc, err := meta.Open(meta.Config{
				Dir: dir, RootUser: os.Getenv("CAIRN_ROOT_USER"), RootPassword: os.Getenv("CAIRN_ROOT_PASSWORD"),
				MaxVolumeSize: uint64(maxVol), DefaultReplication: repl, DeadAfter: dead,
				RepairRate: repairRate, RebalanceOnJoin: rebalanceOnJoin,
				Chunks: func(addr string) cairn.Chunks { return chunk.NewRemoteTLS(addr, dataTLS) }, Logger: logger(),
				CA: ca, Revoked: revoked, StoreReserve: meta.DefaultStoreReserve, Group: group,
				Classes: classes, ECCell: ecCell, TierInterval: tierInterval,
				BlockCacheSize: blockCache, ReadCacheBytes: readCache, MemTableSize: memTable,
			})
			if err != nil {
				return err
			}
			if u, p, ok := svc.GeneratedRoot(); ok {
				fmt.Printf("Generated root credentials (kept in %s, shown only now):\n  CAIRN_ROOT_USER=%s\n  CAIRN_ROOT_PASSWORD=%s\n",
					filepath.Join(dir, "root.credentials"), u, p)
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				svc.Close()
				return err
			}
			if err := adminServe(admin, pprof); err != nil {
				svc.Close()
				return err
			}
			g := meta.NewGRPCServer(svc, meta.ServerTLS(revoked.Guard(node.Server())))
			go g.Serve(l)
			fmt.Printf("cairn meta: gRPC (TLS) on %s, data dir %s, cluster CA %s\n", l.Addr(), dir, filepath.Join(dir, pki.CAFile))
			if fresh {
				if err := grp.addSelf(cmd.Context(), node, id); err != nil {
					g.Stop()
					svc.Close()
					return fmt.Errorf("joined the cluster but could not join the meta group (try `cairn admin meta add %s %s`): %w", id, cmp.Or(grp.raftAdvertise, grp.raftListen), err)
				}
				fmt.Printf("cairn meta: added to the meta group; its secrets come from the group\n")
			}
			return untilSignal(func(ctx context.Context) error {
				if group != nil {
					// A member hands the lead over and is gone within 2 s:
					// clients follow the new leader, calls in flight here
					// get a second to finish.
					if err := svc.HandOver(time.Second); err != nil {
						slog.Warn("meta: leadership hand-over failed; the group elects a leader", "err", err)
					}
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 700*time.Millisecond)
					defer cancel()
				}
				done := make(chan struct{})
				go func() { g.GracefulStop(); close(done) }()
				select {
				case <-done:
				case <-ctx.Done():
					g.Stop()
				}
				return svc.Close()
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "data", "data/meta", "data directory")
	fs.StringVar(&listen, "listen", "127.0.0.1:8090", "gRPC listen address")
	fs.StringVar(&admin, "admin", "127.0.0.1:8093", `admin listen address; "off" disables`)
	sizeFlag(fs, &maxVol, "max-volume-size", "volume size at which a volume turns read-only")
	fs.Uint32Var(&repl, "replication", repl, "default replicas per volume for new namespaces")
	fs.DurationVar(&dead, "dead-after", dead, "silence after which a data server is considered dead")
	sizeFlag(fs, &repairRate, "repair-rate", "bytes/s one re-replication, drain or rebalance copy may move")
	sizeFlag(fs, &blockCache, "block-cache-size", "Pebble's block cache for the metadata store (default 256MiB)")
	sizeFlag(fs, &readCache, "read-cache-size", "in-memory cache of metadata reads behind path lookups, in bytes (default 64MiB)")
	sizeFlag(fs, &memTable, "memtable-size", "largest of Pebble's write buffers for the metadata store; up to two are held (default 64MiB)")
	fs.StringArrayVar(&sans, "san", nil, "extra host name or address in meta's certificate, for clients that reach it by another name (repeatable)")
	fs.BoolVar(&pprof, "pprof", false, "serve /debug/pprof and /debug/profile on the admin listener")
	grp.flags(fs)
	fs.StringArrayVar(&classFlags, "class", nil, "storage class NAME=replicated[:RF] or NAME=ec:K+M, with ,media=LABEL and (ec) ,rf=N; repeatable (ec-K+M names work unconfigured)")
	sizeFlag(fs, &ecCell, "ec-cell", "cell size sealed volumes are erasure-coded with (default 4 MiB)")
	fs.DurationVar(&tierInterval, "tier-interval", time.Minute, "how often automatic tiering scans for files to move (and the granularity of read times)")
	fs.BoolVar(&rebalanceOnJoin, "rebalance-on-join", true, "move volumes (throttled) to a data server that joins, to even out usage; =false leaves it to `cairn admin rebalance`")
	return cmd
}

func chunkCmd() *cobra.Command {
	var dir, listen, advertise, metaAddr, admin string
	var labels []string
	var maxNeedle int64 = 64 << 20
	var scrubRate int64 = 4 << 20
	var noLocal, pprof bool
	var id identityFlags
	scrubPeriod, replicaTimeout := 14*24*time.Hour, 2*time.Second
	cmd := &cobra.Command{
		Use:   "chunk",
		Short: "Run a data server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			if advertise == "" {
				advertise = l.Addr().String()
			}
			lb := map[string]string{}
			for _, kv := range labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--label %q: want key=value", kv)
				}
				lb[k] = v
			}
			node, err := id.node(cmd.Context(), metaAddr, nodeDir(dir), advertise, []string{listen, advertise})
			if err != nil {
				return err
			}
			mc, conn, err := meta.Dial(metaAddr, meta.DialTLS(node.Client()))
			if err != nil {
				return err
			}
			defer conn.Close()
			if scrubRate == 0 {
				scrubRate = -1 // the flag's 0 means off
			}
			revoked := &pki.Revocations{} // filled from meta's heartbeat answers
			st, err := chunk.Open(chunk.Config{Dir: dir, Addr: advertise, Meta: mc, Labels: lb, MaxNeedle: maxNeedle, Logger: logger(),
				ScrubRate: scrubRate, ScrubPeriod: scrubPeriod, ReplicaTimeout: replicaTimeout, NoLocalReads: noLocal, TLS: node.Client(),
				Revoked: revoked})
			if err != nil {
				return err
			}
			if err := adminServe(admin, pprof); err != nil {
				st.Close()
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			go st.Run(ctx)
			srv := gateway.Server(st.Handler())
			serveHTTP(srv, l, revoked.Guard(node.Server(pki.HTTPProtos...)))
			fmt.Printf("cairn chunk: data plane (TLS) on %s (advertised %s), meta %s, data dir %s\n", l.Addr(), advertise, metaAddr, dir)
			return untilSignal(func(c context.Context) error {
				err := srv.Shutdown(c)
				cancel()
				return errors.Join(err, st.Close())
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "data", "data/chunk", "data directory")
	fs.StringVar(&listen, "listen", "127.0.0.1:8091", "data-plane listen address")
	fs.StringVar(&advertise, "advertise", "", "address clients use to reach this server (default: the listen address)")
	fs.StringVar(&metaAddr, "meta", "127.0.0.1:8090", "meta gRPC address")
	fs.StringVar(&admin, "admin", "127.0.0.1:8094", `admin listen address; "off" disables`)
	fs.StringArrayVar(&labels, "label", nil, "server label key=value (rack, zone); repeatable")
	sizeFlag(fs, &maxNeedle, "max-needle", "largest needle accepted")
	sizeFlag(fs, &scrubRate, "scrub-rate", "most bytes/s the background scrub re-reads and verifies (0 disables)")
	fs.DurationVar(&scrubPeriod, "scrub-period", scrubPeriod, "every needle is verified at least this often (the scrub paces itself, up to --scrub-rate)")
	fs.DurationVar(&replicaTimeout, "replica-timeout", replicaTimeout, "how long a primary waits for a replica's write (plus 1s per 16MiB) before the volume turns read-only")
	fs.BoolVar(&noLocal, "no-local-reads", false, "mounts and gateways on this host read over HTTP, not from the volume files")
	fs.BoolVar(&pprof, "pprof", false, "serve /debug/pprof and /debug/profile on the admin listener")
	id.add(fs)
	return cmd
}

func gatewayCmd() *cobra.Command {
	var metaAddr, listen, admin, s3Listen, dir, name string
	var pprof bool
	var id identityFlags
	var users userTLSFlags
	consoleAddr := ":8081"
	s3cfg := s3.Config{}
	gcfg := gateway.Config{PublicMaxAge: 60 * time.Second, HotCacheSize: 256 << 20, HotObjectMax: 1 << 20}
	var extent int64 = 8 << 20
	var metaCache int64 = 64 << 20
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the HTTP gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if metaCache <= 0 { // the hot cache relies on the metadata cache's change stream
				return errors.E(errors.Op("gateway"), errors.Invalid, "--meta-cache-size must be above zero")
			}
			userTLS, err := users.config()
			if err != nil {
				return err
			}
			if name == "" {
				name, _ = os.Hostname()
			}
			node, err := id.node(cmd.Context(), metaAddr, nodeDir(dir), name, nil)
			if err != nil {
				return err
			}
			clusterTLS := node.Client()
			mc, conn, err := meta.Dial(metaAddr, meta.DialTLS(clusterTLS))
			if err != nil {
				return err
			}
			defer conn.Close()
			cl, err := client.New(client.Config{Meta: mc, ExtentSize: extent, Logger: logger(), CacheBytes: metaCache,
				Dial: revokedChunks(cmd.Context(), mc, clusterTLS)}) // tls.go
			if err != nil {
				return err
			}
			defer cl.Close()
			gcfg.Client, gcfg.Logger = cl, logger()
			if gcfg.MetaAddr == "" {
				gcfg.MetaAddr = metaAddr
			}
			g, err := gateway.New(gcfg)
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			if err := adminServe(admin, pprof); err != nil {
				return err
			}
			srv := gateway.Server(g)
			serveHTTP(srv, l, userTLS)
			fmt.Printf("cairn gateway: HTTP API on %s://%s, meta %s\n", scheme(userTLS), l.Addr(), metaAddr)
			servers := []*http.Server{srv}
			s3On, consoleOn := s3Listen != "" && s3Listen != "off", consoleAddr != "" && consoleAddr != "off"
			var s3srv *s3.Server
			if s3On || consoleOn { // the console's uploads and share links use the S3 layer
				s3cfg.Client, s3cfg.Small, s3cfg.Logger = cl, g, logger()
				if s3srv, err = s3.New(s3cfg); err != nil {
					return err
				}
				defer s3srv.Close()
			}
			if s3On {
				sl, err := net.Listen("tcp", s3Listen)
				if err != nil {
					return err
				}
				ssrv := gateway.Server(s3srv.Handler())
				serveHTTP(ssrv, sl, userTLS)
				servers = append(servers, ssrv)
				fmt.Printf("cairn gateway: S3 API on %s://%s\n", scheme(userTLS), sl.Addr())
			}
			if consoleOn {
				conL, err := net.Listen("tcp", consoleAddr)
				if err != nil {
					return err
				}
				con, err := console.New(console.Config{Gateway: g, S3: s3srv.Handler(), Meta: mc, TLS: userTLS,
					Ops: []*metrics.Ops{g.Ops(), s3srv.Ops()}, Logger: logger(), KeyFile: filepath.Join(dir, "console.key")})
				if err != nil {
					return err
				}
				defer con.Close()
				csrv := con.Server()
				go con.Serve(csrv, conL)
				servers = append(servers, csrv)
				fmt.Printf("cairn gateway: web console on %s://%s\n", scheme(userTLS), conL.Addr())
			}
			return untilSignal(func(ctx context.Context) error {
				var errs []error
				for _, s := range servers {
					errs = append(errs, s.Shutdown(ctx))
				}
				return errors.Join(errs...)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&metaAddr, "meta", "127.0.0.1:8090", "meta gRPC address")
	fs.StringVar(&gcfg.MetaAddr, "meta-advertise", "", "meta address told to mounts that find the store through this gateway (default: --meta)")
	fs.StringVar(&listen, "http", ":8080", "HTTP listen address")
	fs.StringVar(&admin, "admin", "127.0.0.1:8095", `admin listen address; "off" disables`)
	fs.StringVar(&dir, "data", "data/gateway", "directory that keeps the gateway's cluster certificate and the console's session key")
	fs.StringVar(&name, "name", "", "the gateway's name in its certificate (default: the host name)")
	fs.BoolVar(&pprof, "pprof", false, "serve /debug/pprof and /debug/profile on the admin listener")
	id.add(fs)
	users.add(fs)
	fs.DurationVar(&gcfg.PublicMaxAge, "public-max-age", gcfg.PublicMaxAge, "Cache-Control max-age for objects in public namespaces")
	sizeFlag(fs, &gcfg.HotCacheSize, "hot-cache-size", "hot-object cache size (0 disables)")
	sizeFlag(fs, &gcfg.HotObjectMax, "hot-object-max", "largest object the hot cache keeps")
	sizeFlag(fs, &metaCache, "meta-cache-size", "file metadata (inodes, extent lists) kept to answer without asking meta")
	sizeFlag(fs, &extent, "extent-size", "largest needle one write creates")
	s3Listen = ":9000"
	s3Flags(fs, &s3Listen, &s3cfg.Domain, &s3cfg.UploadMaxAge)
	consoleFlag(fs, &consoleAddr)
	return cmd
}

// s3Flags are the S3 API's flags, shared by `cairn server` and `cairn gateway`.
func s3Flags(fs *pflag.FlagSet, listen, domain *string, maxAge *time.Duration) {
	fs.StringVar(listen, "s3", *listen, `S3 API listen address; "off" disables`)
	fs.StringVar(domain, "s3-domain", *domain, "domain for virtual-host-style S3 requests (bucket.DOMAIN); path-style always works")
	if *maxAge == 0 {
		*maxAge = 7 * 24 * time.Hour
	}
	fs.DurationVar(maxAge, "s3-upload-max-age", *maxAge, "abort multipart uploads left unfinished this long")
}
