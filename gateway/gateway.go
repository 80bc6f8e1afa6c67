package gateway

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cairn/api"
	"cairn/byterange"
	"cairn/client"
	"cairn/errors"
	"cairn/internal/cork"
	"cairn/meta"
	"cairn/metrics"
	"cairn/pathname"
	"cairn/proto/metapb"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Gateway. Client is required.
type Config struct {
	Client *client.Client
	// PublicMaxAge is the Cache-Control max-age of objects in public
	// namespaces. Default 60s; private namespaces always get
	// "private, no-cache".
	PublicMaxAge time.Duration
	// HotCacheSize bounds the hot-object cache in bytes; 0 switches it
	// off. Default (when negative): 256 MiB.
	HotCacheSize int64
	// HotObjectMax is the largest object the hot cache keeps. Default 1 MiB.
	HotObjectMax int64
	// MaxObjectSize refuses larger uploads with 413. Default 5 TiB.
	MaxObjectSize int64
	// MetaAddr is the meta address told to clients that ask at
	// GET /.well-known/cairn (a mount given only --endpoint). "" answers
	// 404 there.
	MetaAddr   string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() error {
	if c.Client == nil {
		return errors.E(errors.Op("gateway.New"), errors.Invalid, "Config.Client is required")
	}
	if c.PublicMaxAge == 0 {
		c.PublicMaxAge = 60 * time.Second
	}
	if c.HotCacheSize < 0 {
		c.HotCacheSize = 256 << 20
	}
	if c.HotObjectMax <= 0 {
		c.HotObjectMax = 1 << 20
	}
	if c.MaxObjectSize <= 0 {
		c.MaxObjectSize = 5 << 40
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Gateway is the native HTTP API handler.
type Gateway struct {
	cfg    Config
	client *client.Client
	meta   metapb.MetaClient
	auth   authCache
	hot    *hotCache
	ops    *metrics.Ops
}

// New returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	g := &Gateway{
		cfg:    cfg,
		client: cfg.Client,
		meta:   cfg.Client.Meta(),
		auth:   authCache{entries: map[[32]byte]authEntry{}},
		hot:    newHotCache(cfg.HotCacheSize, cfg.HotObjectMax),
		ops:    metrics.NewOps(cfg.Registerer, "gateway"),
	}
	cfg.Client.OnChange(g.onChange)
	return g, nil
}

// Ops returns the gateway's operation counters, for the admin listener.
func (g *Gateway) Ops() *metrics.Ops { return g.ops }

func (g *Gateway) onChange(ev *metapb.Event) {
	switch {
	case ev.Reset_:
		g.hot.dropPrefix("")
	case ev.Namespace:
		g.hot.dropPrefix(ev.Ns + "\x00")
	default:
		// Only the named key: entries below a renamed or deleted
		// directory are never served (an entry is valid for one inode
		// version only) and age out of the LRU. A scan of the whole
		// cache per event made every PUT cost O(cached objects): 4 KiB
		// PUTs fell from 4,300/s to 600-1,500/s with 100k objects cached.
		g.hot.drop(hotKey(ev.Ns, ev.Path))
	}
}

func hotKey(ns, p string) string { return ns + "\x00" + p }

// ServeHTTP routes a request. The URL path is used as decoded but never
// cleaned: a path that needs cleaning ("a/../b", "a//b") is refused by
// package pathname rather than silently rewritten.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	opName, code := g.route(w, r)
	var err error
	if code >= 400 {
		err = errors.New(strconv.Itoa(code))
	}
	g.ops.Observe(opName, time.Since(start), err)
	// Byte rates (the console's activity charts) from the lengths the
	// request and the response declared: no wrapped writer on the hot path.
	var out int64
	if r.Method != http.MethodHead && code < 300 {
		out, _ = strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64)
	}
	g.ops.AddBytes(r.ContentLength, out)
}

