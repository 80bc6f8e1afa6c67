package console

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"

	"cairn/errors"
)

// asUser returns a copy of r addressed to the native API at target, with
// the session's credentials and without the console's cookie and token.
func asUser(r *http.Request, s *session, target string, q url.Values) *http.Request {
	req := r.Clone(r.Context())
	req.URL = &url.URL{Path: target, RawQuery: q.Encode()}
	req.RequestURI = ""
	req.Header.Del("Cookie")
	req.Header.Del(csrfHeader)
	req.Header.Del("Origin")
	req.SetBasicAuth(s.Key, s.Secret)
	return req
}

// namespaces: GET /api/ns lists, PUT /api/ns/{ns}[?visibility=] creates
// or changes visibility, DELETE removes an empty one.
func (c *Console) namespaces(w http.ResponseWriter, r *http.Request, s *session) {
	ns := r.PathValue("ns")
	q := url.Values{}
	if v := r.URL.Query().Get("visibility"); v != "" {
		q.Set("visibility", v)
	}
	c.cfg.Gateway.ServeHTTP(&userWriter{ResponseWriter: w}, asUser(r, s, "/"+ns, q))
}

// files forwards /api/fs/{ns}/{path} to the native API as the user:
// reads (with Range, for previews and media), listings, stat, writes,
// mkdir (a trailing slash), rename and delete. ?download asks the
// browser to save rather than show.
func (c *Console) files(w http.ResponseWriter, r *http.Request, s *session) {
	ns, p := r.PathValue("ns"), r.PathValue("path")
	q := r.URL.Query()
	if q.Has("download") {
		q.Del("download")
		name := path.Base(strings.TrimSuffix(p, "/"))
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	}
	c.cfg.Gateway.ServeHTTP(&userWriter{ResponseWriter: w}, asUser(r, s, "/"+ns+"/"+p, q))
}

// userWriter adjusts the native API's answers for the browser: no Basic
// challenge (it would pop up the browser's own sign-in dialog), and
// stored content that could run as code in the console's origin (HTML,
// SVG) is sandboxed: no script, no same-origin access to the console.
type userWriter struct {
	http.ResponseWriter
	wrote bool
}

func (u *userWriter) WriteHeader(code int) {
	if !u.wrote {
		u.wrote = true
		h := u.Header()
		h.Del("WWW-Authenticate")
		if !inertType(h.Get("Content-Type")) {
			h.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; frame-ancestors 'self'")
		}
		h.Set("X-Frame-Options", "SAMEORIGIN")
	}
	u.ResponseWriter.WriteHeader(code)
}

func (u *userWriter) Write(p []byte) (int, error) {
	if !u.wrote {
		u.WriteHeader(http.StatusOK)
	}
	return u.ResponseWriter.Write(p)
}

func (u *userWriter) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// inertType reports whether content of this type cannot run script in the
// page that shows it: raster images, audio, video, PDF (the browser's
// viewer refuses to work in a sandbox) and the API's own JSON.
func inertType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch {
	case mt == "application/json", mt == "application/pdf":
		return true
	case mt == "image/svg+xml":
		return false
	case strings.HasPrefix(mt, "image/"), strings.HasPrefix(mt, "audio/"), strings.HasPrefix(mt, "video/"):
		return true
	}
	return false
}

// object splits the {ns}/{path} of a request and refuses an empty path.
func object(r *http.Request) (ns, p string, err error) {
	ns, p = r.PathValue("ns"), r.PathValue("path")
	if ns == "" || p == "" || strings.HasSuffix(p, "/") {
		return "", "", errors.E(errors.Invalid, "want /{namespace}/{file path}")
	}
	return ns, p, nil
}
