package api_test

import (
	"testing"

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
