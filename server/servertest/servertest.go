// Package servertest starts a real one-process store for tests of other
// packages: every role on loopback ports the kernel picks, data in a
// temporary directory, stopped when the test ends.
package servertest

import (
	"testing"

	"cairn/server"
)

// Root is the root access key and secret of every store Start starts.
const Root, RootSecret = "test-root", "test-secret-0123456789"

// Start starts a store; mod, when not nil, adjusts the config first.
func Start(tb testing.TB, mod func(*server.Config)) *server.Server {
	tb.Helper()
	cfg := server.Defaults()
	cfg.Data = tb.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.S3 = "127.0.0.1:0"
	cfg.RootUser, cfg.RootPassword = Root, RootSecret
	cfg.Pprof = true // tests read /debug/profile
	if mod != nil {
		mod(&cfg)
	}
	s, err := server.Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
