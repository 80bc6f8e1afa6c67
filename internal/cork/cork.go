// Package cork gathers a response's TLS records into one socket write.
//
// crypto/tls writes every record (at most 16 KiB of plaintext) with its own
// write system call, so a 155 KiB object over HTTPS costs ten writes, each a
// trip through the loopback or NIC path and a wake-up of the reader, where
// plain HTTP sends it in one (measured: a third of the TLS server's system
// time). A corked connection keeps the records of one response in a buffer
// under the TLS layer and writes them together when the handler uncorks it:
// TCP_CORK, in user space, so that the kernel sees one large write.
//
// Only an HTTP/1.x handler corks: its response is written by the handler's
// own goroutine, so nothing else writes to the connection in between. An
// HTTP/2 connection has one writer for all streams and is left alone.
package cork

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
)

// flushAt bounds what a corked connection holds: a larger response goes out
// in writes of about this size, which the socket takes in one piece (the
// gateway sets a 1 MiB send buffer).
const flushAt = 256 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, flushAt+32<<10); return &b }}

// Conn is a connection whose writes can be held back and sent together.
type Conn struct {
	net.Conn

	mu  sync.Mutex
	buf *[]byte // non-nil while corked
}

// NetConn is the connection under c (as tls.Conn's NetConn).
func (c *Conn) NetConn() net.Conn { return c.Conn }

func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf == nil {
		return c.Conn.Write(p)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= flushAt {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *Conn) flushLocked() error {
	b := *c.buf
	*c.buf = b[:0]
	if len(b) == 0 {
		return nil
	}
	_, err := c.Conn.Write(b)
	return err
}

// cork starts holding writes back; it reports false if they already are.
func (c *Conn) cork() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.buf != nil {
		return false
	}
	c.buf = bufs.Get().(*[]byte)
	return true
}

// uncork writes what was held back and stops holding.
func (c *Conn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.flushLocked()
	bufs.Put(c.buf)
	c.buf = nil
	return err
}

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

type ctxKey struct{}

// Serve serves srv on l: plain HTTP when cfg is nil, else TLS (HTTP/2 by
// ALPN when cfg offers it) over corkable connections.
func Serve(srv *http.Server, l net.Listener, cfg *tls.Config) error {
	if cfg == nil {
		return srv.Serve(l)
	}
	srv.TLSConfig = cfg // Serve configures HTTP/2 when cfg offers "h2"
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if tc, ok := c.(*tls.Conn); ok {
			if cc, ok := tc.NetConn().(*Conn); ok {
				ctx = context.WithValue(ctx, ctxKey{}, cc)
			}
		}
		return ctx
	}
	return srv.Serve(tls.NewListener(listener{l}, cfg))
}

// Request corks the connection r arrived on, for a handler about to write
// a large body, and returns the function that uncorks it; the handler must
// call it (defer it) before it returns. It does nothing for HTTP/2 and for
// connections Serve did not make.
func Request(r *http.Request) (uncork func()) {
	cc, ok := r.Context().Value(ctxKey{}).(*Conn)
	if !ok || r.ProtoMajor != 1 || !cc.cork() {
		return func() {}
	}
	// A failed write is seen by the next write the server makes, or by the
	// reader as a short body: there is nobody left to tell here.
	return func() { cc.uncork() }
}

// Underlying peels TLS and corking off c, down to the socket.
func Underlying(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
