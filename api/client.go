package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cairn/errors"
)

// Client talks to one gateway. It is safe for concurrent use; share one.
type Client struct {
	endpoint string // scheme://host[:port][/prefix], no trailing slash
	auth     string // the Authorization header, "" for anonymous requests
	hc       *http.Client
	err      error // a bad endpoint, reported by every call
}

// StaleOKHeader ("1") marks a listing request whose caller accepts an
// answer that may miss the latest writes: a gateway in front of a meta
// group lets any member answer it (meta.StaleOK), not only the leader.
// Other requests ignore it.
const StaleOKHeader = "X-Cairn-Stale-OK"

type staleKey struct{}

// StaleOK marks the requests made with the returned context stale-tolerant
// (StaleOKHeader): `cairn ls --stale`.
func StaleOK(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleKey{}, true)
}

func staleOK(ctx context.Context) bool {
	v, _ := ctx.Value(staleKey{}).(bool)
	return v
}

// Option changes a Client built by New.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests through hc, for a
// transport tuned by the caller (see NewTransport) or a test's.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// New returns a client of the gateway at endpoint ("http://host:8080";
// "host:8080" means http). An empty accessKey makes anonymous requests,
// which may read public namespaces only. A malformed endpoint is reported
// by the first call.
func New(endpoint, accessKey, secret string, opts ...Option) *Client {
	c := &Client{hc: &http.Client{Transport: NewTransport(64, true)}}
	c.endpoint, c.err = normalizeEndpoint(endpoint)
	if accessKey != "" {
		c.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(accessKey+":"+secret))
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func normalizeEndpoint(endpoint string) (string, error) {
	const op = errors.Op("api.New")
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", errors.E(op, errors.Invalid, fmt.Errorf("bad endpoint: %w", err))
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.RawQuery != "" {
		return "", errors.Errorf(op, errors.Invalid, "bad endpoint %q: want http(s)://host[:port]", endpoint)
	}
	return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"), nil
}

// Endpoint returns the gateway's base URL, normalized.
func (c *Client) Endpoint() string { return c.endpoint }

// AuthHeader returns the Authorization header the client sends ("" when
// anonymous), for load generators that build their own requests.
func (c *Client) AuthHeader() string { return c.auth }

// NewTransport returns a transport tuned for a store: up to conns idle
// connections kept per host so a pool of conns workers never redials,
// no transparent gzip (it would hide sizes and cost CPU on data that is
// rarely compressible), HTTP/1.1 only, and large socket buffers. Go's
// dialer sets TCP_NODELAY. keepAlive false dials a connection per request.
func NewTransport(conns int, keepAlive bool) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		MaxIdleConns:          max(conns, 2) * 2,
		MaxIdleConnsPerHost:   max(conns, 2),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		TLSClientConfig:       userTLS(),
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		DisableKeepAlives:     !keepAlive,
		WriteBufferSize:       64 << 10,
		ReadBufferSize:        64 << 10,
	}
}

// objectURL is the URL of ns/p with each path segment escaped; query is
// appended as is (it must already be encoded).
func (c *Client) objectURL(ns, p, query string) string {
	var b strings.Builder
	b.Grow(len(c.endpoint) + len(ns) + len(p) + len(query) + 3)
	b.WriteString(c.endpoint)
	b.WriteByte('/')
	b.WriteString(url.PathEscape(ns))
	if p != "" {
		b.WriteByte('/')
		b.WriteString(EscapePath(p))
	}
	if query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	return b.String()
}

// EscapePath escapes each '/'-separated segment of p for a URL path.
func EscapePath(p string) string {
	if !needsEscape(p) {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func needsEscape(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || c == '/'
		if !ok {
			return true
		}
	}
	return false
}

// call is one request: what to send and how to report a failure.
type call struct {
	op     errors.Op
	path   string // ns/path, for errors
	method string
	url    string
	body   io.Reader
	size   int64 // of body; -1 unknown (chunked)
	header http.Header
}

// do sends the call and returns the response if its status is 2xx. Any
// other status is decoded into an *errors.Error and the body is closed.
func (c *Client) do(ctx context.Context, k call) (*http.Response, error) {
	if c.err != nil {
		return nil, errors.E(k.op, errors.Path(k.path), c.err)
	}
	body := k.body
	if body == nil || k.size == 0 {
		body = http.NoBody
	} else {
		// The transport closes a request body it is given; the caller's
		// reader (often an *os.File) is the caller's to close.
		body = io.NopCloser(body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, k.url, body)
	if err != nil {
		return nil, errors.E(k.op, errors.Path(k.path), errors.Invalid, err)
	}
	if body != http.NoBody {
		req.ContentLength = k.size
	}
	for name, v := range k.header {
		req.Header[name] = v
	}
	if staleOK(ctx) {
		req.Header.Set(StaleOKHeader, "1")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, errors.E(k.op, errors.Path(k.path), transportKind(ctx, err), err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, decodeError(k.op, k.path, resp)
	}
	return resp, nil
}

// transportKind classifies an error that produced no response.
func transportKind(ctx context.Context, err error) errors.Kind {
	if ctx.Err() != nil {
		return errors.Canceled
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return errors.Unavailable
	}
	return errors.IO
}

// maxErrorBody bounds how much of an error response is read: enough for any
// JSON error, not enough for a misdirected request to eat memory.
const maxErrorBody = 64 << 10

// decodeError turns a non-2xx response into an *errors.Error and closes it.
func decodeError(op errors.Op, path string, resp *http.Response) error {
	defer resp.Body.Close()
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Path    string `json:"path"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = json.Unmarshal(data, &body)
	se := &ServerError{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message}
	if resp.StatusCode == http.StatusNotModified {
		se.Code = "NotModified"
	}
	if se.Code == "" && se.Message == "" && len(data) > 0 && !json.Valid(data) {
		// Not our gateway's JSON (a proxy, a wrong port): show its first line.
		line, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
		se.Message = resp.Status + ": " + truncate(line, 200)
	}
	return errors.E(op, errors.Path(path), kindOf(se.Code, resp.StatusCode), se)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// decodeJSON reads a JSON response into v and closes it.
func decodeJSON(op errors.Op, path string, resp *http.Response, v any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v); err != nil {
		return errors.E(op, errors.Path(path), errors.IO, fmt.Errorf("bad response from server: %w", err))
	}
	return nil
}
