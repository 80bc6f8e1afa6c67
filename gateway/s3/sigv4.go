package s3

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// SigV4 verification. Parsing the request's claims (which key, which
// scope, which headers were signed) is done here; the expected signature
// is computed by aws-sdk-go-v2's signer over a copy of the request that
// holds exactly the signed headers, so the canonicalization is the SDK's,
// not ours.

const (
	algorithm       = "AWS4-HMAC-SHA256"
	amzDateFormat   = "20060102T150405Z"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	streamingSigned = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	// Trailer variants carry checksums after the last chunk.
	streamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	maxSkew                  = 15 * time.Minute
	maxPresignExpiry         = 7 * 24 * time.Hour
)

// scope is a credential scope: AKID/yyyymmdd/region/service/aws4_request.
type scope struct {
	access, date, region, service string
}

// sigClaims is what a request says about its signature.
type sigClaims struct {
	scope
	signedHeaders []string // lower case, sorted as sent
	signature     []byte
	when          time.Time
	presigned     bool
	expires       time.Duration
}

func parseCredential(s string) (scope, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 5 || parts[0] == "" || len(parts[1]) != 8 || parts[2] == "" || parts[4] != "aws4_request" {
		return scope{}, false
	}
	if parts[3] != "s3" {
		return scope{}, false
	}
	return scope{access: parts[0], date: parts[1], region: parts[2], service: parts[3]}, true
}

func parseSignedHeaders(s string) ([]string, bool) {
	if s == "" {
		return nil, false
	}
	hs := strings.Split(s, ";")
	for _, h := range hs {
		if h == "" || h != strings.ToLower(h) || strings.ContainsAny(h, " \t,:") {
			return nil, false
		}
	}
	return hs, true
}

func parseSignature(s string) ([]byte, bool) {
	if len(s) != 64 {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// parseAuthorization parses an "AWS4-HMAC-SHA256 Credential=...,
// SignedHeaders=..., Signature=..." header.
func parseAuthorization(h string) (sigClaims, error) {
	var c sigClaims
	rest, ok := strings.CutPrefix(h, algorithm+" ")
	if !ok {
		return c, errInvalidRequest("unsupported authorization type; use AWS Signature Version 4")
	}
	var haveCred, haveSH, haveSig bool
	for _, f := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return c, authHeaderMalformed()
		}
		switch k {
		case "Credential":
			c.scope, haveCred = parseCredential(v)
		case "SignedHeaders":
			c.signedHeaders, haveSH = parseSignedHeaders(v)
		case "Signature":
			c.signature, haveSig = parseSignature(v)
		}
	}
	if !haveCred || !haveSH || !haveSig {
		return c, authHeaderMalformed()
	}
	return c, nil
}

func authHeaderMalformed() *apiError {
	return apiErr(http.StatusBadRequest, "AuthorizationHeaderMalformed", "The authorization header is malformed.")
}

func authQueryMalformed(msg string) *apiError {
	return apiErr(http.StatusBadRequest, "AuthorizationQueryParametersError", msg)
}

