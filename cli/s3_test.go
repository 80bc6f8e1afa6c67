package cli_test

import (
	"strings"
	"testing"

	"cairn/server/servertest"
)

func TestS3Admin(t *testing.T) {
	s := servertest.Start(t, nil)
	setCredentials(t, servertest.Root, servertest.RootSecret)
	c := cairn{t, s.URL()}
	m := "--meta=" + s.Addr("meta")
	t.Setenv("CAIRN_CA", s.CAFile())
	c.ok("admin", "user", "create", "bob", m)
	c.fails("exists", "admin", "user", "create", "bob", m)
	c.fails("user name", "admin", "user", "create", "Bad Name", m)
	if out := c.ok("admin", "user", "ls", m); !strings.Contains(out, "bob") {
		t.Fatalf("user ls:\n%s", out)
	}
	out := c.ok("admin", "key", "create", "bob", "--grant", "logs=read", m)
	if !strings.Contains(out, "AWS_ACCESS_KEY_ID=") || !strings.Contains(out, "AWS_SECRET_ACCESS_KEY=") {
		t.Fatalf("key create:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	key := strings.TrimPrefix(lines[0], "AWS_ACCESS_KEY_ID=")
	secret := strings.TrimPrefix(lines[1], "AWS_SECRET_ACCESS_KEY=")
	c.fails("no such user", "admin", "key", "create", "nobody", m)
	c.ok("admin", "key", "grant", key, "media", "write", m)
	ls := c.ok("admin", "key", "ls", m)
	if !strings.Contains(ls, key) || !strings.Contains(ls, "logs=read,media=write") || !strings.Contains(ls, servertest.Root) {
		t.Fatalf("key ls:\n%s", ls)
	}
	if strings.Contains(ls, secret) {
		t.Fatal("key ls shows a secret")
	}
	c.ok("admin", "key", "rm", key, m)
	if ls := c.ok("admin", "key", "ls", "--user", "bob", m); strings.Contains(ls, key) {
		t.Fatalf("removed key still listed:\n%s", ls)
	}
	c.fails("root", "admin", "key", "rm", servertest.Root, m)
	c.ok("admin", "key", "create", "bob", m)
	c.ok("admin", "user", "rm", "bob", m)
	if ls := c.ok("admin", "key", "ls", m); strings.Contains(ls, "bob") {
		t.Fatalf("a removed user's keys remain:\n%s", ls)
	}
}

// TestS3Bench runs each benchmark of the S3 API briefly against a real
// store and checks that no operation failed.
func TestS3Bench(t *testing.T) {
	s := servertest.Start(t, nil)
	setCredentials(t, servertest.Root, servertest.RootSecret)
	c := cairn{t, s.URL()}
	ep := "--s3-endpoint=" + s.S3URL()
	for _, args := range [][]string{
		{"bench", "get", "--api", "s3", ep, "--size", "4KiB", "--objects", "3", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s", "--json"},
		{"bench", "get", "--api", "s3", ep, "--private", "--size", "4KiB", "--objects", "3", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s", "--json"},
		{"bench", "put", "--api", "s3", ep, "--size", "1KiB", "--concurrency", "2", "--duration", "200ms", "--warmup", "0s", "--json"},
	} {
		out := c.ok(args...)
		if !strings.Contains(out, `"errors": 0`) || strings.Contains(out, `"ops": 0,`) {
			t.Fatalf("%v:\n%s", args, out)
		}
	}
	out := c.ok("bench", "multipart", ep, "--size", "15MiB", "--parts", "3", "--disk", t.TempDir())
	if !strings.Contains(out, "multipart 15MiB in 3 parts") || !strings.Contains(out, "local disk") {
		t.Fatalf("bench multipart:\n%s", out)
	}
	c.fails("--api", "bench", "get", "--api", "ftp")
}
