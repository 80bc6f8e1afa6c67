package gateway

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// principal is who makes a request; the zero value is anonymous. Its
// grants are the same ones S3 honours: one set of keys for every way in.
type principal struct {
	key    string
	root   bool
	grants map[string]metapb.S3Access
}

// authCache remembers the outcome of checking a key and secret, so a warm
// request makes no metadata call. Entries are keyed by a hash of the pair,
// never the secret itself. Failures are remembered briefly, so a client
// retrying bad credentials cannot turn every request into a meta call.
type authCache struct {
	mu      sync.Mutex
	entries map[[32]byte]authEntry
}

type authEntry struct {
	p       principal
	err     error
	expires time.Time
}

const (
	authOK   = 5 * time.Minute
	authFail = 5 * time.Second
)

func (g *Gateway) authenticate(r *http.Request) (principal, error) {
	key, secret, ok := r.BasicAuth()
	if !ok {
		if r.Header.Get("Authorization") != "" {
			return principal{}, errors.E(errors.Unauthenticated, "only HTTP Basic authentication is accepted")
		}
		return principal{}, nil
	}
	h := sha256.Sum256([]byte(key + "\x00" + secret))
	now := time.Now()
	g.auth.mu.Lock()
	e, hit := g.auth.entries[h]
	g.auth.mu.Unlock()
	if hit && now.Before(e.expires) {
		return e.p, e.err
	}
	resp, err := g.meta.Authenticate(r.Context(), &metapb.AuthRequest{AccessKey: key, Secret: secret})
	e = authEntry{expires: now.Add(authOK)}
	switch {
	case err == nil:
		e.p = principal{key: resp.AccessKey, root: resp.Root, grants: resp.Grants}
	case errors.Is(errors.Unauthenticated, err) || errors.Is(errors.NotExist, err) || errors.Is(errors.Permission, err):
		e.err = errors.E(errors.Unauthenticated, "invalid access key or secret")
		e.expires = now.Add(authFail)
	default:
		return principal{}, err // meta unreachable: do not cache
	}
	g.auth.mu.Lock()
	if len(g.auth.entries) > 100_000 {
		clear(g.auth.entries)
	}
	g.auth.entries[h] = e
	g.auth.mu.Unlock()
	return e.p, e.err
}

// access is what a request needs on a namespace.
type access int

const (
	read access = iota
	write
)

// authorize loads the namespace (cached, kept coherent by meta's change
// stream) and decides whether p may read or write it. Anonymous callers
// who are refused get 401 so that clients retry with credentials.
func (g *Gateway) authorize(ctx context.Context, p principal, ns string, a access) (*metapb.Namespace, error) {
	n, err := g.client.Namespace(ctx, ns)
	if err != nil {
		if errors.Is(errors.NotExist, err) {
			return nil, errNoNamespace{errors.E(errors.NotExist, errors.Path(ns), "no such namespace")}
		}
		return nil, err
	}
	switch {
	case p.may(n, a):
		return n, nil
	case p.key == "":
		return nil, errors.E(errors.Unauthenticated, errors.Path(ns), "this namespace needs credentials")
	default:
		return nil, errors.E(errors.Permission, errors.Path(ns), "access denied")
	}
}

// may reports whether p may read or write namespace n, by the rule meta
// applies to every call (meta.Rights).
func (p principal) may(n *metapb.Namespace, a access) bool {
	mayRead, mayWrite, _ := meta.Rights(p.key, p.root, p.grants, n)
	return mayWrite || a == read && mayRead
}
