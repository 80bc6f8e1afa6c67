package console_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"cairn/client"
	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// startServer starts a real one-process store with its console on loopback.
func startServer(t testing.TB) *server.Server {
	return servertest.Start(t, func(c *server.Config) { c.Console = "127.0.0.1:0" })
}

// browser is a cookie-keeping HTTP client signed in to a console.
type browser struct {
	t    testing.TB
	base string
	hc   *http.Client
	csrf string
	root bool
}

func newBrowser(t testing.TB, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, hc: &http.Client{Jar: jar}}
}

func (b *browser) do(method, path string, body io.Reader, hdr map[string]string) *http.Response {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if b.csrf != "" && method != http.MethodGet {
		req.Header.Set("X-CSRF-Token", b.csrf)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp
}

func (b *browser) json(method, path string, in any, want int) map[string]any {
	b.t.Helper()
	var body io.Reader
	if in != nil {
		data, _ := json.Marshal(in)
		body = bytes.NewReader(data)
	}
	resp := b.do(method, path, body, nil)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		b.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	out := map[string]any{}
	json.Unmarshal(data, &out)
	return out
}

func (b *browser) signIn(key, secret string) {
	b.t.Helper()
	s := b.json("POST", "/api/session", map[string]string{"access_key": key, "secret": secret}, 200)
	b.csrf, b.root = s["csrf"].(string), s["root"].(bool)
}

func TestSignInCookie(t *testing.T) {
	s := startServer(t)
	b := newBrowser(t, s.ConsoleURL())
	b.json("POST", "/api/session", map[string]string{"access_key": servertest.Root, "secret": "wrong"}, 401)
	resp := b.do("POST", "/api/session", strings.NewReader(`{"access_key":"`+servertest.Root+`","secret":"`+servertest.RootSecret+`"}`), nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sign-in: %s", resp.Status)
	}
	c := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(c, want) {
			t.Errorf("cookie %q lacks %s", c, want)
		}
	}
	if strings.Contains(c, servertest.RootSecret) {
		t.Fatal("the secret is in the cookie")
	}
	// A sign-in posted from another site is refused (login CSRF).
	b2 := newBrowser(t, s.ConsoleURL())
	resp = b2.do("POST", "/api/session", strings.NewReader(`{"access_key":"`+servertest.Root+`","secret":"`+servertest.RootSecret+`"}`),
		map[string]string{"Origin": "http://evil.example"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin sign-in: %s", resp.Status)
	}
}

func TestCSRFAndForeignSessions(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	if _, err := s.Client().CreateNamespace(ctx, "docs", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	root := newBrowser(t, s.ConsoleURL())
	root.signIn(servertest.Root, servertest.RootSecret)

	// The cookie alone does not change anything: no token, wrong token.
	token := root.csrf
	root.csrf = ""
	root.json("PUT", "/api/fs/docs/a/", nil, 403)
	root.csrf = "x" + token
	root.json("PUT", "/api/fs/docs/a/", nil, 403)
	root.csrf = token
	root.json("PUT", "/api/fs/docs/a/", nil, 200)

	// Another user's token with root's cookie is refused: a token is bound
	// to its session.
	u, err := s.Meta().CreateUser(ctx, &metapb.CreateUserRequest{}) // the service itself: the test is root
	if err != nil {
		t.Fatal(err)
	}
	other := newBrowser(t, s.ConsoleURL())
	other.signIn(u.AccessKey, u.Secret)
	root.csrf = other.csrf
	root.json("DELETE", "/api/fs/docs/a/?recursive", nil, 403)
	root.csrf = token

	// The other user's session cannot read root's private namespace, nor
	// reach the admin pages.
	other.json("GET", "/api/fs/docs/", nil, 403)
	other.json("GET", "/api/cluster", nil, 403)
	other.json("GET", "/api/access/keys", nil, 403)
	root.json("GET", "/api/cluster", nil, 200)

	// A cookie another console issued, or a signed-out one, is refused.
	s2 := startServer(t)
	foreign := newBrowser(t, s2.ConsoleURL())
	foreign.signIn(servertest.Root, servertest.RootSecret)
	stolen := newBrowser(t, s.ConsoleURL())
	stolen.hc.Jar.SetCookies(mustURL(t, s.ConsoleURL()), foreign.hc.Jar.Cookies(mustURL(t, s2.ConsoleURL())))
	stolen.csrf = foreign.csrf
	stolen.json("GET", "/api/fs/docs/", nil, 401)
	old := root.hc.Jar.Cookies(mustURL(t, s.ConsoleURL()))
	root.json("DELETE", "/api/session", nil, 204)
	replay := newBrowser(t, s.ConsoleURL())
	replay.hc.Jar.SetCookies(mustURL(t, s.ConsoleURL()), old)
	replay.csrf = token
	replay.json("GET", "/api/fs/docs/", nil, 401)
}

func TestStoredHTMLIsSandboxed(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	s.Client().CreateNamespace(ctx, "web", servertest.Root, metapb.Visibility_PRIVATE)
	s.Client().Put(ctx, "web", "x.html", strings.NewReader("<script>alert(1)</script>"), client.PutOptions{ContentType: "text/html"})
	s.Client().Put(ctx, "web", "x.png", strings.NewReader("\x89PNG"), client.PutOptions{ContentType: "image/png"})
	b := newBrowser(t, s.ConsoleURL())
	b.signIn(servertest.Root, servertest.RootSecret)
	resp := b.do("GET", "/api/fs/web/x.html", nil, nil)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") {
		t.Fatalf("stored HTML served with CSP %q", csp)
	}
	resp = b.do("GET", "/api/fs/web/x.png", nil, nil)
	resp.Body.Close()
	if resp.Header.Get("Content-Security-Policy") != "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("image headers %v", resp.Header)
	}
	resp = b.do("GET", "/api/fs/web/nothing", nil, nil)
	resp.Body.Close()
	if resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatal("a Basic challenge would open the browser's own dialog")
	}
}

