package s3

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	md5simd "github.com/minio/md5-simd"
	"github.com/prometheus/client_golang/prometheus"

	"cairn/client"
	"cairn/errors"
	"cairn/meta"
	"cairn/metrics"
	"cairn/proto/metapb"
)

// SmallReader serves whole small objects from memory: the native
// gateway's hot-object cache, shared so both APIs warm one cache.
type SmallReader interface {
	// ReadSmall returns f's content, or ok=false when f is too large to
	// be cached.
	ReadSmall(ctx context.Context, f *client.File) (data []byte, ok bool, err error)
}

// Config configures a Server. Client is required.
type Config struct {
	Client *client.Client
	// Domain enables virtual-host-style requests: a Host of
	// bucket.Domain names the bucket. Path-style always works.
	Domain string
	// Region is what GetBucketLocation reports. Default us-east-1.
	// Signatures are accepted for any region the client signs for.
	Region string
	// Small, when set, serves small GETs from memory.
	Small SmallReader
	// MinPartSize is the smallest part but the last of a multipart
	// upload. Default 5 MiB, as S3.
	MinPartSize int64
	// UploadMaxAge is the age after which an unfinished multipart upload
	// is aborted and its parts deleted. Default 7 days; negative: never.
	UploadMaxAge time.Duration
	// UploadSweep is how often abandoned uploads are looked for. Default 1h.
	UploadSweep time.Duration
	// MaxObjectSize refuses larger single PUTs. Default 5 GiB, as S3.
	MaxObjectSize int64
	// StorageClasses maps S3 storage class names to Cairn classes
	// (class.go); STANDARD is always the bucket's class. nil: STANDARD_IA
	// is ec-4+2 and GLACIER_IR ec-8+4.
	StorageClasses map[string]string
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
}

func (c *Config) setDefaults() error {
	if c.Client == nil {
		return errors.E(errors.Op("s3.New"), errors.Invalid, "Config.Client is required")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.MinPartSize <= 0 {
		c.MinPartSize = 5 << 20
	}
	if c.UploadMaxAge == 0 {
		c.UploadMaxAge = 7 * 24 * time.Hour
	}
	if c.UploadSweep <= 0 {
		c.UploadSweep = time.Hour
	}
	if c.MaxObjectSize <= 0 {
		c.MaxObjectSize = 5 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Domain = strings.TrimPrefix(strings.ToLower(c.Domain), ".")
	return nil
}

// Server is the S3 API handler.
type Server struct {
	cfg     Config
	client  *client.Client
	meta    metapb.MetaClient
	keys    keyCache
	cors    corsCache
	states  stateCache // bucket policies, public access blocks, ownership (access.go)
	classes s3Classes  // storage class names (class.go)
	ops     *metrics.Ops
	stop    context.CancelFunc
	done    chan struct{}
	// md5s hashes big bodies several at a time with SIMD: MD5 (which S3
	// ETags are) was half the CPU of a parallel multipart upload.
	md5s md5simd.Server

	reqBase uint64 // random, so ids differ across restarts and gateways
	reqSeq  atomic.Uint64
}

// New returns a Server and starts its clean-up of abandoned uploads;
// Close stops it.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, client: cfg.Client, meta: cfg.Client.Meta(),
		keys: keyCache{entries: map[string]keyEntry{}},
		cors: corsCache{m: map[string]corsEntry{}}, states: stateCache{m: map[string]bucketState{}},
		ops:  metrics.NewOps(cfg.Registerer, "s3"),
		stop: cancel, done: make(chan struct{}), md5s: md5simd.NewServer(),
		classes: newS3Classes(cfg.StorageClasses),
	}
	var seed [8]byte
	rand.Read(seed[:])
	s.reqBase = binary.BigEndian.Uint64(seed[:])
	go s.sweepLoop(ctx)
	return s, nil
}

// Close stops background work.
func (s *Server) Close() error {
	s.stop()
	<-s.done
	s.md5s.Close()
	return nil
}

