package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

const (
	cookieName = "cairn_console"
	csrfHeader = "X-CSRF-Token"
)

// session is one signed-in browser. It travels sealed (AES-256-GCM under
// the console's key) in an HttpOnly cookie: the browser holds it but can
// neither read nor forge it, and a gateway restarted with the same key
// (Config.KeyFile) takes it back, so a restart signs no one out.
type session struct {
	ID      string `json:"i"`
	CSRF    string `json:"c"`
	Key     string `json:"k"`
	Secret  string `json:"s"`
	Root    bool   `json:"r,omitempty"`
	Expires int64  `json:"e"` // unix seconds
}

func (s *session) expires() time.Time { return time.Unix(s.Expires, 0) }

// sessions seals and opens session cookies, and remembers the sessions
// signed out before they expire (in memory: a cookie copied before its
// sign-out works again after a restart, until it expires).
type sessions struct {
	aead cipher.AEAD

	mu      sync.Mutex
	revoked map[string]time.Time // id -> expiry
}

func newSessions(key []byte) (*sessions, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sessions{aead: aead, revoked: map[string]time.Time{}}, nil
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// cookieAD binds a sealed value to its use: another cookie or token sealed
// under the same key cannot stand in for a session.
var cookieAD = []byte("cairn console session v1")

// seal returns the cookie value of s.
func (ss *sessions) seal(s *session) string {
	plain, _ := json.Marshal(s)
	nonce := make([]byte, ss.aead.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(ss.aead.Seal(nonce, nonce, plain, cookieAD))
}

// open returns the session a cookie value seals, if it is one, unexpired
// and not signed out.
func (ss *sessions) open(value string, now time.Time) *session {
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < ss.aead.NonceSize() {
		return nil
	}
	n := ss.aead.NonceSize()
	plain, err := ss.aead.Open(nil, b[:n], b[n:], cookieAD)
	if err != nil {
		return nil
	}
	var s session
	if json.Unmarshal(plain, &s) != nil || s.ID == "" || !now.Before(s.expires()) {
		return nil
	}
	ss.mu.Lock()
	_, gone := ss.revoked[s.ID]
	ss.mu.Unlock()
	if gone {
		return nil
	}
	return &s
}

// revoke signs s out.
func (ss *sessions) revoke(s *session) {
	ss.mu.Lock()
	ss.revoked[s.ID] = s.expires()
	ss.mu.Unlock()
}

// sweep forgets sign-outs of sessions that have expired anyway.
func (ss *sessions) sweep(now time.Time) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, exp := range ss.revoked {
		if !now.Before(exp) {
			delete(ss.revoked, id)
		}
	}
}

// loadKey returns the session key kept in path, making one (0600) if there
// is none; empty path: a key of this process only.
func loadKey(path string) ([]byte, error) {
	const op = errors.Op("console.loadKey")
	key := make([]byte, 32)
	if path == "" {
		rand.Read(key)
		return key, nil
	}
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != len(key) {
			return nil, errors.E(op, errors.Corrupt, errors.Path(path), "the console's session key is not 32 bytes")
		}
		return b, nil
	}
	if !os.IsNotExist(err) {
		return nil, errors.E(op, errors.IO, errors.Path(path), err)
	}
	rand.Read(key)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, errors.E(op, errors.IO, errors.Path(path), err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if os.IsExist(err) { // another process made it first: use theirs
			return loadKey(path)
		}
		return nil, errors.E(op, errors.IO, errors.Path(path), err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, errors.E(op, errors.IO, errors.Path(path), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, errors.E(op, errors.IO, errors.Path(path), err)
	}
	return key, f.Close()
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
	s := c.sessions.open(ck.Value, c.now())
	if s == nil {
		return nil, errors.E(errors.Unauthenticated, "session expired or signed out")
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return s, nil
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.CSRF)) != 1 {
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
	return sessionJSON{AccessKey: s.Key, Root: s.Root, CSRF: s.CSRF,
		Expires: s.expires().UTC().Format(time.RFC3339), S3: c.cfg.S3 != nil}
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
		c.sessions.revoke(s)
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
	// Guessing secrets costs time: attempts per address and failures per
	// key are limited (ratelimit.go).
	now := c.now()
	if wait := c.limits.allow(clientIP(r), in.AccessKey, now); wait > 0 {
		tooMany(w, wait)
		return
	}
	resp, err := c.cfg.Meta.Authenticate(r.Context(), &metapb.AuthRequest{AccessKey: in.AccessKey, Secret: in.Secret})
	if err != nil {
		if errors.Is(errors.Unavailable, err) || errors.Is(errors.Other, err) {
			writeError(w, err)
			return
		}
		c.limits.failed(in.AccessKey, now)
		writeError(w, errors.E(errors.Unauthenticated, "invalid access key or secret"))
		return
	}
	s := &session{ID: randomToken(), CSRF: randomToken(), Key: resp.AccessKey, Secret: in.Secret,
		Root: resp.Root, Expires: now.Add(c.cfg.SessionTTL).Unix()}
	http.SetCookie(w, c.cookie(r, c.sessions.seal(s), int(c.cfg.SessionTTL/time.Second)))
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
