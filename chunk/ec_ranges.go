package chunk

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/internal/cork"

	"golang.org/x/sys/unix"
)

// Shard ranges between data servers over a stream of their own. A
// degraded read asks K-1 peers for a range of their shard each; over HTTP
// each such request cost about as much CPU as moving its 155 KiB
// (request and header parsing, the transport's goroutine hand-offs, a
// fresh file descriptor for sendfile), which held a degraded read to
// under 0.3x a replicated one. So a server opens, once per peer
// connection, an HTTP upgrade
//
//	GET /ec/ranges   Connection: Upgrade, Upgrade: cairn-ec-ranges
//
// authorised as the HTTP routes are (an admin capability for every
// volume, or a meta or data-server identity), and then sends on it
// fixed-size requests, one at a time, each answered by a fixed-size
// header and the bytes:
//
//	request  20 bytes: vid u32, shard u32, off u64, n u32 (little-endian)
//	answer   6 bytes: status u8 (0 ok), kind u8 (errors.Kind), len u32;
//	         then len bytes: the range (ok) or the error's message
//
// The server sends a range with sendfile at an explicit offset (no file
// position, so one descriptor serves every stream) and the header with
// MSG_MORE, so that both leave in the same segments. Streams are kept per
// peer and reused; a stream whose capability has expired is closed by
// the server before it reads the next request, and the client then opens
// another. A peer that does not take the upgrade (an older server, an
// HTTP/2 connection) is asked over GET /ec/{vid}/shards/{i} instead, and
// not offered the upgrade again for rangesRetry.

const rangesProto = "cairn-ec-ranges"

const (
	rangeReqSize  = 20
	rangeHdrSize  = 6
	rangeMax      = 64 << 20        // as GET /ec/{vid}/shards/{i}
	rangesIdle    = 2 * time.Minute // a stream without a request is closed
	rangesWrite   = time.Minute     // to send one answer
	rangesOpen    = 10 * time.Second
	rangesRetry   = time.Minute
	rangesIdleMax = 64 // idle streams kept per peer
)

// handleRanges takes a stream of shard range requests (see above).
func (s *Store) handleRanges(w http.ResponseWriter, r *http.Request) {
	const op errors.Op = "chunk.http.ranges"
	cp, err := s.authorize(r, need{capability.Admin, false, false})
	if err != nil {
		writeError(w, r, errors.E(op, errors.Path(r.URL.Path), err))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), rangesProto) {
		writeError(w, r, errors.E(op, errors.Invalid, "want Upgrade: "+rangesProto))
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, r, errors.E(op, errors.Unavailable, err))
		return
	}
	if !s.ec.trackStream(c) {
		c.Close() // the store is closed
		return
	}
	defer s.ec.untrackStream(c)
	defer c.Close()
	c.SetDeadline(time.Time{}) // the server's deadlines were for HTTP
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+rangesProto+"\r\n\r\n"); err != nil {
		return
	}
	// sendfile only on a plain connection: cork.Underlying would see
	// through TLS too.
	tc, _ := c.(*tls.Conn)
	var tcp *net.TCPConn
	if tc == nil {
		tcp, _ = cork.Underlying(c).(*net.TCPConn)
	}
	var req [rangeReqSize]byte
	for {
		c.SetReadDeadline(time.Now().Add(rangesIdle))
		if _, err := io.ReadFull(brw.Reader, req[:]); err != nil {
			return
		}
		// The stream lives as long as what authorised it.
		if !cp.Expires.IsZero() && time.Now().After(cp.Expires) {
			return
		}
		if tc != nil {
			st := tc.ConnectionState()
			if s.cfg.Revoked.CheckPeer(&st) != nil {
				return
			}
		}
		// A reader that stops reading does not hold this goroutine.
		c.SetWriteDeadline(time.Now().Add(rangesWrite))
		vid := binary.LittleEndian.Uint32(req[0:])
		idx := binary.LittleEndian.Uint32(req[4:])
		off := int64(binary.LittleEndian.Uint64(req[8:]))
		n := int64(binary.LittleEndian.Uint32(req[16:]))
		s.ec.rangesServed.Add(1)        // before the answer: a test reads it after
		done := s.ops.Start("ec-range") // cairn_chunk_* metrics, op="ec-range"
		answered, err := s.serveRange(c, tcp, vid, idx, off, n)
		// An error answered is an error of the op, though the stream
		// goes on: a peer asked for a shard it lost is what the metric
		// is for.
		done(cmp.Or(err, answered))
		if err != nil {
			return
		}
	}
}

