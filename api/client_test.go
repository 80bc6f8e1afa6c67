package api_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"cairn/api"
	"cairn/api/apitest"
	"cairn/errors"
)

func TestFake(t *testing.T) {
	srv := apitest.NewServer("root", "secret")
	defer srv.Close()
	runSuite(t, srv.URL, "root", "secret")
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = api.New(addr, "k", "s").Stat(context.Background(), "abc", "x")
	if !errors.Is(errors.Unavailable, err) {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = api.New(addr, "k", "s").Stat(ctx, "abc", "x")
	if !errors.Is(errors.Canceled, err) {
		t.Fatalf("err = %v, want Canceled", err)
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://h:1/", "http://h:1"},
		{"https://h/base/", "https://h/base"},
		{"localhost:8080", "http://localhost:8080"},
		{"ftp://h", ""},
		{"http://", ""},
	} {
		c := api.New(tc.in, "", "")
		got := c.Endpoint()
		_, err := c.Stat(context.Background(), "abc", "x")
		if tc.want == "" {
			if !errors.Is(errors.Invalid, err) {
				t.Errorf("New(%q): err %v, want Invalid", tc.in, err)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("New(%q).Endpoint() = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEscapePath(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.txt":    "a/b.txt",
		"a b/c?d#e%": "a%20b/c%3Fd%23e%25",
		"é/x":        "%C3%A9/x",
	} {
		if got := api.EscapePath(in); got != want {
			t.Errorf("EscapePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, v := range []string{"CAIRN_ENDPOINT", "CAIRN_ACCESS_KEY", "CAIRN_SECRET_KEY", "CAIRN_ROOT_USER", "CAIRN_ROOT_PASSWORD"} {
		t.Setenv(v, "")
	}
	check := func(want api.Config) {
		t.Helper()
		got, err := api.ConfigFromEnv()
		if err != nil || got != want {
			t.Fatalf("ConfigFromEnv() = %+v, %v; want %+v", got, err, want)
		}
	}
	check(api.Config{Endpoint: api.DefaultEndpoint})

	os.MkdirAll(filepath.Join(dir, "data", "meta"), 0o755)
	creds := "# written by cairn server\nCAIRN_ROOT_USER=fileuser\nexport CAIRN_ROOT_PASSWORD='file pw'\n"
	if err := os.WriteFile(filepath.Join(dir, "data/meta/root.credentials"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	check(api.Config{Endpoint: api.DefaultEndpoint, AccessKey: "fileuser", SecretKey: "file pw"})
	os.WriteFile(filepath.Join(dir, "data/root.credentials"), []byte("CAIRN_ROOT_USER=first\nCAIRN_ROOT_PASSWORD=pw"), 0o600)
	check(api.Config{Endpoint: api.DefaultEndpoint, AccessKey: "first", SecretKey: "pw"})

	t.Setenv("CAIRN_ROOT_USER", "root")
	t.Setenv("CAIRN_ROOT_PASSWORD", "rootpw")
	t.Setenv("CAIRN_ENDPOINT", "http://gw:9000")
	check(api.Config{Endpoint: "http://gw:9000", AccessKey: "root", SecretKey: "rootpw"})

	t.Setenv("CAIRN_ACCESS_KEY", "ak")
	t.Setenv("CAIRN_SECRET_KEY", "sk")
	check(api.Config{Endpoint: "http://gw:9000", AccessKey: "ak", SecretKey: "sk"})

	os.WriteFile(filepath.Join(dir, "data/root.credentials"), []byte("garbage\n"), 0o600)
	if _, err := api.ReadCredentials(filepath.Join(dir, "data/root.credentials")); !errors.Is(errors.Invalid, err) {
		t.Fatalf("malformed file: %v", err)
	}
}
