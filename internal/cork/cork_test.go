package cork

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"cairn/pki/pkitest"
)

// counting counts the writes that reach the socket.
type counting struct {
	net.Listener
	writes *atomic.Int64
}

func (l counting) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countConn{c, l.writes}, nil
}

type countConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// server serves body on /cork (corked) and /plain over TLS and returns
// its URL, a client trusting it, and the socket write counter.
func server(t testing.TB, body []byte, protos ...string) (string, *http.Client, *atomic.Int64) {
	t.Helper()
	ca := pkitest.NewCA(t)
	cfg := ca.ServerConfig(t)
	cfg.NextProtos = protos
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	writes := new(atomic.Int64)
	mux := http.NewServeMux()
	mux.HandleFunc("/cork", func(w http.ResponseWriter, r *http.Request) {
		defer Request(r)()
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	srv := &http.Server{Handler: mux}
	go Serve(srv, counting{l, writes}, cfg)
	t.Cleanup(func() { srv.Close() })
	tr := &http.Transport{TLSClientConfig: ca.ClientConfig(), ForceAttemptHTTP2: len(protos) > 0 && protos[0] == "h2"}
	return "https://" + l.Addr().String(), &http.Client{Transport: tr}, writes
}

func get(t testing.TB, c *http.Client, url string) ([]byte, *http.Response) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, resp
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
}

// A corked response reaches the socket in one write where crypto/tls alone
// makes one per 16 KiB record, and the bytes are the same.
func TestCorkGathersRecords(t *testing.T) {
	body := payload(155 << 10)
	url, c, writes := server(t, body, "http/1.1")
	get(t, c, url+"/plain") // handshake and connection set up
	for _, tc := range []struct {
		path     string
		min, max int64
	}{{"/plain", 10, 1 << 20}, {"/cork", 1, 2}} {
		before := writes.Load()
		b, _ := get(t, c, url+tc.path)
		if !bytes.Equal(b, body) {
			t.Fatalf("%s: body differs (%d bytes)", tc.path, len(b))
		}
		if n := writes.Load() - before; n < tc.min || n > tc.max {
			t.Errorf("%s: %d socket writes, want %d..%d", tc.path, n, tc.min, tc.max)
		}
	}
}

// A body larger than the cork's buffer goes out in pieces of about
// flushAt, intact.
func TestCorkLargeBody(t *testing.T) {
	body := payload(3<<20 + 123)
	url, c, writes := server(t, body, "http/1.1")
	get(t, c, url+"/plain")
	before := writes.Load()
	b, _ := get(t, c, url+"/cork")
	if !bytes.Equal(b, body) {
		t.Fatalf("body differs (%d bytes)", len(b))
	}
	if n := writes.Load() - before; n > int64(len(body)/flushAt+2) {
		t.Errorf("%d socket writes for %d bytes", n, len(body))
	}
}

// HTTP/2 connections are served as before: one writer for all streams,
// never corked.
func TestCorkLeavesHTTP2(t *testing.T) {
	body := payload(155 << 10)
	url, c, _ := server(t, body, "h2", "http/1.1")
	b, resp := get(t, c, url+"/cork")
	if resp.ProtoMajor != 2 {
		t.Fatalf("negotiated %s, want HTTP/2", resp.Proto)
	}
	if !bytes.Equal(b, body) {
		t.Fatal("body differs")
	}
}

func BenchmarkTLSGet155K(b *testing.B) {
	body := payload(155 << 10)
	for _, path := range []string{"/plain", "/cork"} {
		b.Run(path[1:], func(b *testing.B) {
			url, c, _ := server(b, body, "http/1.1")
			b.SetBytes(int64(len(body)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(url + path)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
