package server_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn/capability"
	"cairn/chunk"
	"cairn/proto/metapb"
	"cairn/server"
)

const (
	testUser   = "rootkey"
	testSecret = "rootsecret-0123456789"
)

// start runs a one-process store on loopback ports in a temp dir.
func start(t *testing.T, mod func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.Defaults()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.S3 = "127.0.0.1:0"
	cfg.RootUser, cfg.RootPassword = testUser, testSecret
	cfg.ExtentSize = 256 << 10 // small, so multi-extent paths run on small files
	if mod != nil {
		mod(&cfg)
	}
	s, err := server.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

type api struct {
	t    *testing.T
	base string
	user string
	pass string
}

func newAPI(t *testing.T, s *server.Server) *api {
	return &api{t: t, base: s.URL(), user: testUser, pass: testSecret}
}

func (a *api) anon() *api { c := *a; c.user, c.pass = "", ""; return &c }

func (a *api) do(method, path string, body io.Reader, hdr ...string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call does a request and returns status, headers and the whole body.
func (a *api) call(method, path string, body []byte, hdr ...string) (int, http.Header, []byte) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	resp := a.do(method, path, r, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

func (a *api) must(want int, method, path string, body []byte, hdr ...string) (http.Header, []byte) {
	a.t.Helper()
	code, h, b := a.call(method, path, body, hdr...)
	if code != want {
		a.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, b)
	}
	return h, b
}

func errCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message, Path string }
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body is not JSON: %q", b)
	}
	if e.Error.Message == "" {
		t.Fatalf("error without message: %s", b)
	}
	return e.Error.Code
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func md5hex(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func TestNamespacesAndAccess(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/pics?visibility=public", nil)
	a.must(201, "PUT", "/secret", nil)
	if code, _, b := a.call("PUT", "/pics", nil); code != 409 || errCode(t, b) != "AlreadyExists" {
		t.Fatalf("re-create: %d %s", code, b)
	}
	a.must(200, "PUT", "/pics/cat.txt", []byte("meow"))
	a.must(200, "PUT", "/secret/key.txt", []byte("hidden"))

	anon := a.anon()
	_, b := anon.must(200, "GET", "/pics/cat.txt", nil)
	if string(b) != "meow" {
		t.Fatalf("anonymous public read: %q", b)
	}
	code, h, b := anon.call("GET", "/secret/key.txt", nil)
	if code != 401 || errCode(t, b) != "Unauthenticated" || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("anonymous private read: %d %s", code, b)
	}
	if code, _, _ := anon.call("PUT", "/pics/x", []byte("no")); code != 401 {
		t.Fatalf("anonymous write to public ns: %d", code)
	}
	bad := *a
	bad.pass = "wrong-secret"
	if code, _, b := bad.call("GET", "/secret/key.txt", nil); code != 401 || errCode(t, b) != "Unauthenticated" {
		t.Fatalf("bad secret: %d %s", code, b)
	}
	// Anonymous listing shows only public namespaces; root sees all.
	_, b = anon.must(200, "GET", "/", nil)
	if !strings.Contains(string(b), `"pics"`) || strings.Contains(string(b), `"secret"`) {
		t.Fatalf("anonymous namespace list: %s", b)
	}
	_, b = a.must(200, "GET", "/", nil)
	if !strings.Contains(string(b), `"secret"`) {
		t.Fatalf("root namespace list: %s", b)
	}
	// Visibility change takes effect at once (the access cache is invalidated).
	a.must(200, "PUT", "/pics?visibility=private", nil)
	if code, _, _ := anon.call("GET", "/pics/cat.txt", nil); code != 401 {
		t.Fatalf("after making private: %d", code)
	}
	a.must(200, "PUT", "/pics?visibility=public", nil)
	anon.must(200, "GET", "/pics/cat.txt", nil)

	if code, _, b := a.call("DELETE", "/pics", nil); code != 409 || errCode(t, b) != "NotEmpty" {
		t.Fatalf("delete non-empty ns: %d %s", code, b)
	}
	a.must(204, "DELETE", "/pics/cat.txt", nil)
	a.must(204, "DELETE", "/pics", nil)
	if code, _, b := a.call("GET", "/pics/cat.txt", nil); code != 404 || errCode(t, b) != "NoSuchNamespace" {
		t.Fatalf("deleted ns: %d %s", code, b)
	}
	if code, _, b := a.call("PUT", "/Bad_Name", nil); code != 400 || errCode(t, b) != "InvalidArgument" {
		t.Fatalf("bad ns name: %d %s", code, b)
	}
}

