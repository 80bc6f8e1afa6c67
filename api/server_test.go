package api_test

import (
	"context"
	"net/http"
	"testing"

	"cairn/api"
	"cairn/server"
	"cairn/server/servertest"
)

// startServer runs a real one-process store on loopback ports.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	return servertest.Start(t, nil)
}

// TestServer runs the same suite as TestFake against the real gateway, so
// the fake cannot drift from it unnoticed.
func TestServer(t *testing.T) {
	s := startServer(t)
	runSuite(t, s.URL(), servertest.Root, servertest.RootSecret)
}

// TestMetaAddr asks a real gateway where meta is, without credentials,
// and dials nothing else: the answer must be the listener meta serves on.
func TestMetaAddr(t *testing.T) {
	s := startServer(t)
	got, err := api.New(s.URL(), "", "").MetaAddr(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != s.Addr("meta") {
		t.Fatalf("MetaAddr = %q, meta listens on %q", got, s.Addr("meta"))
	}
	// Only GET and HEAD.
	req, _ := http.NewRequest(http.MethodPut, s.URL()+"/.well-known/cairn", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT /.well-known/cairn: %d, want 405", resp.StatusCode)
	}
}