func (g *Gateway) route(w http.ResponseWriter, r *http.Request) (string, int) {
	p, err := g.authenticate(r)
	if err != nil {
		return "auth", writeError(w, err)
	}
	// Meta checks the user's rights too, where the data is: a gateway
	// that got a check wrong still cannot reach past them.
	r = r.WithContext(meta.OnBehalfOf(r.Context(), p.key))
	raw := strings.TrimPrefix(r.URL.Path, "/")
	if raw == "" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return "list-namespaces", methodNotAllowed(w, "GET, HEAD")
		}
		return "list-namespaces", g.listNamespaces(w, r, p)
	}
	if raw == wellKnown {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return "discover", methodNotAllowed(w, "GET, HEAD")
		}
		return "discover", g.discover(w)
	}
	nsName, rest, hasSlash := strings.Cut(raw, "/")
	if err := pathname.ValidNamespace(nsName); err != nil {
		return "bad-request", writeError(w, err)
	}
	q := r.URL.Query()
	if rest == "" {
		switch r.Method {
		case http.MethodPut:
			return "ns-put", g.putNamespace(w, r, p, nsName)
		case http.MethodDelete:
			return "ns-delete", g.deleteNamespace(w, r, p, nsName)
		case http.MethodGet, http.MethodHead:
			if !hasSlash && r.Method == http.MethodHead {
				return "ns-head", g.headNamespace(w, r, p, nsName)
			}
			return "list", g.list(w, r, p, nsName, "")
		}
		return "ns", methodNotAllowed(w, "GET, HEAD, PUT, DELETE")
	}
	path, isDir, err := pathname.Inside(rest)
	if err != nil {
		return "bad-request", writeError(w, err)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if isDir {
			return "list", g.list(w, r, p, nsName, path)
		}
		if q.Has("stat") {
			return "stat", g.stat(w, r, p, nsName, path)
		}
		if r.Method == http.MethodHead {
			return "head", g.get(w, r, p, nsName, path)
		}
		return "get", g.get(w, r, p, nsName, path)
	case http.MethodPut:
		if isDir {
			return "mkdir", g.mkdir(w, r, p, nsName, path)
		}
		return "put", g.put(w, r, p, nsName, path)
	case http.MethodPost:
		switch {
		case q.Has("append"):
			return "append", g.append(w, r, p, nsName, path)
		case q.Has("rename"):
			return "rename", g.rename(w, r, p, nsName, path, q.Get("rename"))
		}
		return "post", writeError(w, errors.E(errors.Invalid, "POST needs ?append or ?rename=/to"))
	case http.MethodDelete:
		return "delete", g.delete(w, r, p, nsName, path, q.Has("recursive"))
	}
	return "other", methodNotAllowed(w, "GET, HEAD, PUT, POST, DELETE")
}

// ---- Namespaces -----------------------------------------------------------

type nsJSON struct {
	Name       string `json:"name"`
	Visibility string `json:"visibility"`
	Owner      string `json:"owner"`
	Created    string `json:"created"`
	Class      string `json:"storage_class"` // tiers: "replicated" or the class's name
}

func toNSJSON(n *metapb.Namespace) nsJSON {
	v := "private"
	if n.Visibility == metapb.Visibility_PUBLIC_READ {
		v = "public"
	}
	class := n.StorageClass
	if class == "" {
		class = "replicated"
	}
	return nsJSON{Name: n.Name, Visibility: v, Owner: n.Owner,
		Created: time.Unix(0, n.CreatedNs).UTC().Format(time.RFC3339), Class: class}
}

func parseVisibility(s string) (metapb.Visibility, error) {
	switch s {
	case "public", "public-read":
		return metapb.Visibility_PUBLIC_READ, nil
	case "private", "":
		return metapb.Visibility_PRIVATE, nil
	}
	return 0, errors.E(errors.Invalid, "visibility must be public or private")
}

// wellKnown is where a gateway says where the rest of the store is. A
// namespace name cannot begin with '.', so it shadows none.
const wellKnown = ".well-known/cairn"

// discover answers where meta is, for clients that speak gRPC to it (the
// mount). The address is not a secret (meta authenticates every call), so
// no credentials are needed to ask.
func (g *Gateway) discover(w http.ResponseWriter) int {
	if g.cfg.MetaAddr == "" {
		return writeError(w, errors.E(errors.NotExist, errors.Path("/"+wellKnown), "this gateway does not advertise a meta address; use --meta"))
	}
	writeJSON(w, http.StatusOK, struct {
		Meta string `json:"meta"`
	}{g.cfg.MetaAddr})
	return http.StatusOK
}

