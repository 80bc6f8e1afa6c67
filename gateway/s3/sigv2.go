package s3

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SigV2 verification, as S3's "Signing and authenticating REST requests"
// (the V2 reference) defines it: HMAC-SHA1 over
//
//	Method \n Content-MD5 \n Content-Type \n Date \n
//	CanonicalizedAmzHeaders CanonicalizedResource
//
// by header (Authorization: AWS key:signature) or query (AWSAccessKeyId,
// Signature, Expires; Expires then stands in for Date). V2 signs neither
// the body nor the region; older tools (awscli v1's presign, s3cmd) still
// use it. The body is checked only by Content-MD5, when one is sent.

// v2Claims is what a V2-signed request says about its signature.
type v2Claims struct {
	access    string
	signature []byte // HMAC-SHA1, 20 bytes
	expires   int64  // query: Unix seconds; 0 for a header
	presigned bool
}

const v2Prefix = "AWS "

// parseV2Authorization parses "AWS AKID:base64(signature)".
func parseV2Authorization(h string) (v2Claims, error) {
	var c v2Claims
	rest, ok := strings.CutPrefix(h, v2Prefix)
	if !ok {
		return c, authHeaderMalformed()
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return c, authHeaderMalformed()
	}
	c.access = rest[:i]
	if strings.ContainsAny(c.access, " \t:") {
		return c, authHeaderMalformed()
	}
	if c.signature, ok = parseV2Signature(rest[i+1:]); !ok {
		return c, authHeaderMalformed()
	}
	return c, nil
}

func parseV2Signature(s string) ([]byte, bool) {
	b, err := base64.StdEncoding.DecodeString(s)
	return b, err == nil && len(b) == sha1.Size
}

// parseV2Presigned parses AWSAccessKeyId, Signature and Expires.
func parseV2Presigned(q url.Values) (v2Claims, error) {
	var c v2Claims
	for _, k := range []string{"AWSAccessKeyId", "Signature", "Expires"} {
		if len(q[k]) != 1 || q[k][0] == "" {
			return c, apiErr(http.StatusForbidden, "AccessDenied", "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
		}
	}
	c.access = q.Get("AWSAccessKeyId")
	var ok bool
	if c.signature, ok = parseV2Signature(q.Get("Signature")); !ok {
		return c, apiErr(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
	}
	exp, err := strconv.ParseInt(q.Get("Expires"), 10, 64)
	if err != nil || exp < 0 {
		return c, apiErr(http.StatusForbidden, "AccessDenied", "Invalid date (should be seconds since epoch): "+q.Get("Expires"))
	}
	c.expires = exp
	c.presigned = true
	return c, nil
}

// v2Subresources are the query parameters that go into the canonical
// resource: the V2 reference's sub-resources and response overrides,
// and the sub-resources added to S3 since (signers include them too).
var v2Subresources = map[string]bool{
	"accelerate": true, "acl": true, "analytics": true, "attributes": true, "cors": true,
	"delete": true, "encryption": true, "intelligent-tiering": true, "inventory": true,
	"legal-hold": true, "lifecycle": true, "location": true, "logging": true, "metrics": true,
	"notification": true, "object-lock": true, "ownershipControls": true, "partNumber": true,
	"policy": true, "policyStatus": true, "publicAccessBlock": true, "replication": true,
	"requestPayment": true, "restore": true, "retention": true, "select": true,
	"select-type": true, "tagging": true, "torrent": true, "uploadId": true, "uploads": true,
	"versionId": true, "versioning": true, "versions": true, "website": true,
	"response-cache-control": true, "response-content-disposition": true,
	"response-content-encoding": true, "response-content-language": true,
	"response-content-type": true, "response-expires": true,
}

// v2StringToSign builds the string a V2 signer signs for r. date is the
// Date header's value (or Expires, for a presigned URL); resource is the
// bucket-and-path part of the canonical resource.
func v2StringToSign(r *http.Request, q url.Values, date, resource string) string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(strings.TrimSpace(r.Header.Get("Content-Md5")))
	b.WriteByte('\n')
	b.WriteString(strings.TrimSpace(r.Header.Get("Content-Type")))
	b.WriteByte('\n')
	b.WriteString(date)
	b.WriteByte('\n')
	// x-amz-* headers: lower-case names, sorted, a name's values joined
	// by commas, each value's folded whitespace made one space.
	var names []string
	for k := range r.Header {
		if len(k) >= 6 && strings.EqualFold(k[:6], "x-amz-") {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	for _, k := range names {
		b.WriteString(strings.ToLower(k))
		b.WriteByte(':')
		for i, v := range r.Header[k] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.Join(strings.Fields(v), " "))
		}
		b.WriteByte('\n')
	}
	b.WriteString(resource)
	var subs []string
	for k := range q {
		if v2Subresources[k] {
			subs = append(subs, k)
		}
	}
	sort.Strings(subs)
	for i, k := range subs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(k)
		// Values are signed decoded (the reference: "you do not encode
		// these values" when signing).
		if v := q.Get(k); v != "" {
			b.WriteByte('=')
			b.WriteString(v)
		}
	}
	return b.String()
}