// serveRange answers one request of a ranges stream. answered is the
// error sent as the answer (the stream is still good); err leaves the
// stream in an unknown state: the caller closes it.
func (s *Store) serveRange(c net.Conn, tcp *net.TCPConn, vid, idx uint32, off, n int64) (answered, err error) {
	var ls *localShard
	s.ec.mu.RLock()
	if ev := s.ec.vols[vid]; ev != nil && idx < 256 {
		ls = ev.shards[int(idx)]
	}
	s.ec.mu.RUnlock()
	fail := func(e error) (error, error) { return e, writeRangeError(c, e) }
	var at int64
	switch {
	case off < 0 || n > rangeMax:
		return fail(errors.E(errors.Invalid, "bad off or n"))
	case ls == nil:
		return fail(errors.E(errors.NotExist, volPath(vid), fmt.Sprintf("no shard %d here", idx)))
	default:
		if at, err = ls.s.FileOffset(off, n); err != nil {
			return fail(err)
		}
	}
	var hdr [rangeHdrSize]byte
	binary.LittleEndian.PutUint32(hdr[2:], uint32(n))
	if tcp != nil {
		sent, err := sendRange(tcp, ls, hdr[:], at, n)
		if sent == 0 && err != nil {
			return fail(errors.E(errors.IO, volPath(vid), err))
		}
		return nil, err
	}
	bp := getECBuf(rangeHdrSize + n)
	defer putECBuf(bp)
	b := *bp
	copy(b, hdr[:])
	if _, err := ls.f.ReadAt(b[rangeHdrSize:], at); err != nil {
		return fail(errors.E(errors.IO, volPath(vid), err))
	}
	_, err = c.Write(b)
	return nil, err
}

// sendRange writes hdr, then n bytes of ls's file from at, to the socket:
// the header with MSG_MORE and the bytes with sendfile, so that they go
// out together, and no copy is made in this process. sent is how many
// bytes went out (0: the caller may still answer with an error).
func sendRange(tcp *net.TCPConn, ls *localShard, hdr []byte, at, n int64) (sent int64, err error) {
	fc, err := ls.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	sc, err := tcp.SyscallConn()
	if err != nil {
		return 0, err
	}
	var werr error
	// Control keeps the shard's descriptor open meanwhile (a drop may
	// close the file).
	cerr := fc.Control(func(ffd uintptr) {
		h := hdr
		pos, left := at, n
		werr = sc.Write(func(sfd uintptr) bool {
			for len(h) > 0 {
				w, err := syscall.SendmsgN(int(sfd), h, nil, nil, syscall.MSG_MORE)
				if err == syscall.EAGAIN {
					return false
				}
				if err != nil {
					werr = err
					return true
				}
				h = h[w:]
				sent += int64(w)
			}
			for left > 0 {
				w, err := syscall.Sendfile(int(sfd), int(ffd), &pos, int(min(left, 1<<30)))
				if err == syscall.EAGAIN {
					return false
				}
				if err == nil && w == 0 {
					err = io.ErrUnexpectedEOF // the file is shorter than its layout
				}
				if err != nil {
					werr = err
					return true
				}
				left -= int64(w)
				sent += int64(w)
			}
			return true
		})
	})
	if cerr != nil {
		return sent, cerr
	}
	return sent, werr
}

func writeRangeError(c net.Conn, err error) error {
	msg := err.Error()
	var e *errors.Error
	if errors.As(err, &e) {
		msg = e.Message()
	}
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	b := make([]byte, rangeHdrSize, rangeHdrSize+len(msg))
	b[0], b[1] = 1, byte(errors.KindOf(err))
	binary.LittleEndian.PutUint32(b[2:], uint32(len(msg)))
	_, werr := c.Write(append(b, msg...))
	return werr
}