// Ops returns the per-operation metrics (role "s3").
func (s *Server) Ops() *metrics.Ops { return s.ops }

// request is one S3 call being served.
type request struct {
	w      http.ResponseWriter
	r      *http.Request
	query  url.Values // parsed once
	p      principal
	body   *body
	bucket string
	key    string // "" for bucket-level calls
	// base is the context the request came with, before meta.OnBehalfOf:
	// the gateway's own identity, for calls it has authorized itself.
	base   context.Context
	action string // the IAM action of the operation (access.go)
}

func (q *request) ctx() context.Context { return q.r.Context() }

// newRequestID is unique per process and request: a random prefix
// chosen at start and a counter, as 16 hex digits (no crypto per request).
func (s *Server) newRequestID() string {
	n := s.reqSeq.Add(1) ^ s.reqBase
	var b [16]byte
	const digits = "0123456789ABCDEF"
	for i := 15; i >= 0; i-- {
		b[i] = digits[n&15]
		n >>= 4
	}
	return string(b[:])
}

// ServeHTTP serves one S3 request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := w.Header()
	id := s.newRequestID()
	h["X-Amz-Request-Id"] = []string{id}
	h["X-Amz-Id-2"] = []string{id}
	h["Server"] = []string{"Cairn"}
	op, code := s.serve(w, r)
	var err error
	if code >= 400 {
		err = errors.New(strconv.Itoa(code))
	}
	s.ops.Observe(op, time.Since(start), err)
	// Byte rates (the console's activity charts) as the native API counts
	// them: the lengths the request and the response declared.
	in := r.ContentLength
	if d, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64); err == nil {
		in = d // aws-chunked: the payload, not its signed framing
	}
	var out int64
	if r.Method != http.MethodHead && code < 300 {
		out, _ = strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	}
	s.ops.AddBytes(in, out)
}

// target splits the request into bucket and key, path-style or
// virtual-host-style.
func (s *Server) target(r *http.Request) (bucket, key string) {
	p := strings.TrimPrefix(r.URL.Path, "/")
	if b, ok := s.hostBucket(r); ok {
		return b, p
	}
	bucket, key, _ = strings.Cut(p, "/")
	return bucket, key
}

// hostBucket is the bucket a virtual-host-style request names in its Host.
func (s *Server) hostBucket(r *http.Request) (string, bool) {
	if s.cfg.Domain == "" {
		return "", false
	}
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	b, ok := strings.CutSuffix(host, "."+s.cfg.Domain)
	return b, ok && b != ""
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) (string, int) {
	bucket, key := s.target(r)
	if r.Method == http.MethodOptions {
		return "cors-preflight", s.preflight(w, r, bucket)
	}
	// CORS headers go on errors too, authentication's included: without
	// them a browser hides the error from the page that caused it (and
	// preflights, which are not authenticated, show the rules anyway).
	if bucket != "" && r.Header.Get("Origin") != "" {
		s.corsHeaders(w, r, bucket)
	}
	query := r.URL.Query()
	p, b, err := s.authenticate(r, query)
	if err != nil {
		return "auth", writeError(w, r, err)
	}
	// Meta checks the signer's rights too, where the data is (as for the
	// native API): a check this layer got wrong still cannot reach past
	// them. "" (an unsigned request) is checked as anonymous.
	base := r.Context()
	r = r.WithContext(meta.OnBehalfOf(base, p.access))
	q := &request{w: w, r: r, query: query, p: p, body: b, bucket: bucket, key: key, base: base}
	op, err := s.dispatch(q)
	if err != nil {
		return op, writeError(w, r, err)
	}
	return op, statusOf(w)
}

