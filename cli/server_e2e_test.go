package cli_test

import (
	"strings"
	"testing"

	"cairn/server/servertest"
)

// TestCommandsServer runs every client command against a real one-process
// store, as a user would after `cairn server`.
func TestCommandsServer(t *testing.T) {
	s := servertest.Start(t, nil)
	t.Setenv("CAIRN_CA", s.CAFile())
	setCredentials(t, servertest.Root, servertest.RootSecret)
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