// trackStream records a ranges stream, so that Close ends it (the HTTP
// server no longer knows of a hijacked connection).
func (e *ecState) trackStream(c net.Conn) bool {
	e.streamsMu.Lock()
	defer e.streamsMu.Unlock()
	if e.streamsClosed {
		return false
	}
	if e.streams == nil {
		e.streams = map[net.Conn]struct{}{}
	}
	e.streams[c] = struct{}{}
	return true
}

func (e *ecState) untrackStream(c net.Conn) {
	e.streamsMu.Lock()
	delete(e.streams, c)
	e.streamsMu.Unlock()
}

// closeStreams ends every ranges stream served here, refuses new ones,
// and closes the idle streams to peers.
func (e *ecState) closeStreams() {
	e.streamsMu.Lock()
	e.streamsClosed = true
	for c := range e.streams {
		c.Close()
	}
	e.streamsMu.Unlock()
	e.ranges.Range(func(_, p any) bool {
		p.(*rangePool).close()
		return true
	})
}

// rangePool is the ranges streams to one peer.
type rangePool struct {
	r       *Remote
	mu      sync.Mutex
	idle    []*rangeConn
	closed  bool
	refused atomic.Int64 // Unix ns until which the peer is asked over HTTP
	opened  atomic.Int64 // streams opened
}

// rangeConn is a ranges stream to a peer.
type rangeConn struct {
	io.ReadWriteCloser
	tls *tls.ConnectionState // of the upgrade; nil over plain HTTP
	// raw is the TCP connection under a plain stream: an answer's header
	// and bytes are read in one readv.
	raw syscall.RawConn
}

// rangeStreams is the pool of streams to the peer at addr.
func (s *Store) rangeStreams(addr string) *rangePool {
	if p, ok := s.ec.ranges.Load(addr); ok {
		return p.(*rangePool)
	}
	p, _ := s.ec.ranges.LoadOrStore(addr, &rangePool{r: s.ecPeer(addr)})
	return p.(*rangePool)
}

// errNoStream says the peer does not take a ranges stream now.
var errNoStream = errors.E(errors.Unavailable, "no ranges stream")

// ReadShard reads len(p) cell bytes of shard i of volume vid from off on
// the peer, over a ranges stream, or over HTTP when the peer takes none.
func (p *rangePool) ReadShard(ctx context.Context, vid uint32, i int, b []byte, off int64) (int, error) {
	if time.Now().UnixNano() >= p.refused.Load() {
		n, err := p.read(ctx, vid, i, b, off)
		if err != errNoStream {
			return n, err
		}
	}
	return p.r.ReadShard(ctx, vid, i, b, off)
}

func (p *rangePool) read(ctx context.Context, vid uint32, i int, b []byte, off int64) (int, error) {
	// A pooled stream the server has closed meanwhile (idle, or its
	// capability expired, or the server restarted) fails before any byte
	// of an answer: the read goes on with the next pooled stream, at
	// worst with a new one.
	for {
		wait, err := p.send(ctx, vid, i, b, off)
		if err != nil {
			return 0, err
		}
		n, retry, err := wait()
		if !retry {
			return n, err
		}
	}
}