func TestPartedUploadAndShare(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	s.Client().CreateNamespace(ctx, "uploads", servertest.Root, metapb.Visibility_PRIVATE)
	b := newBrowser(t, s.ConsoleURL())
	b.signIn(servertest.Root, servertest.RootSecret)
	data := make([]byte, 8<<20+1234)
	rand.Read(data)
	base := "/api/uploads/uploads/dir/big%20file.bin"
	id := b.json("POST", base+"?type=application/octet-stream", nil, 200)["id"].(string)
	etags := map[int]string{}
	put := func(n int, p []byte) {
		resp := b.do("PUT", base+"?id="+id+"&part="+string(rune('0'+n)), bytes.NewReader(p), nil)
		defer resp.Body.Close()
		var out map[string]string
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != 200 || out["etag"] == "" {
			t.Fatalf("part %d: %s %v", n, resp.Status, out)
		}
		etags[n] = out["etag"]
	}
	put(2, data[8<<20:]) // out of order, as parallel parts arrive
	parts := b.json("GET", base+"?id="+id, nil, 200)["parts"].([]any)
	if len(parts) != 1 || parts[0].(map[string]any)["part"].(float64) != 2 {
		t.Fatalf("parts stored: %v", parts)
	}
	put(1, data[:8<<20])
	b.json("PUT", base+"?id="+id+"&part=0", nil, 400)
	b.json("POST", base+"?id="+id, map[string]any{"parts": []map[string]any{
		{"part": 1, "etag": etags[1]}, {"part": 2, "etag": etags[2]}}}, 200)
	f, err := s.Client().Stat(ctx, "uploads", "dir/big file.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Client().ReadAll(ctx, f)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("completed upload differs (err %v, %d bytes)", err, len(got))
	}

	// A share link opens without a session, and not once altered.
	link := b.json("POST", "/api/share/uploads/dir/big%20file.bin", map[string]any{"expires_in": 60}, 200)["url"].(string)
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("share link: %s, %d bytes", resp.Status, len(got))
	}
	for _, bad := range []string{strings.Replace(link, "big%20file", "big%20filf", 1), strings.Replace(link, "X-Amz-Expires=60", "X-Amz-Expires=600", 1)} {
		resp, err := http.Get(bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("altered link %s: %s", bad, resp.Status)
		}
	}
	b.json("POST", "/api/share/uploads/dir/big%20file.bin", map[string]any{"expires_in": 8 * 86400}, 400)

	// The activity page counts the S3 API's bytes: the parts in, the
	// share link's download out (rate × interval, summed over samples).
	var in, out float64
	await.Until(t, 20*time.Second, "the S3 bytes in the activity samples", func() bool {
		a := b.json("GET", "/api/activity", nil, 200)
		every := a["every_s"].(float64)
		in, out = 0, 0
		for _, s := range a["samples"].([]any) {
			if r, ok := s.(map[string]any)["roles"].(map[string]any)["s3"].(map[string]any); ok {
				in += r["in_bps"].(float64) * every
				out += r["out_bps"].(float64) * every
			}
		}
		return in >= float64(len(data))*0.9 && out >= float64(len(data))*0.9
	})
	if in > float64(len(data))*1.5 {
		t.Fatalf("S3 bytes in: %.0f for an upload of %d", in, len(data))
	}
	t.Logf("activity: S3 %.1f MiB in, %.1f MiB out", in/(1<<20), out/(1<<20))
}