func TestPutGetHeadersRangeConditional(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/web?visibility=public", nil)
	a.must(201, "PUT", "/priv", nil)
	body := randBytes(100_000, 1)
	sum := md5.Sum(body)
	h, _ := a.must(200, "PUT", "/web/a/b/c/page.html", body,
		"Content-Type", "text/html", "Content-MD5", base64.StdEncoding.EncodeToString(sum[:]), "X-Cairn-Meta-Owner", "web")
	etag := `"` + md5hex(body) + `"`
	if h.Get("ETag") != etag {
		t.Fatalf("PUT ETag %q, want %q", h.Get("ETag"), etag)
	}
	h, b := a.must(200, "GET", "/web/a/b/c/page.html", nil)
	if !bytes.Equal(b, body) {
		t.Fatal("body differs")
	}
	for k, want := range map[string]string{
		"ETag": etag, "Content-Type": "text/html", "Accept-Ranges": "bytes",
		"Content-Length": "100000", "Cache-Control": "public, max-age=60", "X-Cairn-Meta-Owner": "web",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("GET %s = %q, want %q", k, got, want)
		}
	}
	lm := h.Get("Last-Modified")
	if _, err := http.ParseTime(lm); err != nil {
		t.Errorf("Last-Modified %q: %v", lm, err)
	}
	h, b = a.must(200, "HEAD", "/web/a/b/c/page.html", nil)
	if len(b) != 0 || h.Get("Content-Length") != "100000" || h.Get("ETag") != etag {
		t.Fatalf("HEAD: %v %d", h, len(b))
	}
	// Ranges.
	for _, c := range []struct {
		rng        string
		start, end int
	}{{"bytes=0-9", 0, 10}, {"bytes=99990-", 99990, 100000}, {"bytes=-5", 99995, 100000}, {"bytes=50000-99999999", 50000, 100000}} {
		h, b := a.must(206, "GET", "/web/a/b/c/page.html", nil, "Range", c.rng)
		if !bytes.Equal(b, body[c.start:c.end]) {
			t.Errorf("%s: wrong bytes", c.rng)
		}
		want := fmt.Sprintf("bytes %d-%d/100000", c.start, c.end-1)
		if h.Get("Content-Range") != want {
			t.Errorf("%s: Content-Range %q, want %q", c.rng, h.Get("Content-Range"), want)
		}
	}
	code, h, b := a.call("GET", "/web/a/b/c/page.html", nil, "Range", "bytes=100000-")
	if code != 416 || errCode(t, b) != "InvalidRange" || h.Get("Content-Range") != "bytes */100000" {
		t.Fatalf("unsatisfiable range: %d %v %s", code, h, b)
	}
	// Conditional GET.
	a.must(304, "GET", "/web/a/b/c/page.html", nil, "If-None-Match", etag)
	a.must(304, "GET", "/web/a/b/c/page.html", nil, "If-Modified-Since", lm)
	a.must(200, "GET", "/web/a/b/c/page.html", nil, "If-None-Match", `"other"`)
	a.must(200, "GET", "/web/a/b/c/page.html", nil, "If-Modified-Since", time.Unix(0, 0).UTC().Format(http.TimeFormat))
	// Conditional PUT.
	if code, _, b := a.call("PUT", "/web/a/b/c/page.html", []byte("x"), "If-Match", `"nope"`); code != 412 || errCode(t, b) != "PreconditionFailed" {
		t.Fatalf("If-Match mismatch: %d %s", code, b)
	}
	if code, _, _ := a.call("PUT", "/web/a/b/c/page.html", []byte("x"), "If-None-Match", "*"); code != 412 {
		t.Fatalf("If-None-Match * on existing: %d", code)
	}
	a.must(200, "PUT", "/web/a/b/c/page.html", []byte("v2"), "If-Match", etag)
	_, b = a.must(200, "GET", "/web/a/b/c/page.html", nil)
	if string(b) != "v2" {
		t.Fatalf("after conditional overwrite: %q", b)
	}
	// Bad digest stores nothing.
	if code, _, b := a.call("PUT", "/web/d.bin", []byte("data"), "Content-MD5", base64.StdEncoding.EncodeToString(sum[:])); code != 400 || errCode(t, b) != "BadDigest" {
		t.Fatalf("bad digest: %d %s", code, b)
	}
	if code, _, _ := a.call("GET", "/web/d.bin", nil); code != 404 {
		t.Fatalf("object stored despite bad digest: %d", code)
	}
	// Private namespaces are never cached by shared caches.
	a.must(200, "PUT", "/priv/x", []byte("p"))
	h, _ = a.must(200, "GET", "/priv/x", nil)
	if h.Get("Cache-Control") != "private, no-cache" {
		t.Fatalf("private Cache-Control %q", h.Get("Cache-Control"))
	}
	h, _ = a.must(200, "GET", "/priv/x", nil)
	if h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("default Content-Type %q", h.Get("Content-Type"))
	}
}

