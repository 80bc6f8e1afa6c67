package console_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// TestSessionSurvivesRestart: a console restarted over the same data
// directory (the same session key) takes back the sessions it issued: the
// cookie and its CSRF token still work, and nothing needs signing in again.
// A console with another key refuses them.
func TestSessionSurvivesRestart(t *testing.T) {
	data := t.TempDir()
	start := func() *server.Server {
		return servertest.Start(t, func(c *server.Config) { c.Console, c.Data = "127.0.0.1:0", data })
	}
	s1 := start()
	if _, err := s1.Client().CreateNamespace(t.Context(), "docs", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, s1.ConsoleURL())
	b.signIn(servertest.Root, servertest.RootSecret)
	b.json("PUT", "/api/fs/docs/before/", nil, 200)
	cookies := b.hc.Jar.Cookies(mustURL(t, s1.ConsoleURL()))
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := start() // the restart: same data, other ports
	again := newBrowser(t, s2.ConsoleURL())
	again.hc.Jar.SetCookies(mustURL(t, s2.ConsoleURL()), cookies)
	again.csrf = b.csrf
	if who := again.json("GET", "/api/session", nil, 200); who["access_key"] != servertest.Root || who["csrf"] != b.csrf {
		t.Fatalf("session after the restart: %v", who)
	}
	again.json("PUT", "/api/fs/docs/after/", nil, 200) // the CSRF token still holds
	again.csrf = ""
	again.json("PUT", "/api/fs/docs/nope/", nil, 403) // and is still needed

	// Another store (another key) refuses the cookie.
	other := servertest.Start(t, func(c *server.Config) { c.Console = "127.0.0.1:0" })
	stolen := newBrowser(t, other.ConsoleURL())
	stolen.hc.Jar.SetCookies(mustURL(t, other.ConsoleURL()), cookies)
	stolen.json("GET", "/api/session", nil, 401)

	// Signing out ends it.
	again.csrf = b.csrf
	again.json("DELETE", "/api/session", nil, 204)
	replay := newBrowser(t, s2.ConsoleURL())
	replay.hc.Jar.SetCookies(mustURL(t, s2.ConsoleURL()), cookies)
	replay.json("GET", "/api/session", nil, 401)
}

// TestSignInRateLimit: wrong secrets for one key are cut off after 5 (429
// with Retry-After), even with the right secret after; another key from
// the same address still signs in, until the address has tried 20 times.
func TestSignInRateLimit(t *testing.T) {
	s := startServer(t)
	u, err := s.Meta().CreateUser(t.Context(), &metapb.CreateUserRequest{})
	if err != nil {
		t.Fatal(err)
	}
	try := func(key, secret string, want int) {
		t.Helper()
		b := newBrowser(t, s.ConsoleURL())
		resp := b.do("POST", "/api/session", strings.NewReader(`{"access_key":"`+key+`","secret":"`+secret+`"}`), nil)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("sign-in as %s: %s, want %d", key, resp.Status, want)
		}
		if want == http.StatusTooManyRequests {
			if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 60 {
				t.Fatalf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
			}
		}
	}
	for range 5 {
		try(servertest.Root, "wrong", 401)
	}
	try(servertest.Root, "wrong", 429)
	try(servertest.Root, servertest.RootSecret, 429) // the key is locked for the window
	try(u.AccessKey, u.Secret, 200)                  // not the address
	for range 20 - 8 {
		try(u.AccessKey, u.Secret, 200)
	}
	try(u.AccessKey, u.Secret, 429) // the address's 21st attempt
}
