package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"

	"cairn/api"
)

// ObjectName is the name of the i'th benchmark object, in cairn and in a
// prepared directory alike, so one list of URLs fits both.
func ObjectName(i int) string { return fmt.Sprintf("obj-%06d", i) }

// ObjectURLs returns base/obj-000000 ... for n objects, parsed once so
// the GET loop does not parse a URL per request.
func ObjectURLs(base string, n int) ([]*url.URL, error) {
	urls := make([]*url.URL, n)
	for i := range urls {
		u, err := url.Parse(base + "/" + ObjectName(i))
		if err != nil {
			return nil, fmt.Errorf("bad URL %q: %w", base, err)
		}
		urls[i] = u
	}
	return urls, nil
}

// HTTPClient returns a client whose transport keeps conns connections
// alive (or none, for keepAlive false) and never compresses.
func HTTPClient(conns int, keepAlive bool) *http.Client {
	return &http.Client{Transport: api.NewTransport(conns, keepAlive)}
}

// GetOp returns Ops that GET random objects among urls and read their
// bodies, failing on any status but 200 or a body that is not size bytes
// (size < 0: any). auth is the Authorization header, "" for none. Each
// worker reuses one request and one buffer, so the loop allocates only
// what net/http does.
func GetOp(hc *http.Client, urls []*url.URL, auth string, size int64) func(worker int) Op {
	return func(worker int) Op {
		rng := rand.New(rand.NewPCG(uint64(worker), 0x63616972))
		buf := make([]byte, 64<<10)
		var req *http.Request
		return func(ctx context.Context) (int64, error) {
			u := urls[rng.IntN(len(urls))]
			if req == nil {
				req, _ = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
			}
			// Safe: the previous response's body is closed, so net/http is
			// done with req.
			req.URL = u
			return getOnce(hc, req, buf, size)
		}
	}
}

func getOnce(hc *http.Client, req *http.Request, buf []byte, size int64) (int64, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	n, err := readAll(resp.Body, buf)
	resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusOK:
		return n, fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
	case err != nil:
		return n, fmt.Errorf("GET %s: %w", req.URL.Path, err)
	case size >= 0 && n != size:
		return n, fmt.Errorf("GET %s: %d bytes, want %d", req.URL.Path, n, size)
	}
	return n, nil
}

// readAll reads r to its end into buf, over and over, counting bytes.
func readAll(r io.Reader, buf []byte) (int64, error) {
	var total int64
	for {
		n, err := r.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// PutOp returns Ops that PUT size-byte objects to new names
// prefix/<worker>-<n> under base (a namespace URL), with the given
// Authorization header.
func PutOp(hc *http.Client, base *url.URL, prefix, auth string, size int64) func(worker int) Op {
	return putOps(hc, base, prefix, size, func([]byte) func(*http.Request) error {
		return func(req *http.Request) error {
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			return nil
		}
	})
}

// putOps builds PUT loads; authorizer returns, for a worker's (constant)
// payload, what adds credentials to each of its requests.
func putOps(hc *http.Client, base *url.URL, prefix string, size int64, authorizer func(payload []byte) func(*http.Request) error) func(worker int) Op {
	return func(worker int) Op {
		payload := make([]byte, size)
		fill(payload, uint64(worker)+1)
		authorize := authorizer(payload)
		body := bytes.NewReader(payload)
		name := []byte(base.Path + "/" + prefix + "/" + strconv.Itoa(worker) + "-")
		stem := len(name)
		var seq int64
		return func(ctx context.Context) (int64, error) {
			name = strconv.AppendInt(name[:stem], seq, 10)
			seq++
			u := *base
			u.Path = string(name)
			body.Reset(payload)
			req := (&http.Request{
				Method: http.MethodPut, URL: &u, Host: u.Host, Header: http.Header{},
				Body: io.NopCloser(body), ContentLength: size,
			}).WithContext(ctx)
			if size == 0 {
				req.Body = http.NoBody
			}
			if err := authorize(req); err != nil {
				return 0, err
			}
			return putOnce(hc, req, size)
		}
	}
}

func putOnce(hc *http.Client, req *http.Request, size int64) (int64, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body) // so the connection is reused
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("PUT %s: %s", req.URL.Path, resp.Status)
	}
	return size, nil
}

// fill writes cheap pseudo-random bytes (never all zeros: a store or a
// disk that special-cases zeros must not look fast here).
func fill(b []byte, seed uint64) {
	r := rand.NewPCG(seed, 0x636169726e)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint64())
	}
}