// dispatch routes the request (see route.go) and runs its handler. It
// returns the operation's name (for metrics) and an error to send;
// handlers that succeed have written their response.
func (s *Server) dispatch(q *request) (string, error) {
	rt, err := resolve(q)
	if err != nil {
		return rt.op, err
	}
	q.action = actionOf(rt.op, q)
	// A class this gateway does not offer is refused on any call (class.go).
	if _, err := s.classes.class(q.r.Header.Get("X-Amz-Storage-Class")); err != nil {
		return rt.op, err
	}
	if err := s.expectedOwners(q); err != nil {
		return rt.op, err
	}
	return rt.op, rt.serve(s, q)
}

// expectedOwners checks x-amz-expected-bucket-owner (and, for copies,
// x-amz-source-expected-bucket-owner): a request meant for a bucket of
// one owner must not act on a bucket of another. Answered 403, as S3.
func (s *Server) expectedOwners(q *request) error {
	h := q.r.Header
	check := func(bucket, want string) error {
		if want == "" || bucket == "" {
			return nil
		}
		n, err := s.client.Namespace(q.ctx(), bucket)
		if err != nil {
			return notExistAs(err, errNoSuchBucket())
		}
		if n.Owner != want {
			return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied: the bucket's owner is not the expected one")
		}
		return nil
	}
	if err := check(q.bucket, h.Get("X-Amz-Expected-Bucket-Owner")); err != nil {
		return err
	}
	if want := h.Get("X-Amz-Source-Expected-Bucket-Owner"); want != "" {
		sb, _, _, err := copySource(h)
		if err != nil {
			return err
		}
		return check(sb, want)
	}
	return nil
}

// notConfigured are bucket configurations Cairn does not have, with the
// error S3 gives for a bucket without one: tools probe them and expect
// "none", not "not implemented".
var notConfigured = map[string]string{
	"encryption":  "ServerSideEncryptionConfigurationNotFoundError",
	"website":     "NoSuchWebsiteConfiguration",
	"replication": "ReplicationConfigurationNotFoundError",
}

func (s *Server) notConfigured(q *request, sub string) error {
	if _, err := s.authorize(q, read); err != nil {
		return err
	}
	return apiErr(http.StatusNotFound, notConfigured[sub], "The bucket has no "+sub+" configuration")
}

// statusWriter remembers the status a handler sent, for metrics.
func statusOf(w http.ResponseWriter) int {
	if sw, ok := w.(*statusWriter); ok {
		return sw.code
	}
	return http.StatusOK
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Handler wraps the server so that metrics see the status of every
// response; use it as the http.Server's handler.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(&statusWriter{ResponseWriter: w}, r)
	})
}

// sweepLoop aborts uploads older than UploadMaxAge.
func (s *Server) sweepLoop(ctx context.Context) {
	defer close(s.done)
	if s.cfg.UploadMaxAge < 0 {
		return
	}
	t := time.NewTicker(s.cfg.UploadSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.SweepUploads(ctx, time.Now().Add(-s.cfg.UploadMaxAge)); err != nil {
			s.cfg.Logger.Warn("s3: sweeping abandoned uploads", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("s3: aborted abandoned uploads", "count", n)
		}
	}
}

// SweepUploads aborts every multipart upload initiated before cutoff and
// returns how many it aborted.
func (s *Server) SweepUploads(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	req := &metapb.S3ListUploadsRequest{Limit: 1000}
	for {
		l, err := s.meta.S3ListUploads(ctx, req)
		if err != nil {
			return n, err
		}
		for _, u := range l.Uploads {
			if u.InitiatedNs < cutoff.UnixNano() {
				_, err := s.meta.S3AbortUpload(ctx, &metapb.S3UploadRequest{Bucket: u.Bucket, Key: u.Key, UploadId: u.UploadId})
				if err != nil && !errors.Is(errors.NotExist, err) {
					return n, err
				}
				n++
			}
		}
		if !l.Truncated || len(l.Uploads) == 0 {
			return n, nil
		}
		last := l.Uploads[len(l.Uploads)-1]
		req = &metapb.S3ListUploadsRequest{Limit: 1000, Bucket: "", KeyMarker: last.Bucket + "\x00" + last.Key + "\x00" + last.UploadId}
	}
}
