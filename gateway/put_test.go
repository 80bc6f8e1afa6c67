package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"cairn/gateway"
	"cairn/server/servertest"
)

// TestPutOverLimitKeepsOldObject sends bodies larger than the gateway's
// limit, announced and chunked: both are refused with 413 and the object
// they would have replaced keeps its bytes.
func TestPutOverLimitKeepsOldObject(t *testing.T) {
	s := servertest.Start(t, nil)
	const limit = 1000
	g, err := gateway.New(gateway.Config{Client: s.Client(), MaxObjectSize: limit})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(g)
	defer hs.Close()

	do := func(method, path string, body io.Reader, length int64) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = length
		req.SetBasicAuth(servertest.Root, servertest.RootSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := do(http.MethodPut, "/nsp", nil, 0); code != http.StatusCreated {
		t.Fatalf("create namespace: %d %s", code, b)
	}
	if code, b := do(http.MethodPut, "/nsp/obj", strings.NewReader("old"), 3); code != http.StatusOK {
		t.Fatalf("put: %d %s", code, b)
	}
	for _, tc := range []struct {
		name   string
		size   int
		length int64
	}{
		{"announced", limit + 1, limit + 1},
		{"chunked, one byte over", limit + 1, -1},
		{"chunked, many extents over", 3 << 20, -1},
	} {
		// io.MultiReader hides the length, so the client sends chunks.
		body := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), tc.size)))
		if code, b := do(http.MethodPut, "/nsp/obj", body, tc.length); code != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s: %d %s, want 413", tc.name, code, b)
		}
		if code, b := do(http.MethodGet, "/nsp/obj", nil, 0); code != http.StatusOK || b != "old" {
			t.Fatalf("%s: after the refused PUT the object is %d %q, want \"old\"", tc.name, code, b)
		}
	}
	// Exactly the limit, chunked, is accepted.
	body := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("y"), limit)))
	if code, b := do(http.MethodPut, "/nsp/obj", body, -1); code != http.StatusOK {
		t.Fatalf("chunked PUT at the limit: %d %s", code, b)
	}
	if code, b := do(http.MethodGet, "/nsp/obj", nil, 0); code != http.StatusOK || len(b) != limit {
		t.Fatalf("after a PUT at the limit: %d, %d bytes", code, len(b))
	}
}
