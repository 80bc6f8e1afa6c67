package s3

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

func FuzzParseAuthorization(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("ab", 32))
	f.Add("AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/s3/aws4_request,SignedHeaders=,Signature=zz")
	f.Add("AWS4-HMAC-SHA256 ")
	f.Add("Basic dXNlcjpwYXNz")
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e/f, SignedHeaders=Host, Signature=00")
	f.Fuzz(func(t *testing.T, h string) {
		c, err := parseAuthorization(h)
		if err != nil {
			return
		}
		if c.access == "" || len(c.signature) != 32 || len(c.signedHeaders) == 0 || c.service != "s3" {
			t.Fatalf("accepted incomplete claims %+v from %q", c, h)
		}
		for _, sh := range c.signedHeaders {
			if sh == "" || sh != strings.ToLower(sh) {
				t.Fatalf("accepted signed header %q", sh)
			}
		}
	})
}

func FuzzParsePresigned(f *testing.F) {
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("0", 64))
	f.Add("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=-1")
	f.Add("X-Amz-Expires=99999999999999999999")
	f.Add("%zz")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		c, err := parsePresigned(v)
		if err != nil {
			return
		}
		if c.expires < 0 || c.expires > maxPresignExpiry || len(c.signature) != 32 || !c.presigned {
			t.Fatalf("accepted %+v from %q", c, q)
		}
	})
}