// parsePresigned parses the X-Amz-* query parameters of a presigned URL.
func parsePresigned(q url.Values) (sigClaims, error) {
	var c sigClaims
	if q.Get("X-Amz-Algorithm") != algorithm {
		return c, authQueryMalformed("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
	}
	var ok bool
	if c.scope, ok = parseCredential(q.Get("X-Amz-Credential")); !ok {
		return c, authQueryMalformed("malformed X-Amz-Credential")
	}
	if c.signedHeaders, ok = parseSignedHeaders(q.Get("X-Amz-SignedHeaders")); !ok {
		return c, authQueryMalformed("malformed X-Amz-SignedHeaders")
	}
	if c.signature, ok = parseSignature(q.Get("X-Amz-Signature")); !ok {
		return c, authQueryMalformed("malformed X-Amz-Signature")
	}
	t, err := time.Parse(amzDateFormat, q.Get("X-Amz-Date"))
	if err != nil {
		return c, authQueryMalformed("malformed X-Amz-Date")
	}
	c.when = t
	secs, err := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
	switch {
	case err != nil:
		return c, authQueryMalformed("X-Amz-Expires should be a number")
	// S3 answers these two with 403, not 400. Seconds are compared as
	// seconds: a Duration of a huge count would overflow and pass.
	case secs < 0:
		return c, apiErr(http.StatusForbidden, "AuthorizationQueryParametersError", "X-Amz-Expires must be non-negative")
	case secs > int64(maxPresignExpiry/time.Second):
		return c, apiErr(http.StatusForbidden, "AuthorizationQueryParametersError", "X-Amz-Expires must be less than a week (in seconds) that is 604800")
	}
	c.expires = time.Duration(secs) * time.Second
	c.presigned = true
	return c, nil
}

// requestTime reads X-Amz-Date (or Date) of a header-signed request.
func requestTime(r *http.Request) (time.Time, error) {
	if s := r.Header.Get("X-Amz-Date"); s != "" {
		t, err := time.Parse(amzDateFormat, s)
		if err != nil {
			return t, apiErr(http.StatusForbidden, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
		}
		return t, nil
	}
	if s := r.Header.Get("Date"); s != "" {
		if t, err := http.ParseTime(s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, apiErr(http.StatusForbidden, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
}

func checkSkew(t, now time.Time) error {
	if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return apiErr(http.StatusForbidden, "RequestTimeTooSkewed", "The difference between the request time and the current time is too large.")
	}
	return nil
}

// rawPath is the path exactly as the client sent it, which is what it
// signed (S3 does not normalize or re-encode paths when signing).
func rawPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if strings.HasPrefix(p, "/") {
		return p
	}
	return r.URL.EscapedPath()
}

// signingCopy builds the request the SDK signs: method, path, query,
// host and the signed headers only.
func signingCopy(r *http.Request, c *sigClaims, path, rawQuery string) *http.Request {
	sr := &http.Request{
		Method: r.Method,
		URL:    &url.URL{Opaque: path, RawQuery: rawQuery},
		Host:   r.Host,
		Header: http.Header{},
	}
	for _, h := range c.signedHeaders {
		switch h {
		case "host":
		case "content-length":
			sr.ContentLength = r.ContentLength
		default:
			k := textproto.CanonicalMIMEHeaderKey(h)
			if v, ok := r.Header[k]; ok {
				sr.Header[k] = v
			} else {
				sr.Header[k] = []string{""}
			}
		}
	}
	return sr
}

var signer = v4.NewSigner()

func sdkOptions(o *v4.SignerOptions) {
	o.DisableURIPathEscaping = true // S3 signs the path as sent, encoded once
	o.DisableHeaderHoisting = true  // verify the headers where the client put them
}

// expectedSignature computes the signature the SDK gives this request.
func expectedSignature(ctx context.Context, r *http.Request, c *sigClaims, secret, payloadHash, path string) ([]byte, error) {
	creds := aws.Credentials{AccessKeyID: c.access, SecretAccessKey: secret}
	q := r.URL.RawQuery
	if c.presigned {
		vals, _ := url.ParseQuery(q)
		vals.Del("X-Amz-Signature")
		sr := signingCopy(r, c, path, vals.Encode())
		uri, _, err := signer.PresignHTTP(ctx, creds, sr, payloadHash, "s3", c.region, c.when, sdkOptions)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(uri)
		if err != nil {
			return nil, err
		}
		sig, _ := parseSignature(u.Query().Get("X-Amz-Signature"))
		return sig, nil
	}
	sr := signingCopy(r, c, path, q)
	if err := signer.SignHTTP(ctx, creds, sr, payloadHash, "s3", c.region, c.when, sdkOptions); err != nil {
		return nil, err
	}
	got, err := parseAuthorization(sr.Header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	return got.signature, nil
}

// verifySignature checks c against the request. The path is tried as
// sent and, should a client have sent it differently from how it
// signed it, in S3's canonical encoding of the decoded path.
func verifySignature(ctx context.Context, r *http.Request, c *sigClaims, secret, payloadHash string) error {
	for _, p := range []string{rawPath(r), s3Escape(r.URL.Path)} {
		want, err := expectedSignature(ctx, r, c, secret, payloadHash, p)
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare(want, c.signature) == 1 {
			return nil
		}
	}
	return errSignature()
}

// s3Escape encodes a path the way S3 signers do: every byte but
// unreserved characters and '/' percent-encoded.
func s3Escape(p string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// chunkSigner verifies aws-chunked chunk signatures: each chains on the
// previous one, starting from the request's seed signature. The SDK's
// stream signer computes exactly S3's chunk string-to-sign when it is
// given no event headers (their hash is then the empty string's).
type chunkSigner struct {
	s    *v4.StreamSigner
	when time.Time
}

func newChunkSigner(c *sigClaims, secret string) *chunkSigner {
	creds := aws.Credentials{AccessKeyID: c.access, SecretAccessKey: secret}
	return &chunkSigner{s: v4.NewStreamSigner(creds, "s3", c.region, c.signature), when: c.when}
}

func (cs *chunkSigner) verify(data, sig []byte) bool {
	want, err := cs.s.GetSignature(context.Background(), nil, data, cs.when)
	return err == nil && subtle.ConstantTimeCompare(want, sig) == 1
}
