package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cairn/api/apitest"
	"cairn/cli"
)

// cairn runs the cairn command in-process against endpoint.
type cairn struct {
	t        *testing.T
	endpoint string
}

func (c cairn) run(stdin string, args ...string) (string, error) {
	c.t.Helper()
	root := cli.Root()
	var out, errb bytes.Buffer
	root.SetArgs(append([]string{"--endpoint", c.endpoint}, args...))
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetIn(strings.NewReader(stdin))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// ok runs a command that must succeed and returns its stdout.
func (c cairn) ok(args ...string) string {
	c.t.Helper()
	out, err := c.run("", args...)
	if err != nil {
		c.t.Fatalf("cairn %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// fails runs a command that must fail with a message containing want.
func (c cairn) fails(want string, args ...string) {
	c.t.Helper()
	_, err := c.run("", args...)
	if err == nil || !strings.Contains(cli.ErrorLine(err), want) {
		c.t.Fatalf("cairn %s: error %v; want one containing %q", strings.Join(args, " "), err, want)
	}
}

func setCredentials(t *testing.T, key, secret string) {
	t.Chdir(t.TempDir()) // no ./data/root.credentials but ours
	t.Setenv("CAIRN_ACCESS_KEY", key)
	t.Setenv("CAIRN_SECRET_KEY", secret)
}

func TestCommandsFake(t *testing.T) {
	srv := apitest.NewServer("root", "pw")
	defer srv.Close()
	setCredentials(t, "root", "pw")
	runCommands(t, cairn{t, srv.URL})
}

// runCommands walks through every client command against a gateway.
func runCommands(t *testing.T, c cairn) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c.ok("ns", "create", "cli-test")
	c.fails("already exists", "ns", "create", "cli-test")
	if out := c.ok("ns", "ls", "-l"); !strings.Contains(out, "private") || !strings.Contains(out, "cli-test") {
		t.Fatalf("ns ls -l:\n%s", out)
	}
	// Storage classes: an erasure-coded namespace shows its class; an
	// unknown class is refused.
	c.ok("ns", "create", "cli-cold", "--class", "ec-4+2")
	c.fails("unknown storage class", "ns", "create", "cli-bad", "--class", "no-such-class")
	if out := c.ok("ns", "ls", "-l"); !strings.Contains(out, "ec-4+2") || !strings.Contains(out, "replicated") {
		t.Fatalf("ns ls -l does not show the classes:\n%s", out)
	}

	// put: to a name, into a directory, from stdin, a tree.
	c.ok("put", write("a.txt", "hello"), "cli-test/docs/a.txt")
	c.ok("put", write("b.txt", "bee"), "cli-test/docs/")
	if _, err := c.run("from stdin", "put", "-", "cli-test/docs/stdin.txt"); err != nil {
		t.Fatal(err)
	}
	write("tree/x/1.txt", "one")
	write("tree/x/2.txt", "two")
	write("tree/3.txt", "three")
	os.MkdirAll(filepath.Join(dir, "tree/empty"), 0o755)
	c.ok("put", "-r", "-j", "2", filepath.Join(dir, "tree"), "cli-test/")
	c.fails("is a directory (use put -r)", "put", filepath.Join(dir, "tree"), "cli-test/t")

	if got, want := c.ok("ls", "cli-test"), "docs/\ntree/\n"; got != want {
		t.Fatalf("ls cli-test = %q, want %q", got, want)
	}
	if got, want := c.ok("ls", "cli-test/tree"), "3.txt\nempty/\nx/\n"; got != want {
		t.Fatalf("ls cli-test/tree = %q, want %q", got, want)
	}
	if got, want := c.ok("ls", "-R", "cli-test/tree/"), "tree/3.txt\ntree/empty/\ntree/x/1.txt\ntree/x/2.txt\n"; got != want {
		t.Fatalf("ls -R = %q, want %q", got, want)
	}
	if got := c.ok("ls", "cli-test/docs/s"); got != "stdin.txt\n" {
		t.Fatalf("ls of a prefix = %q", got)
	}
	long := c.ok("ls", "-l", "cli-test/docs/a.txt")
	if f := strings.Fields(long); len(f) != 5 || f[0] != "5" || f[4] != "docs/a.txt" {
		t.Fatalf("ls -l of a file = %q", long)
	}
	c.fails("does not exist", "ls", "cli-test/nothing")

	if out := c.ok("cat", "cli-test/docs/a.txt", "cli-test/docs/b.txt", "cli-test/docs/stdin.txt"); out != "hellobeefrom stdin" {
		t.Fatalf("cat = %q", out)
	}
	st := c.ok("stat", "cli-test/docs/a.txt")
	for _, want := range []string{"type:", "file", "size:", "5 (5B)", "etag:"} {
		if !strings.Contains(st, want) {
			t.Fatalf("stat lacks %q:\n%s", want, st)
		}
	}
	if st := c.ok("stat", "cli-test/tree/x"); !strings.Contains(st, "directory") {
		t.Fatalf("stat of a directory:\n%s", st)
	}

	// get: default name in the current directory, into a directory, stdout.
	c.ok("get", "cli-test/docs/a.txt")
	if b, err := os.ReadFile("a.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("get to cwd: %q, %v", b, err)
	}
	c.ok("get", "cli-test/docs/b.txt", dir)
	if b, _ := os.ReadFile(filepath.Join(dir, "b.txt")); string(b) != "bee" {
		t.Fatalf("get into a directory: %q", b)
	}
	if out := c.ok("get", "cli-test/docs/b.txt", "-"); out != "bee" {
		t.Fatalf("get to stdout: %q", out)
	}
	c.fails("cli-test/docs/missing", "get", "cli-test/docs/missing")
	if _, err := os.Stat("missing"); err == nil {
		t.Fatal("a failed get left a file behind")
	}

	// append, mv, rm.
	c.ok("append", write("more.txt", " world"), "cli-test/docs/a.txt")
	if _, err := c.run("!", "append", "-", "cli-test/docs/a.txt"); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("cat", "cli-test/docs/a.txt"); out != "hello world!" {
		t.Fatalf("after append: %q", out)
	}
	c.ok("mv", "cli-test/docs/a.txt", "cli-test/docs/c.txt")
	c.ok("mv", "cli-test/docs/c.txt", "cli-test/tree/")
	if out := c.ok("cat", "cli-test/tree/c.txt"); out != "hello world!" {
		t.Fatalf("after mv: %q", out)
	}
	c.fails("within one namespace", "mv", "cli-test/tree/c.txt", "other/c.txt")
	c.fails("not empty", "rm", "cli-test/tree")
	c.ok("rm", "cli-test/docs/b.txt", "cli-test/docs/stdin.txt")
	c.ok("rm", "-r", "cli-test/tree")
	c.fails("does not exist", "stat", "cli-test/tree/x/1.txt")
	c.fails("ns rm cli-test", "rm", "cli-test/")

	// Visibility, then removal of the namespace.
	c.ok("ns", "set-visibility", "cli-test", "public")
	if out := c.ok("ls", "-l"); !strings.Contains(out, "public") {
		t.Fatalf("ls -l after set-visibility:\n%s", out)
	}
	c.fails("public or private", "ns", "set-visibility", "cli-test", "world")
	c.ok("rm", "-r", "cli-test/docs")
	c.ok("ns", "rm", "cli-test")
	if out := c.ok("ls"); strings.Contains(out, "cli-test") {
		t.Fatalf("ls after ns rm:\n%s", out)
	}
}

func TestArgumentErrors(t *testing.T) {
	// Nothing listens at this endpoint: every error below must come from
	// checking the arguments, before any request.
	c := cairn{t, "http://127.0.0.1:1"}
	setCredentials(t, "k", "s")
	t.Setenv("CAIRN_META", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "usage: cairn get ns/path [DST]"},
		{[]string{"get", "Bad/x"}, `bad remote path "Bad/x"`},
		{[]string{"get", "photos"}, "names a namespace or directory"},
		{[]string{"put", "x", "/tmp/y"}, "looks like a local path"},
		{[]string{"cat", "ns1/a//b"}, "empty component"},
		{[]string{"rm", "ns1/../x"}, "'..'"},
		{[]string{"ns", "create", "A"}, `bad namespace name "A"`},
		{[]string{"bench", "get", "--size", "12 apples"}, "--size: "},
		{[]string{"put", "--bogus"}, "unknown flag: --bogus (see 'cairn put --help')"},
		{[]string{"stat", "ns1/x"}, "is the gateway running?"},
		// An explicit endpoint that does not answer is an error, not a
		// silent fall back to a meta at the default address.
		{[]string{"mount", t.TempDir()}, "finding meta through the gateway at http://127.0.0.1:1 (or give --meta)"},
	} {
		c.fails(tc.want, tc.args...)
	}
}
