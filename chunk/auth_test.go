package chunk

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/pki/pkitest"
	"cairn/proto/metapb"
)

// TestCapabilities replays the attacks on a data server's HTTP port:
// every route without, with an expired, a wrong-scope and a forged
// capability is refused (401 without, 403 otherwise) and changes nothing.
func TestCapabilities(t *testing.T) {
	s, base := servedVolume(t)
	ctx := context.Background()
	secret := []byte("private bytes")
	key, err := s.Put(ctx, 1, 1, secret)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := s.Put(ctx, 1, 1, []byte("another file"))

	mint := func(ops capability.Op, vid uint32, first, last uint64, ttl time.Duration) string {
		tok, err := testKeys.Mint(ops, vid, first, last, "ns", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	readKey := mint(capability.Read, 1, key, key, time.Hour)
	forge := func(tok string, widen func(*capability.Cap)) string {
		// Widen a valid token's scope and keep its MAC.
		c, _, mac, err := capability.Parse(tok)
		if err != nil {
			t.Fatal(err)
		}
		widen(&c)
		raw, _ := base64.RawURLEncoding.DecodeString(otherKeyring(t).mustSign(c))
		return base64.RawURLEncoding.EncodeToString(append(raw[:len(raw)-len(mac)], mac...))
	}

	type route struct {
		method, url string
		body        []byte
		good        string // a capability this route accepts
		wrongScope  string // right op, another key or volume
	}
	keyURL := fmt.Sprintf("/v/1/%d", key)
	routes := []route{
		{"GET", keyURL, nil, readKey, mint(capability.Read, 1, other, other, time.Hour)},
		{"HEAD", keyURL, nil, readKey, mint(capability.Read, 2, key, key, time.Hour)},
		{"DELETE", keyURL + "?gen=1", nil, mint(capability.Delete, 1, key, key, time.Hour), mint(capability.Read, 1, key, key, time.Hour)},
		{"POST", "/v/1?gen=1", []byte("injected"), mint(capability.Write, 1, 0, capability.AllKeys, time.Hour), mint(capability.Write, 2, 0, capability.AllKeys, time.Hour)},
		{"PUT", keyURL + "?gen=1", []byte("overwritten"), mint(capability.Replicate, 1, key, key, time.Hour), mint(capability.Write, 1, 0, capability.AllKeys, time.Hour)},
		{"PUT", "/admin/volumes/7?gen=1", []byte{}, mint(capability.Admin, 7, 0, capability.AllKeys, time.Hour), mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour)},
		{"PUT", "/admin/volumes/1/replicas?gen=1&addrs=127.0.0.1:1", []byte{}, mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour), readKey},
		{"GET", "/admin/volumes/1/needles", nil, mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour), mint(capability.Admin, 1, key, key, time.Hour)},
		{"GET", "/admin/volumes", nil, mint(capability.Admin, capability.AnyVolume, 0, capability.AllKeys, time.Hour), mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour)},
		{"POST", "/admin/volumes/1/compact", []byte{}, mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour), mint(capability.Write, 1, 0, capability.AllKeys, time.Hour)},
		{"POST", "/admin/volumes/1/copy?gen=1&from=127.0.0.1:1", []byte{}, mint(capability.Admin, 1, 0, capability.AllKeys, time.Hour), mint(capability.Admin, 2, 0, capability.AllKeys, time.Hour)},
		{"POST", keyURL + "/repair", []byte{}, readKey, mint(capability.Read, 1, other, other, time.Hour)},
	}
	c := &http.Client{Transport: transport}
	call := func(method, url, tok string, body []byte) (int, string) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, base+url, rd)
		if tok != "" {
			req.Header.Set(capability.Header, tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	before := snapshot(t, s)
	for _, rt := range routes {
		for _, tc := range []struct {
			name   string
			tok    string
			status int
			code   string
		}{
			{"none", "", 401, "Unauthenticated"},
			{"expired", expire(t, rt.good), 403, capability.ErrExpired},
			{"wrong scope", rt.wrongScope, 403, "does not allow"},
			{"forged", forge(rt.good, func(c *capability.Cap) {
				c.Ops, c.Volume, c.First, c.Last = 0x1f, capability.AnyVolume, 0, capability.AllKeys
			}), 403, "bad MAC"},
			{"garbage", "x" + rt.good, 403, "Permission"},
		} {
			status, body := call(rt.method, rt.url, tc.tok, rt.body)
			if status != tc.status || (rt.method != "HEAD" && !strings.Contains(body, tc.code)) {
				t.Errorf("%s %s with %s capability: %d %s, want %d %q", rt.method, rt.url, tc.name, status, body, tc.status, tc.code)
			}
		}
	}
	// Walking keys with the capability of one needle yields nothing else:
	// not the sequence numbers (the keys of cookie-less needles), not the
	// needle's own sequence number under another cookie.
	seq := uint64(uint32(key))
	for k := uint64(1); k < seq+10; k++ {
		for _, c := range []uint64{0, key >> 32, key>>32 ^ 1} {
			if k := c<<32 | k; k != key {
				if status, _ := call("GET", fmt.Sprintf("/v/1/%d", k), readKey, nil); status != 403 {
					t.Errorf("GET of key %#x with key %#x's capability: %d", k, key, status)
				}
			}
		}
	}
	if after := snapshot(t, s); after != before {
		t.Fatalf("refused calls changed the server:\n%s\n%s", before, after)
	}

	// The right capability works, in the header or the query.
	if status, body := call("GET", keyURL, readKey, nil); status != 200 || body != string(secret) {
		t.Fatalf("GET with its capability: %d %q", status, body)
	}
	if status, body := call("GET", keyURL+"?cap="+readKey, "", nil); status != 200 || body != string(secret) {
		t.Fatalf("GET with ?cap=: %d %q", status, body)
	}
	// A write's answer carries the read and delete capability of its new
	// needle, and of no other.
	status, body := call("POST", "/v/1?gen=1", mint(capability.Write, 1, 0, capability.AllKeys, time.Hour), []byte("new"))
	var out struct {
		Key uint64 `json:"key"`
		Cap string `json:"cap"`
	}
	if err := json.Unmarshal([]byte(body), &out); status != 200 || err != nil || out.Cap == "" {
		t.Fatalf("POST: %d %q", status, body)
	}
	if status, body := call("GET", fmt.Sprintf("/v/1/%d", out.Key), out.Cap, nil); status != 200 || body != "new" {
		t.Fatalf("read back with the write's answer: %d %q", status, body)
	}
	if status, _ := call("GET", keyURL, out.Cap, nil); status != 403 {
		t.Fatalf("the new needle's capability read another: %d", status)
	}
	if status, _ := call("DELETE", fmt.Sprintf("/v/1/%d?gen=1", out.Key), out.Cap, nil); status != 204 {
		t.Fatalf("discard with the write's answer: %d", status)
	}
}

// snapshot is what a refused call must not change: volumes, needles, and
// the secret needle's bytes.
func snapshot(t *testing.T, s *Store) string {
	var b strings.Builder
	for _, st := range s.VolumeStats() {
		fmt.Fprintf(&b, "vol %d gen %d needles %d size %d ro %v\n", st.ID, st.Gen, st.Needles, st.Size, st.ReadOnly)
		ns, _ := s.Needles(context.Background(), st.ID)
		for _, n := range ns {
			var d bytes.Buffer
			s.ReadTo(context.Background(), st.ID, n.Key, 0, n.Size, &d)
			fmt.Fprintf(&b, "  %d %q\n", n.Key, d.String())
		}
	}
	s.repl.mu.Lock()
	fmt.Fprintf(&b, "sets %v\n", s.repl.sets)
	s.repl.mu.Unlock()
	return b.String()
}

// expire re-signs tok with an expiry in the past.
func expire(t *testing.T, tok string) string {
	c, err := testKeys.Check(tok)
	if err != nil {
		t.Fatal(err)
	}
	c.Expires = time.Now().Add(-time.Second)
	out, err := testKeys.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type keyring struct{ *capability.Keyring }

func otherKeyring(t *testing.T) keyring {
	return keyring{capability.NewKeyring(capability.NewKey(1))}
}

func (k keyring) mustSign(c capability.Cap) string {
	tok, err := k.Sign(c)
	if err != nil {
		panic(err)
	}
	return tok
}

// TestNoKeysRefusesAll: a data server that has not heard from meta yet
// has no key and serves nothing over HTTP.
func TestNoKeysRefusesAll(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Caps = nil
	s := openStore(t, cfg)
	r := serve(t, s)
	s.CreateVolume(context.Background(), 1, 1)
	_, err := r.Put(context.Background(), 1, 1, []byte("x"))
	if !errors.Is(errors.Unavailable, err) {
		t.Fatalf("write to a server without keys: %v", err)
	}
}

// TestCookieRefusedWithCapability: a needle's key carries a random cookie
// (volume/doc.go). A read with the right volume and sequence number and a
// wrong cookie is refused even with a valid capability for exactly that
// key, and the answer is the one a missing needle gets: 404 NotExist, the
// same body but for the key, so the refusal says nothing about the needle.
func TestCookieRefusedWithCapability(t *testing.T) {
	s, base := servedVolume(t)
	key, err := s.Put(context.Background(), 1, 1, []byte("private bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if key>>32 == 0 {
		t.Fatalf("needle key %#x has no cookie", key)
	}
	c := &http.Client{Transport: transport}
	get := func(k uint64, rng string) (int, string) {
		tok, err := testKeys.Mint(capability.Read, 1, k, k, "ns", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := send(t, c, "GET", fmt.Sprintf("%s/v/1/%d", base, k), tok, rng, nil)
		return resp.StatusCode, strings.ReplaceAll(body, fmt.Sprintf("/%d\"", k), "/KEY\"")
	}
	if status, body := get(key, ""); status != 200 || body != "private bytes" {
		t.Fatalf("the right key: %d %q", status, body)
	}
	missStatus, missBody := get(uint64(77)<<32|uint64(uint32(key))+1000, "")
	if missStatus != 404 || !strings.Contains(missBody, "NotExist") {
		t.Fatalf("a missing needle: %d %q", missStatus, missBody)
	}
	for _, wrong := range []uint64{key ^ 1<<40, uint64(uint32(key)), key ^ 0xffffffff00000000} {
		// A range past the end would be 416 for the right key: a wrong
		// cookie must not get that far.
		for _, rng := range []string{"", "bytes=1000000-"} {
			status, body := get(wrong, rng)
			if status != missStatus || body != missBody {
				t.Errorf("wrong cookie %#x (range %q): %d %q; a missing needle: %d %q", wrong, rng, status, body, missStatus, missBody)
			}
		}
	}
}

// send makes one request with capability tok (and a Range header, if
// rng is not empty) and returns the response and its body.
func send(t *testing.T, c *http.Client, method, url, tok, rng string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	req.Header.Set(capability.Header, tok)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// servedVolume is a data server over HTTP holding volume 1 (generation 1),
// and its base URL.
func servedVolume(t *testing.T) (*Store, string) {
	s := openStore(t, testConfig(t.TempDir()))
	r := serve(t, s)
	if err := s.CreateVolume(context.Background(), 1, 1); err != nil {
		t.Fatal(err)
	}
	return s, "http://" + r.Addr()
}

// TestRevokedPeer: a data server accepts a data identity (mutual TLS) in
// place of a capability until meta's list revokes it: then the peer is
// refused on the connection it has (checked per request) and cannot make
// a new one (the guarded listener fails the handshake); another peer goes
// on.
func TestRevokedPeer(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	ca := pkitest.NewCA(t)
	url := "https://" + serveTLS(t, s, ca) + "/admin/volumes"
	client := func(id string) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(ca.Cert(t, pki.RoleData, id))}}
	}
	get := func(c *http.Client) (int, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	p1, p2 := client("p1"), client("p2")
	for _, c := range []*http.Client{p1, p2} {
		if status, err := get(c); status != 200 {
			t.Fatalf("a data peer before any revocation: %d %v", status, err)
		}
	}
	s.setRevoked([]*metapb.RevokedCert{{Id: "p1", RevokedNs: time.Now().UnixNano()}})
	if status, err := get(p1); status != 401 {
		t.Fatalf("the revoked peer over its open connection: %d %v, want 401", status, err)
	}
	if _, err := get(client("p1")); err == nil {
		t.Fatal("the revoked peer made a new connection")
	}
	if status, err := get(p2); status != 200 {
		t.Fatalf("another peer: %d %v", status, err)
	}
}

// serveTLS serves s's HTTP API over TLS with ca's server certificate,
// refusing revoked peers as a data server does, until the test ends; it
// returns the address.
func serveTLS(t *testing.T, s *Store, ca *pkitest.CA) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(), TLSConfig: s.Revocations().Guard(ca.ServerConfig(t)), ReadHeaderTimeout: 10 * time.Second}
	go srv.ServeTLS(lis, "", "")
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}
