package chunk

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cairn"
	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
)

var _ cairn.Chunks = (*Remote)(nil)

// transport is shared by every Remote so that connections to a data
// server are pooled across clients of it: a read is one round trip on a
// warm connection. Go's dialer sets TCP_NODELAY, which small writes need.
var transport = &http.Transport{
	Proxy:               nil, // data servers are reached directly
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	MaxIdleConns:        4096,
	MaxIdleConnsPerHost: 256,
	IdleConnTimeout:     90 * time.Second,
	DisableCompression:  true, // needles are opaque; gzip would only cost CPU
	ForceAttemptHTTP2:   false,
	WriteBufferSize:     64 << 10,
	ReadBufferSize:      64 << 10,
}

// Remote is cairn.Chunks spoken over HTTP to one data server.
type Remote struct {
	addr string
	base string
	c    *http.Client
	// caps gives the capability of a call whose context carries none.
	caps capability.Source

	// local is the data server's local-read path, if it is on this host
	// (local.go); looked for at the first read, again localRetry after a
	// failure.
	localMu   sync.Mutex
	local     *localReader
	localNext time.Time
	probing   bool // a look is under way: readers meanwhile use HTTP
	// revoked, when set (SetRevoked), refuses a server whose certificate
	// was revoked on every answer, not only in the handshake: pooled
	// connections and the local path outlive a revocation. localPeer is
	// the certificate that offered the local path.
	revoked   *pki.Revocations
	localPeer *x509.Certificate
}

// SetRevoked makes the Remote refuse the data server once its certificate
// is on rv (which the caller keeps current, e.g. meta.FollowRevocations);
// use with a TLS configuration rv guards. Call it before use.
func (r *Remote) SetRevoked(rv *pki.Revocations) { r.revoked = rv }

// NewRemote returns a client of the data server at addr (host:port)
// over plain HTTP.
func NewRemote(addr string) *Remote { return NewRemoteTLS(addr, nil) }

// NewRemoteTLS returns a client of the data server at addr over HTTPS with
// cfg (the cluster CA to trust, and the caller's certificate if it has a
// role); cfg nil is plain HTTP.
func NewRemoteTLS(addr string, cfg *tls.Config) *Remote {
	if cfg == nil {
		return &Remote{addr: addr, base: "http://" + addr, c: &http.Client{Transport: transport}}
	}
	return &Remote{addr: addr, base: "https://" + addr, c: &http.Client{Transport: tlsTransport(cfg)}}
}

// tlsTransports pools connections per TLS configuration, as transport
// does for plain HTTP: a process has one or two (its role's, a user's).
var tlsTransports sync.Map // *tls.Config -> *http.Transport

func tlsTransport(cfg *tls.Config) *http.Transport {
	if t, ok := tlsTransports.Load(cfg); ok {
		return t.(*http.Transport)
	}
	t := transport.Clone()
	// HTTP/1.1 over TLS, as over plain TCP: a request per connection
	// keeps needles' bodies off a shared HTTP/2 stream's flow control,
	// and the pool keeps enough connections warm that few handshakes are
	// paid (those resume their session).
	t.TLSClientConfig = cfg
	t.ForceAttemptHTTP2 = false
	t.TLSHandshakeTimeout = 5 * time.Second
	actual, _ := tlsTransports.LoadOrStore(cfg, t)
	return actual.(*http.Transport)
}

// SetCaps makes src the source of the capabilities of calls whose
// context carries none (capability.NewContext). Call it before use.
func (r *Remote) SetCaps(src capability.Source) { r.caps = src }

// token is the capability a call presents for op on needle key of volume
// vid: from the context's source, else the Remote's; "" if none.
func (r *Remote) token(ctx context.Context, op capability.Op, vid uint32, key uint64) string {
	src := capability.FromContext(ctx)
	if src == nil {
		src = r.caps
	}
	if src == nil {
		return ""
	}
	return src.Token(ctx, op, vid, key)
}

// Addr is the data server's address.
func (r *Remote) Addr() string { return r.addr }

// do sends a request with capability tok (none if "").
func (r *Remote) do(ctx context.Context, op errors.Op, method, url, tok string, body []byte, hdr http.Header) (*http.Response, error) {
	return r.doWatched(ctx, op, method, url, tok, body, hdr, nil)
}

