package chunk

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"cairn/errors"
)

// TestWriteLiveness: a write to a server that takes the connection and
// then says nothing fails as Unavailable, naming the server, about Silence
// later (not at the caller's deadline); a write that a live server takes
// longer than Silence to make durable, saying so with interim 102s, waits.
func TestWriteLiveness(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out Silence several times over: not in the -short tier")
	}
	t.Run("silent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var mu sync.Mutex
		var conns []net.Conn
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c) // read nothing, answer nothing
				mu.Unlock()
			}
		}()
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		}()
		r := NewRemote(ln.Addr().String())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, size := range []int{4 << 10, 32 << 20} { // fits a socket buffer; does not
			start := time.Now()
			_, err := r.Put(ctx, 1, 1, make([]byte, size))
			took := time.Since(start)
			if !errors.Is(errors.Unavailable, err) || string(errors.PathOf(err)) != r.Addr() {
				t.Fatalf("%d bytes to a silent server: %v (want Unavailable naming %s)", size, err, r.Addr())
			}
			if took < Silence || took > 10*time.Second {
				t.Errorf("%d bytes to a silent server failed after %v (want about %v)", size, took, Silence)
			}
			t.Logf("%d bytes: %v after %v", size, err, took)
		}
	})
	t.Run("slow", func(t *testing.T) {
		const wait = 3 * Silence
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			ka := startKeepAlive(w)
			time.Sleep(wait) // a slow fdatasync, or a slow replica
			ka.stop()
			fmt.Fprintf(w, "{\"key\":42}\n")
		}))
		defer ts.Close()
		r := NewRemote(ts.Listener.Addr().String())
		start := time.Now()
		key, err := r.Put(context.Background(), 1, 1, []byte("hello"))
		if err != nil || key != 42 {
			t.Fatalf("slow but live server: key %d, %v", key, err)
		}
		if took := time.Since(start); took < wait {
			t.Fatalf("answered after %v, before the server did", took)
		}
		if err := r.PutKey(context.Background(), 1, 1, 42, []byte("hello")); err != nil {
			t.Fatalf("PutKey to a slow but live server: %v", err)
		}
	})
}