func TestBadPaths(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/ns1", nil)
	long := strings.Repeat("n", 256)
	for _, c := range []struct{ path, code string }{
		{"/ns1/a/../b", "InvalidArgument"},
		{"/ns1/a/%2e%2e/b", "InvalidArgument"},
		{"/ns1/a//b", "InvalidArgument"},
		{"/ns1//dbl", "InvalidArgument"}, // not stored as ns1/dbl
		{"/ns1/a%00b", "InvalidArgument"},
		{"/ns1/a%ffb", "InvalidArgument"},
		{"/ns1/" + long, "NameTooLong"},
	} {
		code, _, b := a.call("PUT", c.path, []byte("x"))
		if code != 400 || errCode(t, b) != c.code {
			t.Errorf("PUT %s: %d %s, want 400 %s", c.path, code, b, c.code)
		}
	}
	_, b := a.must(200, "GET", "/ns1/?delimiter=", nil)
	if strings.Contains(string(b), `"name":"`) {
		t.Fatalf("a refused path left something behind: %s", b)
	}
	if code, _, _ := a.call("PATCH", "/ns1/x", nil); code != 405 {
		t.Fatalf("PATCH: %d", code)
	}
}

// Sizes at and around the 64 KiB checksum block and the extent size (256 KiB
// in these tests) must round-trip exactly, in full and in ranges that
// straddle the boundaries.
func TestBoundarySizes(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/sizes", nil)
	const ext = 256 << 10
	for i, n := range []int{0, 1, 65535, 65536, 65537, ext - 1, ext, ext + 1, 2 * ext, 3*ext + 7} {
		body := randBytes(n, uint64(i+10))
		p := fmt.Sprintf("/sizes/f%d", n)
		a.must(200, "PUT", p, body)
		_, got := a.must(200, "GET", p, nil)
		if !bytes.Equal(got, body) {
			t.Fatalf("size %d: body differs (got %d bytes)", n, len(got))
		}
		if n > 2 {
			lo, hi := n/2-1, n-1
			_, got = a.must(206, "GET", p, nil, "Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
			if !bytes.Equal(got, body[lo:hi+1]) {
				t.Fatalf("size %d: range differs", n)
			}
		}
		// Chunked upload (no Content-Length) of the same size.
		resp := a.do("PUT", p+".chunked", io.MultiReader(bytes.NewReader(body)))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chunked PUT size %d: %d", n, resp.StatusCode)
		}
		_, got = a.must(200, "GET", p+".chunked", nil)
		if !bytes.Equal(got, body) {
			t.Fatalf("chunked size %d: body differs", n)
		}
	}
}

func TestStreamLargeWithoutHotCache(t *testing.T) {
	s := start(t, func(c *server.Config) { c.HotCacheSize = 0 })
	a := newAPI(t, s)
	a.must(201, "PUT", "/big", nil)
	const n = 24<<20 + 12345 // ~100 extents of 256 KiB: parallel reads
	body := randBytes(n, 42)
	pr, pw := io.Pipe()
	go func() {
		for off := 0; off < n; off += 1 << 20 {
			pw.Write(body[off:min(off+1<<20, n)])
		}
		pw.Close()
	}()
	resp := a.do("PUT", "/big/blob", pr)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("streamed PUT: %d", resp.StatusCode)
	}
	_, got := a.must(200, "GET", "/big/blob", nil)
	if md5hex(got) != md5hex(body) {
		t.Fatal("large body differs")
	}
	_, got = a.must(206, "GET", "/big/blob", nil, "Range", "bytes=1000000-9000000")
	if !bytes.Equal(got, body[1000000:9000001]) {
		t.Fatal("large range differs")
	}
}