// Ask sends the request for len(b) bytes of shard i of volume vid at off
// on a stream, and returns what reads its answer into b (ec.Asker): a
// rebuild asks its K peers at once and reads their answers in turn.
// A peer that takes no stream is read over HTTP in a goroutine of its own.
func (p *rangePool) Ask(ctx context.Context, vid uint32, i int, b []byte, off int64) func() error {
	if time.Now().UnixNano() >= p.refused.Load() {
		wait, err := p.send(ctx, vid, i, b, off)
		if err == nil {
			return func() error {
				_, retry, err := wait()
				if retry {
					_, err = p.ReadShard(ctx, vid, i, b, off)
				}
				return err
			}
		}
		if err != errNoStream {
			return func() error { return err }
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.ReadShard(ctx, vid, i, b, off)
		done <- err
	}()
	return func() error { return <-done }
}

// send writes one request on a stream and returns what reads its answer
// into b. retry says that a pooled stream failed before any byte of the
// answer (closed by the server meanwhile): the request may be sent again.
func (p *rangePool) send(ctx context.Context, vid uint32, i int, b []byte, off int64) (wait func() (n int, retry bool, err error), err error) {
	const op errors.Op = "chunk.Remote.ReadShard"
	if len(b) > rangeMax {
		return nil, errNoStream
	}
	var req [rangeReqSize]byte
	binary.LittleEndian.PutUint32(req[0:], vid)
	binary.LittleEndian.PutUint32(req[4:], uint32(i))
	binary.LittleEndian.PutUint64(req[8:], uint64(off))
	binary.LittleEndian.PutUint32(req[16:], uint32(len(b)))
	c, pooled, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	if p.r.revoked != nil {
		// As every HTTP answer is checked: a stream outlives the
		// revocation of the certificate it was opened to.
		if err := p.r.revoked.CheckPeer(c.tls); err != nil {
			c.Close()
			return nil, errors.E(op, errors.Permission, errors.Path(p.r.addr), err)
		}
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	_, werr := c.Write(req[:])
	return func() (int, bool, error) {
		n, got := 0, 0
		err := werr
		if err == nil {
			n, got, err = c.answer(b)
		}
		if !stop() {
			c.Close()
			return n, false, errors.E(op, errors.Canceled, errors.Path(p.r.addr), ctx.Err())
		}
		if err == nil {
			p.put(c)
			return n, false, nil
		}
		if e, ok := err.(*errors.Error); ok && e.Op == "" {
			// The server's answer: an error, the stream still good.
			p.put(c)
			e.Op, e.Path = op, errors.Path(p.r.addr)
			return 0, false, e
		}
		c.Close()
		if got == 0 && pooled {
			return 0, true, nil
		}
		return n, false, errors.E(op, errors.IO, errors.Path(p.r.addr), err)
	}, nil
}

// answer reads the answer to the request sent on c into b (as
// readAnswer), its header and bytes in one readv on a plain stream.
func (c *rangeConn) answer(b []byte) (n, got int, err error) {
	if c.raw == nil {
		return readAnswer(c, b)
	}
	var hdr [rangeHdrSize]byte
	iov := [2][]byte{hdr[:], b}
	var rerr error
	err = c.raw.Read(func(fd uintptr) bool {
		for {
			h := min(got, rangeHdrSize)
			bufs := iov[:]
			if h < rangeHdrSize {
				bufs[0] = hdr[h:]
			} else {
				bufs = bufs[1:]
			}
			bufs[len(bufs)-1] = b[n:]
			r, err := unix.Readv(int(fd), bufs)
			if err == syscall.EAGAIN {
				return false
			}
			if err == syscall.EINTR {
				continue
			}
			if err == nil && r == 0 {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				rerr = err
				return true
			}
			got += r
			n = max(0, got-rangeHdrSize)
			// Done with the whole answer, or with the header of an error
			// answer (its message, read into b so far, is finished below).
			if got >= rangeHdrSize && (hdr[0] != 0 || n == len(b)) {
				return true
			}
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return n, got, err
	}
	size := int(binary.LittleEndian.Uint32(hdr[2:]))
	if hdr[0] == 0 {
		if size != len(b) {
			return 0, got, fmt.Errorf("ranges stream: answer of %d bytes to a request of %d", size, len(b))
		}
		return n, got, nil
	}
	// An error answer: its message began in b.
	if size > 4096 || n > size {
		return 0, got, fmt.Errorf("ranges stream: error answer of %d bytes", size)
	}
	msg := make([]byte, size)
	copy(msg, b[:n])
	if _, err := io.ReadFull(c, msg[n:]); err != nil {
		return 0, got, err
	}
	return 0, got, &errors.Error{Kind: errors.Kind(hdr[1]), Err: errors.New(string(msg))}
}

// rangeExchange sends one request on c and reads its answer into b (see
// readAnswer).
func rangeExchange(c io.ReadWriter, req, b []byte) (n, got int, err error) {
	if _, err := c.Write(req); err != nil {
		return 0, 0, err
	}
	return readAnswer(c, b)
}

// readAnswer reads the answer to a request of len(b) bytes into b. got is
// how many bytes of the answer arrived; an answer that is an error comes
// back as an *errors.Error without an Op.
func readAnswer(c io.Reader, b []byte) (n, got int, err error) {
	var hdr [rangeHdrSize]byte
	if got, err = io.ReadFull(c, hdr[:]); err != nil {
		return 0, got, err
	}
	size := int(binary.LittleEndian.Uint32(hdr[2:]))
	if hdr[0] != 0 {
		if size > 4096 {
			return 0, got, fmt.Errorf("ranges stream: error answer of %d bytes", size)
		}
		msg := make([]byte, size)
		if _, err := io.ReadFull(c, msg); err != nil {
			return 0, got, err
		}
		return 0, got, &errors.Error{Kind: errors.Kind(hdr[1]), Err: errors.New(string(msg))}
	}
	if size != len(b) {
		return 0, got, fmt.Errorf("ranges stream: answer of %d bytes to a request of %d", size, len(b))
	}
	n, err = io.ReadFull(c, b)
	return n, got + n, err
}

// get takes an idle stream, or opens one. pooled says which.
func (p *rangePool) get(ctx context.Context) (*rangeConn, bool, error) {
	p.mu.Lock()
	if k := len(p.idle); k > 0 {
		c := p.idle[k-1]
		p.idle = p.idle[:k-1]
		p.mu.Unlock()
		return c, true, nil
	}
	p.mu.Unlock()
	c, answered, err := p.r.openRanges(ctx)
	if err == nil {
		p.opened.Add(1)
	}
	if answered {
		// The server is there but takes no stream: HTTP for a while.
		p.refused.Store(time.Now().Add(rangesRetry).UnixNano())
		return nil, false, errNoStream
	}
	return c, false, err
}

func (p *rangePool) put(c *rangeConn) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < rangesIdleMax {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// close closes the idle streams, and any put back later.
func (p *rangePool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}

// openRanges asks the data server for a ranges stream. answered says
// that the server answered without one.
func (r *Remote) openRanges(ctx context.Context) (c *rangeConn, answered bool, err error) {
	const op errors.Op = "chunk.Remote.openRanges"
	// The upgrade is bounded by its own timeout and the caller's context,
	// but the stream, once made, outlives both: it is the caller's
	// connection then (net/http hands a 101's connection over).
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rangesOpen)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	req, err := http.NewRequestWithContext(uctx, http.MethodGet, r.base+"/ec/ranges", nil)
	if err != nil {
		return nil, false, errors.E(op, errors.Invalid, err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", rangesProto)
	// The connection the stream is made on: over plain TCP, answers are
	// read from it directly (the server sends nothing past the 101 before
	// a request, so the transport has nothing of the stream buffered).
	var conn net.Conn
	req = req.WithContext(httptrace.WithClientTrace(uctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn },
	}))
	if tok := r.token(ctx, capability.Admin, capability.AnyVolume, 0); tok != "" {
		req.Header[capability.Header] = []string{tok}
	}
	resp, err := r.c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, errors.E(op, errors.Canceled, ctx.Err())
		}
		return nil, false, errors.E(op, errors.Unavailable, errors.Path(r.addr), err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer drain(resp)
		return nil, true, decodeError(op, resp)
	}
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, true, errors.E(op, errors.Unavailable, "upgrade answered without a stream")
	}
	rc := &rangeConn{ReadWriteCloser: rw, tls: resp.TLS}
	if tcp, ok := conn.(*net.TCPConn); ok && resp.TLS == nil {
		rc.raw, _ = tcp.SyscallConn()
	}
	return rc, false, nil
}
