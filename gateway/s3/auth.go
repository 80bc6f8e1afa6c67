package s3

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

// principal is who signed a request; the zero value is anonymous.
type principal struct {
	access string
	user   string
	root   bool
	grants map[string]metapb.S3Access
}

// keyCache keeps secrets fetched from meta for a short while, so a warm
// request costs no metadata call. A deleted key or changed grant takes
// effect within keyTTL.
type keyCache struct {
	mu      sync.Mutex
	entries map[string]keyEntry
}

type keyEntry struct {
	secret  string
	p       principal
	err     error
	expires time.Time
}

const (
	keyTTL     = time.Minute
	keyFailTTL = 5 * time.Second
)

func (s *Server) lookupKey(ctx context.Context, access string) (principal, string, error) {
	now := time.Now()
	s.keys.mu.Lock()
	e, ok := s.keys.entries[access]
	s.keys.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.p, e.secret, e.err
	}
	resp, err := s.meta.S3GetSecret(ctx, &metapb.S3KeyRequest{AccessKey: access})
	switch {
	case err == nil:
		k := resp.Key
		e = keyEntry{secret: resp.Secret, expires: now.Add(keyTTL),
			p: principal{access: k.AccessKey, user: k.User, root: k.Root, grants: k.Grants}}
	case errors.Is(errors.NotExist, err):
		e = keyEntry{expires: now.Add(keyFailTTL),
			err: apiErr(http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")}
	default:
		return principal{}, "", err
	}
	s.keys.mu.Lock()
	if len(s.keys.entries) > 100_000 {
		clear(s.keys.entries)
	}
	s.keys.entries[access] = e
	s.keys.mu.Unlock()
	return e.p, e.secret, e.err
}

// authenticate checks the request's signature, if any, and returns the
// principal and the body to read: verified as it is read (a signed payload
// hash, aws-chunked signatures), so that a body that fails verification
// fails the read and nothing is committed.
func (s *Server) authenticate(r *http.Request, q url.Values) (principal, *body, error) {
	b := &body{r: r.Body, size: r.ContentLength}
	authz := r.Header.Get("Authorization")
	var c sigClaims
	var err error
	switch {
	case strings.HasPrefix(authz, v2Prefix) || authz == "" && (q.Has("AWSAccessKeyId") || q.Has("Signature") || q.Has("Expires")):
		p, err := s.authenticateV2(r, q)
		return p, b, err
	case authz != "":
		if c, err = parseAuthorization(authz); err != nil {
			return principal{}, nil, err
		}
		if c.when, err = requestTime(r); err != nil {
			return principal{}, nil, err
		}
		if err := checkSkew(c.when, time.Now()); err != nil {
			return principal{}, nil, err
		}
	case q.Has("X-Amz-Signature") || q.Has("X-Amz-Credential"):
		if c, err = parsePresigned(q); err != nil {
			return principal{}, nil, err
		}
		now := time.Now()
		if c.when.After(now.Add(maxSkew)) {
			return principal{}, nil, apiErr(http.StatusForbidden, "AccessDenied", "Request is not valid yet")
		}
		if now.After(c.when.Add(c.expires)) {
			return principal{}, nil, apiErr(http.StatusForbidden, "AccessDenied", "Request has expired")
		}
	default:
		return principal{}, b, nil
	}
	if c.date != c.when.UTC().Format("20060102") {
		return principal{}, nil, apiErr(http.StatusForbidden, "SignatureDoesNotMatch", "the credential scope's date is not the request's date")
	}
	p, secret, err := s.lookupKey(r.Context(), c.access)
	if err != nil {
		return principal{}, nil, err
	}
	payload := unsignedPayload
	if !c.presigned {
		payload = r.Header.Get("X-Amz-Content-Sha256")
		if payload == "" {
			return principal{}, nil, errInvalidRequest("Missing required header for this request: x-amz-content-sha256")
		}
	} else if v := q.Get("X-Amz-Content-Sha256"); v != "" {
		payload = v
	}
	if err := verifySignature(r.Context(), r, &c, secret, payload); err != nil {
		return principal{}, nil, err
	}
	switch payload {
	case unsignedPayload:
	case streamingSigned, streamingSignedTrailer:
		b.chunked = newChunkedReader(r.Body, newChunkSigner(&c, secret))
	case streamingUnsignedTrailer:
		b.chunked = newChunkedReader(r.Body, nil)
	default:
		want, err := hex.DecodeString(payload)
		if err != nil || len(want) != sha256.Size {
			return principal{}, nil, errInvalidRequest("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-... or a SHA-256 in hex")
		}
		b.r = &sha256Reader{r: r.Body, h: sha256.New(), want: want}
	}
	if b.chunked != nil {
		b.r = b.chunked
		b.size = -1
		if n, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64); err == nil && n >= 0 {
			b.size = n
		}
	}
	return p, b, nil
}

// body is a request body as the handlers read it: decoded and verified.
type body struct {
	r       io.Reader
	size    int64 // -1: unknown
	chunked *chunkedReader
}

// trailer returns a trailing header of an aws-chunked body (after EOF).
func (b *body) trailer(name string) string {
	if b.chunked == nil {
		return ""
	}
	return b.chunked.trailers.Get(name)
}

// sha256Reader fails at the end of a body whose SHA-256 is not the one
// the client signed.
type sha256Reader struct {
	r    io.Reader
	h    hash.Hash
	want []byte
}

func (s *sha256Reader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	if err == io.EOF && subtle.ConstantTimeCompare(s.h.Sum(nil), s.want) != 1 {
		return n, apiErr(http.StatusBadRequest, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return n, err
}

type access int

const (
	read access = iota
	write
)