func TestOverwriteInvalidatesHotCache(t *testing.T) {
	for _, hot := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("hot=%d", hot), func(t *testing.T) {
			s := start(t, func(c *server.Config) { c.HotCacheSize = hot })
			a := newAPI(t, s)
			a.must(201, "PUT", "/hot", nil)
			for i := range 20 {
				v := []byte(fmt.Sprintf("version %d", i))
				a.must(200, "PUT", "/hot/obj", v)
				for range 3 {
					_, got := a.must(200, "GET", "/hot/obj", nil)
					if !bytes.Equal(got, v) {
						t.Fatalf("round %d: got %q", i, got)
					}
				}
			}
			a.must(204, "DELETE", "/hot/obj", nil)
			if code, _, b := a.call("GET", "/hot/obj", nil); code != 404 || errCode(t, b) != "NoSuchKey" {
				t.Fatalf("after delete: %d %s", code, b)
			}
			// Entries below a renamed or deleted directory are not dropped
			// one by one: a new file at the old path must still be served
			// fresh, never the cached old one.
			get := func(path, want string) {
				t.Helper()
				if _, got := a.must(200, "GET", path, nil); string(got) != want {
					t.Fatalf("GET %s = %q, want %q", path, got, want)
				}
			}
			a.must(200, "PUT", "/hot/d/x", []byte("first"))
			get("/hot/d/x", "first")
			a.must(200, "POST", "/hot/d?rename=/e", nil)
			get("/hot/e/x", "first")
			a.must(200, "PUT", "/hot/d/x", []byte("second"))
			get("/hot/d/x", "second")
			a.must(204, "DELETE", "/hot/d?recursive", nil)
			a.must(200, "PUT", "/hot/d/x", []byte("third"))
			get("/hot/d/x", "third")
		})
	}
}

func TestAppend(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/logs", nil)
	var wg sync.WaitGroup
	var total int
	var mu sync.Mutex
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				line := []byte(fmt.Sprintf("writer %d line %d\n", w, i))
				a.must(200, "POST", "/logs/app.log?append", line)
				mu.Lock()
				total += len(line)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	_, b := a.must(200, "GET", "/logs/app.log", nil)
	if len(b) != total {
		t.Fatalf("size %d, want %d", len(b), total)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	sort.Strings(lines)
	if len(lines) != 80 {
		t.Fatalf("%d lines, want 80 (appends interleaved?)", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "writer ") {
			t.Fatalf("torn line %q", l)
		}
	}
	_, b = a.must(200, "POST", "/logs/app.log?append", []byte("END"))
	var r struct{ Size int }
	json.Unmarshal(b, &r)
	if r.Size != total+3 {
		t.Fatalf("append returned size %d, want %d", r.Size, total+3)
	}
}

func TestListingRenameDelete(t *testing.T) {
	s := start(t, nil)
	a := newAPI(t, s)
	a.must(201, "PUT", "/tree", nil)
	var want []string
	for i := range 25 {
		p := fmt.Sprintf("d%d/f%02d", i%3, i)
		a.must(200, "PUT", "/tree/"+p, []byte(p))
		want = append(want, p)
	}
	a.must(200, "PUT", "/tree/top.txt", []byte("t"))
	want = append(want, "top.txt")
	sort.Strings(want)
	// Recursive listing in pages of 4.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		_, b := a.must(200, "GET", "/tree/?delimiter=&limit=4&cursor="+cursor, nil)
		var l struct {
			Entries []struct {
				Name string
				Size int
				Dir  bool
			}
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Entries {
			got = append(got, e.Name)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
		if pages > 20 {
			t.Fatal("listing does not end")
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("recursive listing:\n got %v\nwant %v", got, want)
	}
	// One directory level.
	_, b := a.must(200, "GET", "/tree/", nil)
	for _, w := range []string{`"d0/"`, `"d1/"`, `"d2/"`, `"top.txt"`} {
		if !strings.Contains(string(b), w) {
			t.Fatalf("root listing lacks %s: %s", w, b)
		}
	}
	_, b = a.must(200, "GET", "/tree/d1/", nil)
	if !strings.Contains(string(b), `"d1/f01"`) || strings.Contains(string(b), `"d0/f00"`) {
		t.Fatalf("d1 listing: %s", b)
	}
	// Rename a directory: its files move with it.
	a.must(200, "POST", "/tree/d1?rename=/moved/d1", nil)
	_, b = a.must(200, "GET", "/tree/moved/d1/f01", nil)
	if string(b) != "d1/f01" {
		t.Fatalf("after dir rename: %q", b)
	}
	if code, _, _ := a.call("GET", "/tree/d1/f01", nil); code != 404 {
		t.Fatalf("old path still readable: %d", code)
	}
	if code, _, b := a.call("DELETE", "/tree/d0", nil); code != 409 || errCode(t, b) != "NotEmpty" {
		t.Fatalf("delete non-empty dir: %d %s", code, b)
	}
	a.must(204, "DELETE", "/tree/d0?recursive", nil)
	if code, _, _ := a.call("GET", "/tree/d0/f00", nil); code != 404 {
		t.Fatalf("recursive delete left a file: %d", code)
	}
	a.must(200, "PUT", "/tree/emptydir/", nil)
	_, b = a.must(200, "GET", "/tree/emptydir?stat", nil)
	if !strings.Contains(string(b), `"dir":true`) {
		t.Fatalf("mkdir stat: %s", b)
	}
	if code, _, b := a.call("PUT", "/tree/top.txt/child", []byte("x")); code != 409 || errCode(t, b) != "NotDirectory" {
		t.Fatalf("file as parent: %d %s", code, b)
	}
}

// A byte flipped in a volume file must surface as an error, never as
// wrong bytes, with or without the hot cache.
func TestCorruptionDetected(t *testing.T) {
	s := start(t, func(c *server.Config) { c.HotCacheSize = 0 })
	a := newAPI(t, s)
	a.must(201, "PUT", "/cor", nil)
	body := bytes.Repeat([]byte("precious data "), 1000)
	a.must(200, "PUT", "/cor/file", body)
	flipped := 0
	filepath.Walk(s.DataDir(), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || !strings.HasSuffix(p, ".dat") {
			return nil
		}
		data, _ := os.ReadFile(p)
		if i := bytes.Index(data, []byte("precious data precious")); i >= 0 {
			f, _ := os.OpenFile(p, os.O_RDWR, 0)
			f.WriteAt([]byte{data[i+5] ^ 0x20}, int64(i+5))
			f.Sync()
			f.Close()
			flipped++
		}
		return nil
	})
	if flipped != 1 {
		t.Fatalf("flipped %d volume files, want 1", flipped)
	}
	code, _, b := a.call("GET", "/cor/file", nil)
	if code != 500 || errCode(t, b) != "Corrupt" {
		t.Fatalf("corrupt read: %d %q", code, b[:min(len(b), 200)])
	}
}

// TestStartPortInUse: a listener that cannot be opened (another program
// holds the S3 port) fails Start with an error naming it, and closes what
// was already opened; it used to panic on the way out.
func TestStartPortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := server.Defaults()
	cfg.Data = t.TempDir()
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.S3 = busy.Addr().String()
	s, err := server.Start(cfg)
	if err == nil {
		s.Close()
		t.Fatal("Start succeeded on a port in use")
	}
	if !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Errorf("error does not name the address: %v", err)
	}
}

