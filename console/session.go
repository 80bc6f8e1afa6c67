package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

const (
	cookieName = "cairn_console"
	csrfHeader = "X-CSRF-Token"
)

// session is one signed-in browser. The secret stays on the server: the
// browser holds only the id, which it cannot read from script (HttpOnly).
type session struct {
	id, csrf    string
	key, secret string
	root        bool
	expires     time.Time
}

// sessions is the in-memory session table.
type sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

func (ss *sessions) add(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[string]*session{}
	}
	ss.m[s.id] = s
}

func (ss *sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s != nil && !now.Before(s.expires) {
		delete(ss.m, id)
		return nil
	}
	return s
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// sweep forgets expired sessions, so abandoned ones do not pile up.
func (ss *sessions) sweep(now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, s := range ss.m {
		if !now.Before(s.expires) {
			delete(ss.m, id)
		}
	}
}

// session returns the request's session, checking the CSRF token on every
// method that may change state. A cookie is not proof of intent (the
// browser sends it with requests other sites trigger); the token, which
// only the console's own pages can read, is.
func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil, errors.E(errors.Unauthenticated, "not signed in")
	}
	s := c.sessions.get(ck.Value, c.now())
	if s == nil {
		return nil, errors.E(errors.Unauthenticated, "session expired or signed out")
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return s, nil
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.csrf)) != 1 {
		return nil, errors.E(errors.Permission, "missing or wrong CSRF token")
	}
	return s, nil
}

type sessionJSON struct {
	AccessKey string `json:"access_key"`
	Root      bool   `json:"root"`
	CSRF      string `json:"csrf"`
	Expires   string `json:"expires"`
	S3        bool   `json:"s3"` // parted uploads and share links available
}

func (c *Console) sessionJSON(s *session) sessionJSON {
	return sessionJSON{AccessKey: s.key, Root: s.root, CSRF: s.csrf,
		Expires: s.expires.UTC().Format(time.RFC3339), S3: c.cfg.S3 != nil}
}

// handleSession: GET says who is signed in (and hands the page its CSRF
// token), POST signs in, DELETE signs out.
func (c *Console) handleSession(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s, err := c.session(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, c.sessionJSON(s))
	case http.MethodPost:
		c.signIn(w, r)
	case http.MethodDelete:
		s, err := c.session(r)
		if err != nil {
			writeError(w, err)
			return
		}
		c.sessions.remove(s.id)
		http.SetCookie(w, c.cookie(r, "", -1))
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, errors.E(errors.Invalid, "GET, POST or DELETE"))
	}
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	// A cross-site form could post credentials of the attacker's choosing
	// (login CSRF); browsers send Origin on every POST, so refuse others.
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(r, o) {
		writeError(w, errors.E(errors.Permission, "sign-in from another origin"))
		return
	}
	var in struct {
		AccessKey string `json:"access_key"`
		Secret    string `json:"secret"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&in); err != nil || in.AccessKey == "" {
		writeError(w, errors.E(errors.Invalid, "want {access_key, secret}"))
		return
	}
	resp, err := c.cfg.Meta.Authenticate(r.Context(), &metapb.AuthRequest{AccessKey: in.AccessKey, Secret: in.Secret})
	if err != nil {
		if errors.Is(errors.Unavailable, err) || errors.Is(errors.Other, err) {
			writeError(w, err)
			return
		}
		writeError(w, errors.E(errors.Unauthenticated, "invalid access key or secret"))
		return
	}
	s := &session{id: randomToken(), csrf: randomToken(), key: resp.AccessKey, secret: in.Secret,
		root: resp.Root, expires: c.now().Add(c.cfg.SessionTTL)}
	c.sessions.add(s)
	http.SetCookie(w, c.cookie(r, s.id, int(c.cfg.SessionTTL/time.Second)))
	writeJSON(w, http.StatusOK, c.sessionJSON(s))
}

func (c *Console) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: cookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// sameOrigin reports whether an Origin header names this console.
func sameOrigin(r *http.Request, origin string) bool {
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	return origin == scheme+r.Host
}