// doWatched is do with a liveness watchdog (see watch); w may be nil.
func (r *Remote) doWatched(ctx context.Context, op errors.Op, method, url, tok string, body []byte, hdr http.Header, w *watchdog) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	if w != nil && len(body) > progressMin {
		// Every read of the body by the transport means the previous
		// piece went into the socket: the server is taking it. Only for
		// bodies that may not fit the socket's buffer: the transport sends
		// the headers of a body it does not know in a write of their own,
		// which cost a small PUT a fifth of its time.
		rd = &progressReader{r: rd, w: w}
	}
	if w != nil {
		ctx = httptrace.WithClientTrace(ctx, &w.trace)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	if body != nil {
		req.ContentLength = int64(len(body))
	}
	if _, ok := rd.(*progressReader); ok {
		// Lets the transport resend on a pooled connection the server
		// had closed; NewRequest only sets it for its own reader types.
		req.GetBody = func() (io.ReadCloser, error) {
			return io.NopCloser(&progressReader{r: bytes.NewReader(body), w: w}), nil
		}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if tok != "" {
		req.Header[capability.Header] = []string{tok}
	}
	resp, err := r.c.Do(req)
	if w != nil {
		w.answered() // the body that follows is the caller's to time
	}
	if err != nil {
		if w != nil && w.silent.Load() {
			return nil, errors.E(op, errors.Unavailable, errors.Path(r.addr), fmt.Errorf("no sign of life for %v: %w", Silence, err))
		}
		if ctx.Err() != nil {
			return nil, errors.E(op, errors.Canceled, err)
		}
		return nil, errors.E(op, errors.Unavailable, errors.Path(r.addr), err)
	}
	if r.revoked != nil {
		if err := r.revoked.CheckPeer(resp.TLS); err != nil {
			resp.Body.Close()
			return nil, errors.E(op, errors.Permission, errors.Path(r.addr), err)
		}
	}
	if resp.StatusCode >= 300 {
		defer drain(resp)
		return nil, decodeError(op, resp)
	}
	return resp, nil
}

// drain reads what is left of a body so that the connection is reused.
func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// decodeError turns an error response back into the *errors.Error the
// server sent, with the same Kind and Path.
func decodeError(op errors.Op, resp *http.Response) error {
	var body errorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil || body.Error.Code == "" {
		// No body (HEAD) or not ours: classify by status alone.
		kind := errors.Other
		for k, ks := range kindStatus {
			if ks.status == resp.StatusCode {
				kind = errors.Kind(k)
				break
			}
		}
		return errors.E(op, kind, fmt.Sprintf("HTTP %s", resp.Status))
	}
	return &errors.Error{Op: op, Kind: kindOfCode(body.Error.Code), Path: errors.Path(body.Error.Path), Err: errors.New(body.Error.Message)}
}

func gen(g uint64) string { return "?gen=" + strconv.FormatUint(g, 10) }

func (r *Remote) needleURL(vid uint32, key uint64) string {
	return r.base + "/v/" + strconv.FormatUint(uint64(vid), 10) + "/" + strconv.FormatUint(key, 10)
}

// Put stores a needle; see cairn.Chunks.
func (r *Remote) Put(ctx context.Context, vid uint32, g uint64, data []byte) (uint64, error) {
	const op errors.Op = "chunk.Remote.Put"
	if data == nil {
		data = []byte{} // a non-nil body sends Content-Length: 0
	}
	ctx, w := watch(ctx)
	defer w.stop()
	tok := r.token(ctx, capability.Write, vid, 0)
	resp, err := r.doWatched(ctx, op, http.MethodPost, r.base+"/v/"+strconv.FormatUint(uint64(vid), 10)+gen(g), tok, data, nil, w)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	var out struct {
		Key uint64 `json:"key"`
		Cap string `json:"cap"` // read and delete of the new needle
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, errors.E(op, errors.IO, fmt.Errorf("decoding response: %w", err))
	}
	if k, ok := capability.FromContext(ctx).(capability.Keeper); ok && out.Cap != "" {
		k.Keep(vid, out.Key, out.Cap)
	}
	return out.Key, nil
}

// PutKey stores a needle under a key the caller chose.
func (r *Remote) PutKey(ctx context.Context, vid uint32, g, key uint64, data []byte) error {
	const op errors.Op = "chunk.Remote.PutKey"
	if data == nil {
		data = []byte{}
	}
	ctx, w := watch(ctx)
	defer w.stop()
	resp, err := r.doWatched(ctx, op, http.MethodPut, r.needleURL(vid, key)+gen(g), r.token(ctx, capability.Replicate, vid, key), data, nil, w)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// ReadTo copies a range of a needle to w; see cairn.Chunks.
func (r *Remote) ReadTo(ctx context.Context, vid uint32, key uint64, off, length int64, w io.Writer) (int64, error) {
	const op errors.Op = "chunk.Remote.ReadTo"
	path := errors.Path(fmt.Sprintf("%d/%d", vid, key))
	if off < 0 || length < 0 {
		return 0, errors.E(op, errors.Range, path, fmt.Sprintf("range [%d, +%d)", off, length))
	}
	if length == 0 {
		// An empty range is not expressible in a Range header; check the
		// needle exists and is long enough.
		resp, err := r.do(ctx, op, http.MethodHead, r.needleURL(vid, key), r.token(ctx, capability.Read, vid, key), nil, nil)
		if err != nil {
			return 0, err
		}
		drain(resp)
		if off > resp.ContentLength {
			return 0, errors.E(op, errors.Range, path, fmt.Sprintf("offset %d past the end (%d bytes)", off, resp.ContentLength))
		}
		return 0, nil
	}
	if l := r.localReader(ctx); l != nil {
		n, err := l.readTo(ctx, vid, key, off, length, w)
		down, ok := err.(errLocalDown)
		switch {
		case ok:
			r.localFailed(l, down)
		case n == 0 && errors.Is(errors.Unavailable, err):
			// an erasure-coded needle not in this server's shard (or
			// damaged there): HTTP fetches or rebuilds it
		default:
			return n, err
		}
	}
	hdr := http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", off, off+length-1)}}
	resp, err := r.do(ctx, op, http.MethodGet, r.needleURL(vid, key), r.token(ctx, capability.Read, vid, key), nil, hdr)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	// The server clamps a range that runs past the end, as HTTP says it
	// must; Chunks calls that an error.
	if resp.ContentLength != length {
		return 0, errors.E(op, errors.Range, path, fmt.Sprintf("range [%d, +%d) past the end of the needle", off, length))
	}
	n, err := io.CopyN(w, resp.Body, length)
	if err != nil {
		if ctx.Err() != nil {
			return n, errors.E(op, errors.Canceled, path, err)
		}
		// The server cuts the connection when it finds damage after it
		// has started the body.
		return n, errors.E(op, errors.IO, path, fmt.Errorf("body cut short after %d bytes (server found damage or failed): %w", n, err))
	}
	return n, nil
}

// ReadLocal reads bytes [off, off+len(p)) of a needle into p through the
// local path, verified, if the data server is on this host; local is
// false if it is not (or the path just failed), and the caller reads
// another way.
func (r *Remote) ReadLocal(ctx context.Context, vid uint32, key uint64, p []byte, off int64) (n int, local bool, err error) {
	l := r.localReader(ctx)
	if l == nil {
		return 0, false, nil
	}
	n, err = l.readAt(ctx, vid, key, p, off)
	if down, ok := err.(errLocalDown); ok {
		r.localFailed(l, down)
		return 0, false, nil
	}
	if n == 0 && errors.Is(errors.Unavailable, err) {
		return 0, false, nil // an erasure-coded needle not in a local shard: read over HTTP
	}
	return n, true, err
}

// Local says whether reads from this data server take the local path
// (its files are on this host).
func (r *Remote) Local() bool {
	r.localMu.Lock()
	defer r.localMu.Unlock()
	return r.local != nil
}

// localReader returns the data server's local-read path, asking the
// server for it (GET /local, then a connection to its socket) at the
// first read and again localRetry after it was refused or failed.
func (r *Remote) localReader(ctx context.Context) *localReader {
	r.localMu.Lock()
	if r.local != nil && r.revoked != nil && r.localPeer != nil && r.revoked.Check(r.localPeer) != nil {
		r.localMu.Unlock()
		return nil // HTTP then refuses it too
	}
	if r.local != nil || r.probing || time.Now().Before(r.localNext) {
		defer r.localMu.Unlock()
		return r.local
	}
	r.probing, r.localNext = true, time.Now().Add(localRetry)
	r.localMu.Unlock()
	l := r.probeLocal(ctx)
	r.localMu.Lock()
	defer r.localMu.Unlock()
	r.probing, r.local = false, l
	return l
}

// probeLocal asks the server for its local-read socket and connects to it;
// nil if there is none or this process cannot reach it.
func (r *Remote) probeLocal(ctx context.Context) *localReader {
	resp, err := r.do(ctx, "chunk.Remote.Local", http.MethodGet, r.base+"/local", "", nil, nil)
	if err != nil {
		return nil
	}
	if resp.TLS != nil && len(resp.TLS.VerifiedChains) > 0 && len(resp.TLS.VerifiedChains[0]) > 0 {
		r.localMu.Lock()
		r.localPeer = resp.TLS.VerifiedChains[0][0]
		r.localMu.Unlock()
	}
	var info localInfo
	err = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&info)
	drain(resp)
	if err != nil || !strings.HasPrefix(info.Socket, "@cairn-chunk-") {
		return nil
	}
	c, err := dialLocal(ctx, info.Socket)
	if err != nil {
		return nil // another host's server, or another network namespace's
	}
	l := &localReader{socket: info.Socket, files: map[uint32]*sharedFile{}}
	l.put(&localConn{c: c})
	return l
}

// localFailed gives up the local path after a failure of it; HTTP serves
// until the next look.
func (r *Remote) localFailed(l *localReader, err error) {
	r.localMu.Lock()
	if r.local == l {
		r.local = nil
		r.localNext = time.Now().Add(localRetry)
	}
	r.localMu.Unlock()
	l.close()
}

// Size returns a needle's length.
func (r *Remote) Size(ctx context.Context, vid uint32, key uint64) (int64, error) {
	resp, err := r.do(ctx, "chunk.Remote.Size", http.MethodHead, r.needleURL(vid, key), r.token(ctx, capability.Read, vid, key), nil, nil)
	if err != nil {
		return 0, err
	}
	drain(resp)
	return resp.ContentLength, nil
}

// Delete removes a needle; see cairn.Chunks.
func (r *Remote) Delete(ctx context.Context, vid uint32, g uint64, key uint64) error {
	resp, err := r.do(ctx, "chunk.Remote.Delete", http.MethodDelete, r.needleURL(vid, key)+gen(g), r.token(ctx, capability.Delete, vid, key), nil, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// CreateVolume creates a volume; see cairn.Chunks.
func (r *Remote) CreateVolume(ctx context.Context, vid uint32, g uint64) error {
	resp, err := r.do(ctx, "chunk.Remote.CreateVolume", http.MethodPut,
		r.base+"/admin/volumes/"+strconv.FormatUint(uint64(vid), 10)+gen(g), r.token(ctx, capability.Admin, vid, 0), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// Compact asks the server to compact a volume now.
func (r *Remote) Compact(ctx context.Context, vid uint32) error {
	resp, err := r.do(ctx, "chunk.Remote.Compact", http.MethodPost,
		r.base+"/admin/volumes/"+strconv.FormatUint(uint64(vid), 10)+"/compact", r.token(ctx, capability.Admin, vid, 0), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// Volumes returns the server's volume table.
func (r *Remote) Volumes(ctx context.Context) ([]VolumeInfo, error) {
	resp, err := r.do(ctx, "chunk.Remote.Volumes", http.MethodGet, r.base+"/admin/volumes", r.token(ctx, capability.Admin, capability.AnyVolume, 0), nil, nil)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	var out struct {
		Volumes []VolumeInfo `json:"volumes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, errors.E(errors.Op("chunk.Remote.Volumes"), errors.IO, err)
	}
	return out.Volumes, nil
}

// progressMin is the body size from which a write's progress is tracked
// read by read; a smaller body is in the socket at once (WroteRequest).
const progressMin = 256 << 10

// watchdog cancels a write whose server has given no sign of life (body
// bytes taken, an interim 102, the answer) for Silence; see KeepAliveEvery.
type watchdog struct {
	t      *time.Timer
	cancel context.CancelFunc
	silent atomic.Bool // the timer fired: the server is the cause
	trace  httptrace.ClientTrace
}

// watch returns a context that the watchdog cancels when the server falls
// silent; stop releases both once the answer is read.
func watch(ctx context.Context) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{cancel: cancel}
	w.trace.WroteRequest = func(httptrace.WroteRequestInfo) { w.alive() }
	w.trace.Got1xxResponse = func(int, textproto.MIMEHeader) error { w.alive(); return nil }
	w.t = time.AfterFunc(Silence, w.fire)
	return ctx, w
}

func (w *watchdog) fire()     { w.silent.Store(true); w.cancel() }
func (w *watchdog) alive()    { w.t.Reset(Silence) }
func (w *watchdog) answered() { w.t.Stop() }
func (w *watchdog) stop()     { w.t.Stop(); w.cancel() }

type progressReader struct {
	r io.Reader
	w *watchdog
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.w.alive()
	return p.r.Read(b)
}