func (g *Gateway) listNamespaces(w http.ResponseWriter, r *http.Request, p principal) int {
	all, err := g.client.ListNamespaces(staleContext(r))
	if err != nil {
		return writeError(w, err)
	}
	out := struct {
		Namespaces []nsJSON `json:"namespaces"`
	}{Namespaces: []nsJSON{}}
	for _, n := range all {
		if p.may(n, read) {
			out.Namespaces = append(out.Namespaces, toNSJSON(n))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return http.StatusOK
}

func (g *Gateway) putNamespace(w http.ResponseWriter, r *http.Request, p principal, name string) int {
	if p.key == "" {
		return writeError(w, errors.E(errors.Unauthenticated, "creating a namespace needs credentials"))
	}
	q := r.URL.Query()
	vis, err := parseVisibility(q.Get("visibility"))
	if err != nil {
		return writeError(w, err)
	}
	n, err := g.client.CreateNamespaceClass(r.Context(), name, p.key, vis, q.Get("class"))
	if errors.Is(errors.Exist, err) {
		if _, aerr := g.authorize(r.Context(), p, name, write); aerr != nil {
			return writeError(w, errors.E(errors.Exist, errors.Path(name), "namespace exists and is owned by someone else"))
		}
		if !q.Has("visibility") {
			return writeError(w, err)
		}
		n, err = g.client.SetVisibility(r.Context(), name, vis)
		if err != nil {
			return writeError(w, err)
		}
		writeJSON(w, http.StatusOK, toNSJSON(n))
		return http.StatusOK
	}
	if err != nil {
		return writeError(w, err)
	}
	writeJSON(w, http.StatusCreated, toNSJSON(n))
	return http.StatusCreated
}

func (g *Gateway) headNamespace(w http.ResponseWriter, r *http.Request, p principal, name string) int {
	if _, err := g.authorize(r.Context(), p, name, read); err != nil {
		return writeError(w, err)
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

func (g *Gateway) deleteNamespace(w http.ResponseWriter, r *http.Request, p principal, name string) int {
	if _, err := g.authorize(r.Context(), p, name, write); err != nil {
		return writeError(w, err)
	}
	if err := g.client.DeleteNamespace(r.Context(), name); err != nil {
		return writeError(w, err)
	}
	g.hot.dropPrefix(name + "\x00")
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// ---- Reading --------------------------------------------------------------

func etagOf(ino *metapb.Inode) string {
	if ino.Etag != "" {
		return `"` + ino.Etag + `"`
	}
	// Files built by appends have no content hash; inode and version
	// identify their content as well.
	return `"` + strconv.FormatUint(ino.Ino, 16) + "-" + strconv.FormatUint(ino.Version, 10) + `"`
}

func (g *Gateway) cacheControl(n *metapb.Namespace) string {
	if n.Visibility == metapb.Visibility_PUBLIC_READ {
		return "public, max-age=" + strconv.Itoa(int(g.cfg.PublicMaxAge/time.Second))
	}
	return "private, no-cache"
}

func (g *Gateway) get(w http.ResponseWriter, r *http.Request, p principal, ns, path string) int {
	n, err := g.authorize(r.Context(), p, ns, read)
	if err != nil {
		return writeError(w, err)
	}
	f, err := g.statVersion(r, ns, path)
	if err != nil {
		return writeError(w, err)
	}
	if f.IsDir() {
		return g.list(w, r, p, ns, path)
	}
	ino := f.Inode
	h := w.Header()
	if ino.S3Version != 0 {
		h["X-Cairn-Version-Id"] = []string{meta.VersionID(ino.S3Version)}
	}
	etag := etagOf(ino)
	mtime := time.Unix(0, ino.MtimeNs).UTC()
	h["ETag"] = []string{etag}
	h["Last-Modified"] = []string{mtime.Format(http.TimeFormat)}
	h["Accept-Ranges"] = []string{"bytes"}
	h["Cache-Control"] = []string{g.cacheControl(n)}
	ct := ino.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h["Content-Type"] = []string{ct}
	for k, v := range ino.UserMeta {
		h.Set("X-Cairn-Meta-"+k, v)
	}
	if code := checkPreconditions(r, etag, mtime); code != 0 {
		if code == http.StatusNotModified {
			h.Del("Content-Type")
			w.WriteHeader(code)
			return code
		}
		return writeError(w, errors.E(errors.Precondition, errors.Path(ns+"/"+path), "If-Match: the ETag differs"))
	}
	size := f.Size()
	start, length, code := int64(0), size, http.StatusOK
	if rg, ok, err := byterange.Parse(r.Header.Get("Range"), size); err != nil {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		return writeError(w, errors.E(err, errors.Path(ns+"/"+path)))
	} else if ok {
		start, length, code = rg.Start, rg.Length, http.StatusPartialContent
		h["Content-Range"] = []string{rg.ContentRange(size)}
	}
	h["Content-Length"] = []string{strconv.FormatInt(length, 10)}
	if r.Method == http.MethodHead {
		w.WriteHeader(code)
		return code
	}
	// Headers and body leave in one socket write over TLS.
	defer cork.Request(r)()
	if g.hot.fits(size) && ino.Ino != 0 { // a stored version has no inode to cache by
		data, err := g.hotRead(r.Context(), f)
		if err != nil {
			return writeError(w, err)
		}
		w.WriteHeader(code)
		w.Write(data[start : start+length])
		return code
	}
	lw := &lazyHeader{w: w, code: code}
	if _, err := g.client.ReadTo(r.Context(), f, start, length, lw); err != nil {
		if !lw.sent {
			return writeError(w, err)
		}
		// Headers are gone: all we can do is cut the connection so the
		// client sees a short body rather than wrong bytes.
		g.cfg.Logger.Warn("gateway: read failed mid-body", "path", ns+"/"+path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if !lw.sent {
		w.WriteHeader(code)
	}
	return code
}

// statVersion resolves the file, or with ?versionId= that S3 version of
// it (meta/versions.go); a delete marker is no file.
func (g *Gateway) statVersion(r *http.Request, ns, path string) (*client.File, error) {
	vid := r.URL.Query().Get("versionId")
	if vid == "" {
		return g.client.Stat(r.Context(), ns, path)
	}
	v, err := g.client.Meta().S3GetVersion(r.Context(), &metapb.S3VersionRequest{Ns: ns, Path: path, VersionId: vid})
	if err != nil {
		return nil, err
	}
	if v.DeleteMarker {
		return nil, errors.E(errors.NotExist, errors.Path(ns+"/"+path), "the version is a delete marker")
	}
	return &client.File{NS: ns, Path: path, Inode: v.Inode, Extents: v.Extents}, nil
}

// lazyHeader sends the status with the first byte of the body, so that a
// read that fails before any byte (a corrupt first block, a data server
// down) still gets a proper error response.
type lazyHeader struct {
	w    http.ResponseWriter
	code int
	sent bool
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	if !l.sent {
		l.sent = true
		l.w.WriteHeader(l.code)
	}
	return l.w.Write(p)
}

func (g *Gateway) hotRead(ctx context.Context, f *client.File) ([]byte, error) {
	key := hotKey(f.NS, f.Path)
	if data, ok := g.hot.get(key, f.Inode.Ino, f.Inode.Version); ok {
		g.client.NoteRead(f) // a read meta does not see, for tiering (client/readnotes.go)
		return data, nil
	}
	data, err := g.client.ReadAll(ctx, f)
	if err != nil {
		return nil, err
	}
	g.hot.put(key, f.Inode.Ino, f.Inode.Version, data)
	return data, nil
}

// checkPreconditions applies If-Match, If-None-Match and If-Modified-Since
// (RFC 9110 §13.2.2 order) and returns 0, 304 or 412.
func checkPreconditions(r *http.Request, etag string, mtime time.Time) int {
	if im := r.Header.Get("If-Match"); im != "" && !etagListMatch(im, etag) {
		return http.StatusPreconditionFailed
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if etagListMatch(inm, etag) {
			return http.StatusNotModified
		}
		return 0
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" {
		if t, err := http.ParseTime(ims); err == nil && !mtime.Truncate(time.Second).After(t) {
			return http.StatusNotModified
		}
	}
	return 0
}

// etagListMatch reports whether a comma-separated If-Match/If-None-Match
// list names etag (weak comparison, as RFC 9110 asks for If-None-Match).
func etagListMatch(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

type statJSON struct {
	Name        string            `json:"name"`
	Size        uint64            `json:"size"`
	Mtime       string            `json:"mtime"`
	ETag        string            `json:"etag"`
	ContentType string            `json:"content_type,omitempty"`
	Dir         bool              `json:"dir"`
	Mode        uint32            `json:"mode"`
	Version     uint64            `json:"version"`
	Meta        map[string]string `json:"meta,omitempty"`
	// The file's storage class when it is not its namespace's (a tier
	// move put it elsewhere; meta/tier.go).
	StorageClass string `json:"storage_class,omitempty"`
}

func toStatJSON(path string, ino *metapb.Inode) statJSON {
	s := statJSON{Name: path, Size: ino.Size, Mtime: time.Unix(0, ino.MtimeNs).UTC().Format(time.RFC3339Nano),
		ContentType: ino.ContentType, Dir: ino.Type == metapb.FileType_DIRECTORY, Mode: ino.Mode,
		Version: ino.Version, Meta: ino.UserMeta, StorageClass: ino.StorageClass}
	if !s.Dir {
		s.ETag = strings.Trim(etagOf(ino), `"`)
	}
	return s
}

func (g *Gateway) stat(w http.ResponseWriter, r *http.Request, p principal, ns, path string) int {
	if _, err := g.authorize(r.Context(), p, ns, read); err != nil {
		return writeError(w, err)
	}
	f, err := g.client.Stat(r.Context(), ns, path)
	if err != nil {
		return writeError(w, err)
	}
	writeJSON(w, http.StatusOK, toStatJSON(path, f.Inode))
	return http.StatusOK
}

// staleContext is the request's context, marked meta.StaleOK when the
// caller accepts a listing that may miss the latest writes
// (api.StaleOKHeader): behind a meta group any member answers it, and
// listings then spread over the group instead of all going to the leader.
func staleContext(r *http.Request) context.Context {
	if r.Header.Get(api.StaleOKHeader) == "1" {
		return meta.StaleOK(r.Context())
	}
	return r.Context()
}

type listJSON struct {
	Entries    []entryJSON `json:"entries"`
	NextCursor string      `json:"next_cursor"`
}

type entryJSON struct {
	Name  string `json:"name"`
	Size  uint64 `json:"size"`
	Mtime string `json:"mtime"`
	ETag  string `json:"etag,omitempty"`
	Dir   bool   `json:"dir"`
}

// list serves a listing. dir is the directory the URL named ("" for the
// namespace root); the query may narrow it with prefix and choose the
// delimiter ("/" by default for a directory URL).
func (g *Gateway) list(w http.ResponseWriter, r *http.Request, p principal, ns, dir string) int {
	if _, err := g.authorize(r.Context(), p, ns, read); err != nil {
		return writeError(w, err)
	}
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if dir != "" {
		prefix = dir + "/" + prefix
	}
	delim := "/"
	if q.Has("delimiter") {
		delim = q.Get("delimiter")
	}
	if delim != "" && delim != "/" {
		return writeError(w, errors.E(errors.Invalid, "delimiter must be / or empty"))
	}
	limit := uint64(1000)
	if s := q.Get("limit"); s != "" {
		var err error
		if limit, err = strconv.ParseUint(s, 10, 32); err != nil || limit == 0 || limit > 10000 {
			return writeError(w, errors.E(errors.Invalid, "limit must be 1 to 10000"))
		}
	}
	resp, err := g.client.List(staleContext(r), &metapb.ListRequest{
		Ns: ns, Prefix: prefix, Delimiter: delim, Cursor: q.Get("cursor"), Limit: uint32(limit),
	})
	if err != nil {
		return writeError(w, err)
	}
	out := listJSON{Entries: make([]entryJSON, 0, len(resp.Entries)), NextCursor: resp.NextCursor}
	for _, e := range resp.Entries {
		ej := entryJSON{Name: e.Name, Dir: e.Dir}
		if e.Inode != nil {
			ej.Size = e.Inode.Size
			ej.Mtime = time.Unix(0, e.Inode.MtimeNs).UTC().Format(time.RFC3339Nano)
			if !e.Dir {
				ej.ETag = strings.Trim(etagOf(e.Inode), `"`)
			}
		}
		out.Entries = append(out.Entries, ej)
	}
	writeJSON(w, http.StatusOK, out)
	return http.StatusOK
}

// ---- Writing --------------------------------------------------------------

func (g *Gateway) put(w http.ResponseWriter, r *http.Request, p principal, ns, path string) int {
	if _, err := g.authorize(r.Context(), p, ns, write); err != nil {
		return writeError(w, err)
	}
	if r.ContentLength > g.cfg.MaxObjectSize {
		return writeError(w, errors.E(errors.TooLarge, "object larger than the gateway's limit"))
	}
	opts := client.PutOptions{
		ContentType: r.Header.Get("Content-Type"),
		SizeHint:    r.ContentLength,
		IfMatch:     strings.Trim(r.Header.Get("If-Match"), `" `),
		IfNoneMatch: strings.TrimSpace(r.Header.Get("If-None-Match")) == "*",
		UserMeta:    userMeta(r.Header),
	}
	if s := r.Header.Get("Content-MD5"); s != "" {
		sum, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(sum) != 16 {
			return writeError(w, errors.E(errors.Invalid, "Content-MD5 is not a base64 MD5 digest"))
		}
		opts.MD5 = sum
	}
	// A body of unknown length (chunked) is counted as it is read: going
	// past the limit fails the read, so the upload is discarded before
	// anything is committed and the old object stays whole.
	body := &capped{r: r.Body, left: g.cfg.MaxObjectSize}
	ino, err := g.client.Put(r.Context(), ns, path, body, opts)
	g.hot.drop(hotKey(ns, path))
	if body.over {
		return writeError(w, errors.E(errors.TooLarge, "object larger than the gateway's limit"))
	}
	if err != nil {
		return writeError(w, err)
	}
	w.Header().Set("ETag", etagOf(ino))
	writeJSON(w, http.StatusOK, map[string]any{"path": path, "size": ino.Size, "etag": ino.Etag})
	return http.StatusOK
}

// capped fails a read that goes past left bytes.
type capped struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capped) Read(p []byte) (int, error) {
	if c.over {
		return 0, errors.E(errors.TooLarge, "object larger than the gateway's limit")
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1] // one byte past the limit is enough to know
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return n + int(c.left), errors.E(errors.TooLarge, "object larger than the gateway's limit")
	}
	return n, err
}

func userMeta(h http.Header) map[string]string {
	var m map[string]string
	for k, v := range h {
		if name, ok := strings.CutPrefix(k, "X-Cairn-Meta-"); ok && len(v) > 0 {
			if m == nil {
				m = map[string]string{}
			}
			m[strings.ToLower(name)] = v[0]
		}
	}
	return m
}

func (g *Gateway) mkdir(w http.ResponseWriter, r *http.Request, p principal, ns, path string) int {
	if _, err := g.authorize(r.Context(), p, ns, write); err != nil {
		return writeError(w, err)
	}
	ino, err := g.client.Mkdir(r.Context(), ns, path, 0o755)
	if err != nil {
		return writeError(w, err)
	}
	writeJSON(w, http.StatusOK, toStatJSON(path, ino))
	return http.StatusOK
}

func (g *Gateway) append(w http.ResponseWriter, r *http.Request, p principal, ns, path string) int {
	if _, err := g.authorize(r.Context(), p, ns, write); err != nil {
		return writeError(w, err)
	}
	ino, err := g.client.Append(r.Context(), ns, path, r.Body, client.PutOptions{
		SizeHint: r.ContentLength, ContentType: r.Header.Get("Content-Type"),
	})
	g.hot.drop(hotKey(ns, path))
	if err != nil {
		return writeError(w, err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"size": ino.Size})
	return http.StatusOK
}

func (g *Gateway) rename(w http.ResponseWriter, r *http.Request, p principal, ns, from, to string) int {
	if _, err := g.authorize(r.Context(), p, ns, write); err != nil {
		return writeError(w, err)
	}
	to, _, err := pathname.Clean(to)
	if err != nil || to == "" {
		if err == nil {
			err = errors.E(errors.Invalid, "rename needs a target path")
		}
		return writeError(w, err)
	}
	ino, err := g.client.Rename(r.Context(), ns, from, to, false)
	g.hot.drop(hotKey(ns, from)) // not what lies below: see onChange
	g.hot.drop(hotKey(ns, to))
	if err != nil {
		return writeError(w, err)
	}
	writeJSON(w, http.StatusOK, toStatJSON(to, ino))
	return http.StatusOK
}

func (g *Gateway) delete(w http.ResponseWriter, r *http.Request, p principal, ns, path string, recursive bool) int {
	if _, err := g.authorize(r.Context(), p, ns, write); err != nil {
		return writeError(w, err)
	}
	err := g.client.Delete(r.Context(), ns, path, recursive, strings.Trim(r.Header.Get("If-Match"), `" `))
	g.hot.drop(hotKey(ns, path)) // not what lies below: see onChange
	if err != nil {
		return writeError(w, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// ---- Serving --------------------------------------------------------------

// Server is an http.Server set up for the gateway: keep-alive, bounded
// header reads, TCP_NODELAY (Go's default on every TCP connection, which
// this server keeps: Nagle's algorithm once cost GFS-style systems 20x on
// small writes).
func Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				if tc, ok := cork.Underlying(c).(*net.TCPConn); ok {
					tc.SetNoDelay(true)
					// A whole 155 KiB object fits the socket in one write
					// instead of several, each a netpoll park and wake-up.
					// Memory is taken only while data is in flight.
					tc.SetWriteBuffer(1 << 20)
				}
			}
		},
	}
}
