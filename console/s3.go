package console

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"cairn/errors"
)

// The console reaches the S3 handler in process, signing as the user: a
// parted upload and a share link are then exactly what the user's key
// may do over S3, checked by the S3 layer itself.

const (
	s3Host   = "console.cairn.internal" // Host of in-process S3 calls; any host not under --s3-domain is path-style
	s3Region = "us-east-1"
)

var signer = v4.NewSigner()

func signOpts(o *v4.SignerOptions) {
	o.DisableURIPathEscaping = true // the path below is already S3's canonical encoding
}

// s3Escape is S3's canonical URI encoding of an object path: every byte
// but the unreserved characters and '/' percent-encoded.
func s3Escape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		ch := p[i]
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' || strings.IndexByte("-._~/", ch) >= 0 {
			b.WriteByte(ch)
			continue
		}
		b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[ch>>4])+string("0123456789abcdef"[ch&15])))
	}
	return b.String()
}

// s3Request builds a signed request for /{ns}/{p} to the S3 handler.
func s3Request(ctx context.Context, s *session, method, ns, p string, q url.Values, body io.Reader, size int64) (*http.Request, error) {
	u := &url.URL{Scheme: "http", Host: s3Host, Path: "/" + ns + "/" + p, RawPath: "/" + ns + "/" + s3Escape(p), RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: s.Key, SecretAccessKey: s.Secret}
	if err := signer.SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", s3Region, time.Now(), signOpts); err != nil {
		return nil, errors.E(errors.Other, err)
	}
	return req, nil
}

// s3Do runs a request through the S3 handler and returns its answer;
// an S3 error becomes a console error of the same status.
func (c *Console) s3Do(req *http.Request) (*recorder, error) {
	rec := &recorder{h: http.Header{}, code: http.StatusOK}
	c.cfg.S3.ServeHTTP(rec, req)
	if rec.code >= 300 {
		var e struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		xml.Unmarshal(rec.body.Bytes(), &e)
		return rec, &s3Error{code: rec.code, s3code: e.Code, msg: e.Message}
	}
	return rec, nil
}

// s3Error is an S3 layer refusal, passed on with its status.
type s3Error struct {
	code        int
	s3code, msg string
}

func (e *s3Error) Error() string { return e.s3code + ": " + e.msg }

func (c *Console) writeS3Error(w http.ResponseWriter, err error) {
	if e, ok := err.(*s3Error); ok {
		var body struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		body.Error.Code, body.Error.Message = e.s3code, e.msg
		writeJSON(w, e.code, body)
		return
	}
	writeError(w, err)
}

// recorder keeps a small in-process answer (never an object's body).
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
	sent bool
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if !r.sent {
		r.code, r.sent = code, true
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.sent = true
	if r.body.Len() > 1<<20 {
		return 0, errors.E(errors.TooLarge, "answer too large")
	}
	return r.body.Write(p)
}
