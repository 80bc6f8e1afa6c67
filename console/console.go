package console

import (
	"context"
	"crypto/tls"
	"embed"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"cairn/errors"
	"cairn/metrics"
	"cairn/proto/metapb"
)

//go:embed static
var staticFS embed.FS

// Config configures a Console. Gateway and Meta are required.
type Config struct {
	// Gateway is the native HTTP API handler every file operation goes
	// through, authenticated as the signed-in user.
	Gateway http.Handler
	// S3 is the S3 API handler: parted, resumable uploads (multipart) and
	// share links (presigned URLs) go through it. nil: uploads are single
	// PUTs and sharing a private file is not offered.
	S3 http.Handler
	// Meta answers sign-in (Authenticate) and, for root sessions, the
	// admin pages (keys, cluster).
	Meta metapb.MetaClient
	// Ops are the counters the activity page charts; default: every role
	// of the process that serves requests (gateway, s3).
	Ops []*metrics.Ops
	// SessionTTL is how long a sign-in lasts. Default 12h.
	SessionTTL time.Duration
	// KeyFile keeps the key session cookies are sealed with (made, 0600,
	// if missing): a console restarted with it keeps everyone signed in.
	// Empty: a key of this process, so a restart signs everyone out.
	KeyFile string
	// SignInPerIP bounds sign-in attempts per client address, and
	// SignInPerKey failed ones per access key, per SignInWindow; past
	// either, sign-in answers 429 with Retry-After. Defaults 20, 5, 1m.
	SignInPerIP, SignInPerKey int
	SignInWindow              time.Duration
	// Sample is the activity charts' resolution. Default 2s; 15 minutes
	// of samples are kept.
	Sample time.Duration
	// TLS, when set, makes Serve answer HTTPS (the gateway's certificate);
	// cookies are then Secure.
	TLS    *tls.Config
	Logger *slog.Logger
	// Now is the clock (tests move it to expire sessions). Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() error {
	if c.Gateway == nil || c.Meta == nil {
		return errors.E(errors.Op("console.New"), errors.Invalid, "Config.Gateway and Config.Meta are required")
	}
	if c.Ops == nil {
		for _, o := range metrics.All() {
			if o.Role() == "gateway" || o.Role() == "s3" {
				c.Ops = append(c.Ops, o)
			}
		}
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = 12 * time.Hour
	}
	if c.SignInPerIP <= 0 {
		c.SignInPerIP = 20
	}
	if c.SignInPerKey <= 0 {
		c.SignInPerKey = 5
	}
	if c.SignInWindow <= 0 {
		c.SignInWindow = time.Minute
	}
	if c.Sample <= 0 {
		c.Sample = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Console is the web console's handler.
type Console struct {
	cfg      Config
	mux      *http.ServeMux
	sessions *sessions
	limits   *limits
	activity *activity
	stop     context.CancelFunc
	done     sync.WaitGroup
}

// New returns a Console; Close stops its background sampling.
func New(cfg Config) (*Console, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	key, err := loadKey(cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	ss, err := newSessions(key)
	if err != nil {
		return nil, errors.E(errors.Op("console.New"), err)
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), activity: newActivity(cfg.Ops, cfg.Sample), sessions: ss,
		limits: newLimits(cfg.SignInPerIP, cfg.SignInPerKey, cfg.SignInWindow)}
	static, _ := fs.Sub(staticFS, "static")
	assets := http.FileServerFS(static)
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", assets))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	c.mux.HandleFunc("/api/session", c.handleSession)
	c.mux.HandleFunc("/api/ns", c.api(c.namespaces))
	c.mux.HandleFunc("/api/ns/{ns}", c.api(c.namespaces))
	c.mux.HandleFunc("/api/fs/{ns}/{path...}", c.api(c.files))
	c.mux.HandleFunc("/api/uploads/{ns}/{path...}", c.api(c.uploads))
	c.mux.HandleFunc("POST /api/share/{ns}/{path...}", c.api(c.share))
	c.mux.HandleFunc("GET /share/{ns}/{path...}", c.shared)
	c.mux.HandleFunc("HEAD /share/{ns}/{path...}", c.shared)
	c.mux.HandleFunc("GET /api/activity", c.api(c.activityJSON))
	c.mux.HandleFunc("GET /api/cluster", c.root(c.cluster))
	c.mux.HandleFunc("/api/access/{what}", c.root(c.access))
	c.mux.HandleFunc("/api/access/{what}/{name}", c.root(c.access))
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		c.run(ctx)
	}()
	return c, nil
}

// Close stops the activity sampler.
func (c *Console) Close() error {
	c.stop()
	c.done.Wait()
	return nil
}

func (c *Console) now() time.Time { return c.cfg.Now() }

func (c *Console) run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Sample)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.activity.sample(now)
			c.sessions.sweep(c.now())
			c.limits.sweep(c.now())
		}
	}
}

// ServeHTTP serves the pages and their API. Every answer forbids framing
// by other sites and content sniffing; the pages' own policy allows only
// their own scripts and styles (no inline script), which with escaping in
// the pages keeps a crafted file name from running as code.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/api/fs/") && !strings.HasPrefix(r.URL.Path, "/share/") {
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; media-src 'self'; "+
			"frame-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
	}
	c.mux.ServeHTTP(w, r)
}

// api wraps a handler that needs a session.
func (c *Console) api(f func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if err != nil {
			writeError(w, err)
			return
		}
		f(w, r, s)
	}
}

// root wraps a handler for root sessions only.
func (c *Console) root(f func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return c.api(func(w http.ResponseWriter, r *http.Request, s *session) {
		if !s.Root {
			writeError(w, errors.E(errors.Permission, "root only"))
			return
		}
		f(w, r, s)
	})
}

// Server is an http.Server for the console: bounded header reads, and no
// write timeout, since downloads and uploads may take long.
func (c *Console) Server() *http.Server {
	return &http.Server{Handler: c, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, TLSConfig: c.cfg.TLS}
}

// Serve serves the console on l (over TLS when Config.TLS is set) until
// srv is shut down.
func (c *Console) Serve(srv *http.Server, l net.Listener) error {
	if c.cfg.TLS != nil {
		l = tls.NewListener(l, c.cfg.TLS)
	}
	return srv.Serve(l)
}
