package cli_test

import (
	"strings"
	"testing"

	"cairn/server"
)

// TestCommandsServer runs every client command against a real one-process
// store, as a user would after `cairn server`.
func TestCommandsServer(t *testing.T) {
	cfg := server.Defaults()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.RootUser, cfg.RootPassword = "cli-root", "cli-secret-0123456789"
	s, err := server.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	setCredentials(t, cfg.RootUser, cfg.RootPassword)
	c := cairn{t, s.URL()}
	runCommands(t, c)

	// The profile of the server that just served all that.
	out := c.ok("admin", "profile", "--admin", s.Addr("admin"))
	for _, want := range []string{"ROLE", "OPERATION", "P99", "gateway"} {
		if !strings.Contains(out, want) {
			t.Fatalf("admin profile lacks %q:\n%s", want, out)
		}
	}
	// A short benchmark of each kind, end to end.
	for _, args := range [][]string{
		{"bench", "get", "--size", "4KiB", "--objects", "5", "--concurrency", "1,2", "--duration", "200ms", "--warmup", "0s"},
		{"bench", "put", "--size", "1KiB", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s"},
		{"bench", "stream", "--size", "3MiB"},
		{"bench", "meta", "--meta", s.Addr("meta"), "--concurrency", "4", "--duration", "200ms", "--warmup", "0s"},
	} {
		out := c.ok(args...)
		if !strings.Contains(out, "MB/s") && !strings.Contains(out, "OPS/S") {
			t.Fatalf("%v:\n%s", args, out)
		}
		t.Logf("%v:\n%s", args, out)
	}
}
