package api_test

import (
	"testing"

	"cairn/server"
)

// startServer runs a real one-process store on loopback ports.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	cfg := server.Defaults()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.RootUser, cfg.RootPassword = "suite-root", "suite-secret-0123456789"
	s, err := server.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestServer runs the same suite as TestFake against the real gateway, so
// the fake cannot drift from it unnoticed.
func TestServer(t *testing.T) {
	s := startServer(t)
	runSuite(t, s.URL(), "suite-root", "suite-secret-0123456789")
}