// signedChunks builds an aws-chunked body as a client would, with the
// SDK's stream signer, seeded by seed.
func signedChunks(t testing.TB, seed []byte, when time.Time, chunks ...[]byte) []byte {
	creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}
	s := v4.NewStreamSigner(creds, "s3", "us-east-1", seed)
	var b bytes.Buffer
	for _, c := range append(chunks, nil) {
		sig, err := s.GetSignature(context.Background(), nil, c, when)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", len(c), hex.EncodeToString(sig))
		b.Write(c)
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

func testSigner(seed []byte, when time.Time) *chunkSigner {
	c := &sigClaims{scope: scope{access: "AKID", region: "us-east-1", service: "s3"}, signature: seed, when: when}
	return newChunkSigner(c, "secret")
}

func TestChunkedSigned(t *testing.T) {
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := bytes.Repeat([]byte{7}, 32)
	body := signedChunks(t, seed, when, []byte("hello "), bytes.Repeat([]byte("x"), 70000), []byte("world"))
	got, err := io.ReadAll(newChunkedReader(bytes.NewReader(body), testSigner(seed, when)))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello " + strings.Repeat("x", 70000) + "world"; string(got) != want {
		t.Fatalf("decoded %d bytes, want %d", len(got), len(want))
	}
	cases := map[string][]byte{
		"tampered data":    bytes.Replace(body, []byte("world"), []byte("w0rld"), 1),
		"wrong seed":       signedChunks(t, bytes.Repeat([]byte{8}, 32), when, []byte("hello")),
		"truncated":        body[:len(body)-40],
		"no final chunk":   signedChunks(t, seed, when, []byte("hello"))[:60],
		"reordered chunks": append(signedChunks(t, seed, when, []byte("b"))[:0:0], signedChunks(t, seed, when, []byte("a"), []byte("b"))...),
	}
	// Swap the two data chunks of the last case, keeping their signatures.
	ab := cases["reordered chunks"]
	cases["reordered chunks"] = bytes.Replace(bytes.Replace(ab, []byte("\r\na\r\n"), []byte("\r\nX\r\n"), 1), []byte("\r\nb\r\n"), []byte("\r\na\r\n"), 1)
	for name, b := range cases {
		if _, err := io.ReadAll(newChunkedReader(bytes.NewReader(b), testSigner(seed, when))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestChunkedUnsignedTrailer(t *testing.T) {
	body := "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"
	cr := newChunkedReader(strings.NewReader(body), nil)
	got, err := io.ReadAll(cr)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("%q %v", got, err)
	}
	if cr.trailers.Get("X-Amz-Checksum-Crc32") != "NhCmhg==" {
		t.Fatalf("trailers %v", cr.trailers)
	}
}

// TestChunkedSignedTrailer reads the trailers of signed aws-chunked
// bodies as AWS documents them and as minio-go sends them ("\n" then
// "\r\n" before the signature); trailers without a signature are refused.
func TestChunkedSignedTrailer(t *testing.T) {
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := bytes.Repeat([]byte{7}, 32)
	chunks := signedChunks(t, seed, when, []byte("hello world"))
	chunks = chunks[:len(chunks)-2] // the final chunk's CRLF: trailers follow
	sig := "x-amz-trailer-signature:" + strings.Repeat("ab", 32) + "\r\n"
	for name, tc := range map[string]struct {
		trailers string
		ok       bool
	}{
		"aws":           {"x-amz-checksum-crc32:DUoRhQ==\r\n" + sig + "\r\n", true},
		"minio-go":      {"x-amz-checksum-crc32:DUoRhQ==\n\r\n" + sig + "\r\n", true},
		"no signature":  {"x-amz-checksum-crc32:DUoRhQ==\r\n\r\n", false},
		"bad signature": {"x-amz-checksum-crc32:DUoRhQ==\r\nx-amz-trailer-signature:zz\r\n\r\n", false},
		"cut":           {"x-amz-checksum-crc32:DUoRhQ==\r\n" + sig, false},
		"none":          {"\r\n", true},
	} {
		cr := newChunkedReader(bytes.NewReader(append(chunks[:len(chunks):len(chunks)], tc.trailers...)), testSigner(seed, when))
		got, err := io.ReadAll(cr)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", name, err)
			continue
		}
		if tc.ok && string(got) != "hello world" {
			t.Errorf("%s: decoded %q", name, got)
		}
		if tc.ok && name != "none" && cr.trailers.Get("X-Amz-Checksum-Crc32") != "DUoRhQ==" {
			t.Errorf("%s: trailers %v", name, cr.trailers)
		}
	}
}

func FuzzChunked(f *testing.F) {
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := bytes.Repeat([]byte{7}, 32)
	f.Add(signedChunks(f, seed, when, []byte("hello"), []byte("world")), true)
	f.Add([]byte("5\r\nhello\r\n0\r\n\r\n"), false)
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"), false)
	f.Add([]byte("ffffffffffffffff\r\n"), false)
	f.Add([]byte("5;chunk-signature=zz\r\nhello\r\n"), true)
	f.Add([]byte("\r\n\r\n"), false)
	f.Add([]byte("0\r\nx-amz-checksum-crc32:AAAAAA==\n\r\nx-amz-trailer-signature:00\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, body []byte, signed bool) {
		var s *chunkSigner
		if signed {
			s = testSigner(seed, when)
		}
		out, err := io.ReadAll(io.LimitReader(newChunkedReader(bytes.NewReader(body), s), 64<<20))
		if err == nil && len(out) > len(body) {
			t.Fatalf("decoded %d bytes from a %d-byte body", len(out), len(body))
		}
	})
}

func FuzzXMLBodies(f *testing.F) {
	f.Add([]byte(`<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag><Tag><Key>k</Key><Value>w</Value></Tag></TagSet></Tagging>`))
	f.Add([]byte(`<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>`))
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag></Part></CompleteMultipartUpload>`))
	f.Add([]byte(`<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>`))
	f.Add([]byte(`<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>`))
	f.Add([]byte(`<AccessControlPolicy><AccessControlList><Grant><Grantee><URI>x</URI></Grantee><Permission>READ</Permission></Grant></AccessControlList></AccessControlPolicy>`))
	f.Add([]byte(`<Delete><Object><Key>`))
	f.Add([]byte(`<!DOCTYPE x [<!ENTITY a "aaaa">]><Delete>&a;</Delete>`))
	f.Add([]byte(`<VersioningConfiguration><Status>Enabled</Status><MfaDelete>Disabled</MfaDelete></VersioningConfiguration>`))
	f.Add([]byte(`<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule></ObjectLockConfiguration>`))
	f.Add([]byte(`<Retention><Mode>COMPLIANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>`))
	f.Add([]byte(`<LegalHold><Status>ON</Status></LegalHold>`))
	f.Add([]byte(`<LifecycleConfiguration><Rule><ID>r</ID><Status>Enabled</Status><Filter><And><Prefix>a/</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter><Expiration><Days>3</Days></Expiration><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule></LifecycleConfiguration>`))
	f.Add([]byte(`<LifecycleConfiguration><Rule><Status>Enabled</Status><Prefix>x</Prefix><Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration><AbortIncompleteMultipartUpload><DaysAfterInitiation>2</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule></LifecycleConfiguration>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Lifecycle: a 400 or 501, or rules meta can run (one expiration at
		// most, periods positive).
		var lc lifecycleConfiguration
		if err := readXML(&body{r: bytes.NewReader(data)}, &lc); err == nil {
			rules, err := lifecycleRules(&lc)
			if err != nil {
				if ae, ok := err.(*apiError); !ok || ae.status != 400 && ae.status != 501 {
					t.Fatalf("a bad lifecycle configuration gave %v", err)
				}
			}
			for _, r := range rules {
				if r.ExpirationDays < 0 || r.NoncurrentDays < 0 || r.AbortUploadDays < 0 || r.ExpirationDateNs < 0 ||
					r.ExpirationDays > 0 && r.ExpirationDateNs > 0 {
					t.Fatalf("accepted rule %v", r)
				}
			}
		}
		// The lock configuration's own checks: a 400 or a request meta
		// can take (a mode, one positive period).
		if req, err := parseLockConfig(&body{r: bytes.NewReader(data)}); err != nil {
			if ae, ok := err.(*apiError); !ok || ae.status != 400 {
				t.Fatalf("a bad lock configuration gave %v, want a 400 S3 error", err)
			}
		} else if d := req.DefaultRetention; d != nil && (d.Mode != "GOVERNANCE" && d.Mode != "COMPLIANCE" || (d.Days == 0) == (d.Years == 0)) {
			t.Fatalf("accepted default retention %v", d)
		}
		// POST Object's tagging field: a 400, or at most 10 checked tags.
		if tags, err := parseTaggingXML(string(data)); err != nil {
			if ae, ok := err.(*apiError); !ok || ae.status != 400 {
				t.Fatalf("a bad tagging field gave %v, want a 400 S3 error", err)
			}
		} else if len(tags) > 10 || checkTags(tags) != nil {
			t.Fatalf("accepted tags %v", tags)
		}
		for _, v := range []any{&deleteRequest{}, &completeMultipartUpload{}, &corsConfiguration{}, &tagging{}, &aclIn{}, &createBucketConfiguration{},
			&versioningConfiguration{}, &objectLockConfiguration{}, &retentionXML{}, &legalHoldXML{}} {
			err := readXML(&body{r: bytes.NewReader(data)}, v)
			if err != nil {
				if ae, ok := err.(*apiError); !ok || ae.status != 400 {
					t.Fatalf("a bad body gave %v, want a 400 S3 error", err)
				}
			}
		}
	})
}

