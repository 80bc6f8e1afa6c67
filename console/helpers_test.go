package console_test

import (
	"net"
	"net/url"
	"testing"
)

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// serveConns hands each connection l accepts to serve, until the test
// ends and closes l.
func serveConns(t testing.TB, l net.Listener, serve func(net.Conn)) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
}