// v2Sign is the V2 signature of a string to sign.
func v2Sign(secret, sts string) []byte {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(sts))
	return m.Sum(nil)
}

// v2Time checks a header-signed request's time: x-amz-date, else Date,
// in any of HTTP's date formats, within maxSkew of now. It returns the
// Date to sign: empty when x-amz-date is sent (x-amz-date is then signed
// among the x-amz-* headers instead).
func v2Time(r *http.Request, now time.Time) (string, error) {
	s, date := r.Header.Get("X-Amz-Date"), ""
	if s == "" {
		s = r.Header.Get("Date")
		date = s
	}
	t, err := http.ParseTime(s)
	if err != nil {
		if t, err = time.Parse(amzDateFormat, s); err != nil {
			return "", apiErr(http.StatusForbidden, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
		}
	}
	return date, checkSkew(t, now)
}

// authenticateV2 checks a V2 signature (header or query) and returns the
// signer's access key. The body is not signed by V2: it is read as sent
// (Content-MD5, signed when present, is verified as the body is read).
func (s *Server) authenticateV2(r *http.Request, q url.Values) (principal, error) {
	var c v2Claims
	var date string
	var err error
	now := time.Now()
	if h := r.Header.Get("Authorization"); h != "" {
		if c, err = parseV2Authorization(h); err != nil {
			return principal{}, err
		}
		if date, err = v2Time(r, now); err != nil {
			return principal{}, err
		}
	} else {
		if c, err = parseV2Presigned(q); err != nil {
			return principal{}, err
		}
		if now.Unix() > c.expires {
			return principal{}, apiErr(http.StatusForbidden, "AccessDenied", "Request has expired")
		}
		date = strconv.FormatInt(c.expires, 10)
	}
	p, secret, err := s.lookupKey(r.Context(), c.access)
	if err != nil {
		return principal{}, err
	}
	// A virtual-host request signs its bucket before the path.
	prefix := ""
	if b, ok := s.hostBucket(r); ok {
		prefix = "/" + b
	}
	paths := []string{rawPath(r), s3Escape(r.URL.Path)}
	if p := strings.TrimPrefix(r.URL.Path, "/"); p != "" && !strings.Contains(p, "/") {
		// A bucket named without the slash: boto signs "/bucket/".
		paths = append(paths, rawPath(r)+"/")
	}
	ok := 0
	for _, path := range paths {
		want := v2Sign(secret, v2StringToSign(r, q, date, prefix+path))
		ok |= subtle.ConstantTimeCompare(want, c.signature)
	}
	if ok != 1 {
		return principal{}, errSignature()
	}
	return p, nil
}