// FuzzCopySourceRange: x-amz-copy-source-range is outside input; a range
// accepted lies within the source and is not empty.
func FuzzCopySourceRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=5-3", "bytes=-3", "0-3", "bytes=0-", "bytes=9223372036854775807-9223372036854775807", "bytes=1-1"} {
		f.Add(s, int64(10))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			return
		}
		off, n, err := copySourceRange(h, size)
		if err != nil {
			return
		}
		if off < 0 || n < 1 || off+n > size {
			t.Fatalf("%q of %d bytes: offset %d length %d", h, size, off, n)
		}
	})
}

// TestParseTaggingXML: POST Object's tagging field, a Tagging document.
func TestParseTaggingXML(t *testing.T) {
	for _, tc := range []struct {
		doc, want, code string
	}{
		{"", "map[]", ""},
		{`<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag><Tag><Key>b</Key><Value></Value></Tag></TagSet></Tagging>`, "map[a:1 b:]", ""},
		{`<Tagging><TagSet>`, "", "MalformedXML"},
		{`<Tagging><TagSet><Tag><Key>a</Key></Tag><Tag><Key>a</Key></Tag></TagSet></Tagging>`, "", "InvalidTag"},
		{`<Tagging><TagSet><Tag><Key></Key><Value>v</Value></Tag></TagSet></Tagging>`, "", "InvalidTag"},
		{`<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>`, "map[k:]", ""},
	} {
		tags, err := parseTaggingXML(tc.doc)
		code := ""
		if ae, ok := err.(*apiError); ok {
			code = ae.code
		} else if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		if code != tc.code || err == nil && fmt.Sprint(tags) != tc.want && !(tags == nil && tc.want == "map[]") {
			t.Fatalf("%q: %v %v, want %s %s", tc.doc, tags, err, tc.want, tc.code)
		}
	}
	var many strings.Builder
	many.WriteString("<Tagging><TagSet>")
	for i := range 11 {
		fmt.Fprintf(&many, "<Tag><Key>k%d</Key><Value>v</Value></Tag>", i)
	}
	many.WriteString("</TagSet></Tagging>")
	if _, err := parseTaggingXML(many.String()); err == nil {
		t.Fatal("11 tags accepted")
	}
}