// A file whose needle is gone from every replica is still listed: reading
// it is data loss, said so (500 DataLoss, native API and S3), never a
// missing key (404 NoSuchKey).
func TestLostNeedleIsDataLoss(t *testing.T) {
	s := start(t, func(c *server.Config) { c.HotCacheSize = 0 })
	a := newAPI(t, s)
	ctx := context.Background()
	// Public, so that S3 reads it without signing.
	if _, err := s.Client().CreateNamespace(ctx, "lost", testUser, metapb.Visibility_PUBLIC_READ); err != nil {
		t.Fatal(err)
	}
	a.must(200, "PUT", "/lost/file", []byte("about to be lost"))
	f, err := s.Client().StatFresh(ctx, "lost", "file")
	if err != nil {
		t.Fatal(err)
	}
	e := f.Extents[0]
	vr, err := s.Client().Meta().Volumes(ctx, &metapb.VolumesRequest{Ids: []uint32{e.Volume}})
	if err != nil || len(vr.Volumes) != 1 {
		t.Fatalf("volume %d: %v", e.Volume, err)
	}
	v := vr.Volumes[0]
	for _, addr := range v.Servers { // behind meta's back, on every replica
		r := chunk.NewRemoteTLS(addr, s.UserTLS())
		r.SetCaps(capability.Signer{Keys: s.Meta().CapKeyring()}) // as meta's collector does
		if err := r.Delete(ctx, v.Id, v.Generation, e.Key); err != nil {
			t.Fatal(err)
		}
	}
	before := s.Client().DataLoss()
	code, _, b := a.call("GET", "/lost/file", nil)
	if code != 500 || errCode(t, b) != "DataLoss" || !strings.Contains(string(b), "data lost") {
		t.Fatalf("GET of a file whose needle is lost: %d %s", code, b)
	}
	resp, err := http.Get(s.S3URL() + "/lost/file")
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(sb), "<Code>DataLoss</Code>") {
		t.Fatalf("S3 GET of a file whose needle is lost: %d %s", resp.StatusCode, sb)
	}
	if n := s.Client().DataLoss() - before; n != 2 {
		t.Fatalf("%d reads counted as data loss, want 2", n)
	}
}
