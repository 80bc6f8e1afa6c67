package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"cairn/errors"
)

// maxShare is the longest a share link lives: SigV4's limit for
// presigned URLs.
const maxShare = 7 * 24 * time.Hour

// share makes a share link for a file: a SigV4 presigned GET signed with
// the user's key, served by this console at /share/{ns}/{path}. The S3
// layer verifies it (signature, expiry, the key's access), so a link
// stops working when it expires or the key is deleted, and grants no
// more than the key could read.
func (c *Console) share(w http.ResponseWriter, r *http.Request, s *session) {
	if c.cfg.S3 == nil {
		writeError(w, errors.E(errors.Unavailable, "share links need the S3 layer"))
		return
	}
	ns, p, err := object(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var in struct {
		Seconds int64 `json:"expires_in"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil {
		writeError(w, errors.E(errors.Invalid, "want {expires_in: seconds}"))
		return
	}
	ttl := time.Duration(in.Seconds) * time.Second
	if ttl < time.Second || ttl > maxShare {
		writeError(w, errors.E(errors.Invalid, "expires_in must be 1 s to 7 days"))
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u := &url.URL{Scheme: scheme, Host: r.Host, Path: "/" + ns + "/" + p, RawPath: "/" + ns + "/" + s3Escape(p),
		RawQuery: url.Values{"X-Amz-Expires": {strconv.FormatInt(in.Seconds, 10)}}.Encode()}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		writeError(w, errors.E(errors.Invalid, err))
		return
	}
	now := time.Now() // the S3 layer checks expiry against its own clock
	signed, _, err := signer.PresignHTTP(r.Context(), aws.Credentials{AccessKeyID: s.Key, SecretAccessKey: s.Secret},
		req, "UNSIGNED-PAYLOAD", "s3", s3Region, now, signOpts)
	if err != nil {
		writeError(w, errors.E(errors.Other, err))
		return
	}
	su, err := url.Parse(signed)
	if err != nil {
		writeError(w, errors.E(errors.Other, err))
		return
	}
	link := scheme + "://" + r.Host + "/share" + su.EscapedPath() + "?" + su.RawQuery
	writeJSON(w, http.StatusOK, map[string]string{"url": link, "expires": now.Add(ttl).UTC().Format(time.RFC3339)})
}

// shared serves a share link: the S3 handler checks the presigned
// signature; no session is needed or used.
func (c *Console) shared(w http.ResponseWriter, r *http.Request) {
	if c.cfg.S3 == nil {
		writeError(w, errors.E(errors.NotExist, "no share links here"))
		return
	}
	ns, p := r.PathValue("ns"), r.PathValue("path")
	req := r.Clone(r.Context())
	req.URL = &url.URL{Path: "/" + ns + "/" + p, RawPath: "/" + ns + "/" + s3Escape(p), RawQuery: r.URL.RawQuery}
	req.RequestURI = ""
	req.Header.Del("Cookie")
	c.cfg.S3.ServeHTTP(&userWriter{ResponseWriter: w}, req)
}
