package meta

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Caller is who makes a call: a cluster role proven by its certificate
// (meta, data, gateway), a user proven by an access key and secret (or
// named by a gateway acting on the user's behalf), or, with neither,
// anonymous. Meta authorises every call by it (authz.go).
type Caller struct {
	Role pki.Role // a cluster role; "" for a user or anonymous
	ID   string   // the role's certificate name, or the gateway a user's call came through

	Key    string // the user's access key; "" for a role or anonymous
	User   string // the user's name ("root" for the root key; "" for a key made by CreateUser)
	Root   bool
	Grants map[string]metapb.S3Access // namespace -> access, beyond what the user owns
}

// Anonymous reports whether the caller proved nothing.
func (c Caller) Anonymous() bool { return c.Role == "" && c.Key == "" }

// String names the caller in errors and logs.
func (c Caller) String() string {
	switch {
	case c.Role != "":
		return string(c.Role) + " " + c.ID
	case c.Key != "":
		return "access key " + c.Key
	}
	return "an anonymous caller"
}

// Metadata keys of a call. Credentials travel only over TLS (see
// Credentials); on-behalf-of is honoured only from a gateway identity.
const (
	mdAccessKey = "cairn-access-key"
	mdSecret    = "cairn-secret"
	mdFor       = "cairn-for" // a gateway acting for this access key ("" for an anonymous request)
)

// Credentials are a user's access key and secret sent with every call
// (grpc.WithPerRPCCredentials; see WithUser). They are never sent over a
// connection without transport security.
type Credentials struct{ AccessKey, Secret string }

var _ credentials.PerRPCCredentials = Credentials{}

func (c Credentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{mdAccessKey: c.AccessKey, mdSecret: c.Secret}, nil
}

// RequireTransportSecurity keeps secrets off plaintext connections: gRPC
// fails the call rather than send them.
func (Credentials) RequireTransportSecurity() bool { return true }

// WithUser is the dial option of a client calling as a user.
func WithUser(accessKey, secret string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(Credentials{AccessKey: accessKey, Secret: secret})
}

type callerKey struct{}
type forKey struct{}

// WithCaller returns ctx naming who an in-process caller is (the embedder
// of Local says: `cairn server` runs its gateway as a gateway identity).
// A context value never crosses the wire, so only code in this process
// can set it.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// OnBehalfOf returns ctx for a gateway's call made for a user (access key;
// "" for an anonymous request): meta then checks that user's rights, not
// the gateway's. It works over gRPC (metadata) and in-process (Local).
func OnBehalfOf(ctx context.Context, accessKey string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, mdFor, accessKey)
	return context.WithValue(ctx, forKey{}, accessKey)
}

// CallerOf returns the caller a handler runs for (set by serve).
func CallerOf(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// caller establishes who makes the call in ctx: the identity an in-process
// embedder gave, else the verified certificate of the TLS peer, else the
// credentials in the call's metadata; then a gateway's on-behalf-of.
func (s *Service) caller(ctx context.Context) (Caller, error) {
	c, local := CallerOf(ctx)
	var md metadata.MD
	if !local {
		md, _ = metadata.FromIncomingContext(ctx)
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				// Checked per call too: a connection made before a
				// revocation outlives its handshake.
				if err := s.cfg.Revoked.CheckPeer(&ti.State); err != nil {
					return Caller{}, err
				}
				if role, id, ok := pki.PeerIdentity(&ti.State); ok {
					c = Caller{Role: role, ID: id}
				}
			} else if p.AuthInfo == nil && s.cfg.TrustPlaintext {
				c = Caller{Role: pki.RoleMeta, ID: "plaintext"}
			}
		}
		if key := first(md, mdAccessKey); key != "" && c.Role == "" {
			u, err := s.verify(key, first(md, mdSecret))
			if err != nil {
				return Caller{}, err
			}
			c = u
		}
	}
	// On behalf of a user: only a gateway (or meta) may say so.
	var forUser string
	var hasFor bool
	if local {
		forUser, hasFor = ctx.Value(forKey{}).(string)
	} else if v := md.Get(mdFor); len(v) > 0 {
		forUser, hasFor = v[0], true
	}
	if !hasFor {
		return c, nil
	}
	if c.Role != pki.RoleGateway && c.Role != pki.RoleMeta {
		return Caller{}, errors.E(errors.Permission, "only a gateway may act on a user's behalf; "+c.String()+" is not one")
	}
	if forUser == "" {
		return Caller{ID: c.ID}, nil
	}
	u, err := s.lookupUser(forUser)
	if err != nil {
		return Caller{}, err
	}
	u.ID = c.ID
	return u, nil
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// callerCache remembers verified credentials briefly, so a warm call costs
// no store read and no hash. Entries are keyed by a hash of the pair, never
// the secret itself. Failures are remembered for less time, so retried bad
// credentials do not each cost a lookup. A deleted key or a changed grant
// takes effect once its entry expires (callerTTL).
type callerCache struct {
	mu      sync.Mutex
	entries map[[32]byte]callerEntry
}

type callerEntry struct {
	c       Caller
	err     error
	expires time.Time
}

const (
	callerTTL     = 30 * time.Second
	callerFailTTL = 5 * time.Second
)

func (cc *callerCache) get(h [32]byte, now time.Time) (callerEntry, bool) {
	cc.mu.Lock()
	e, ok := cc.entries[h]
	cc.mu.Unlock()
	return e, ok && now.Before(e.expires)
}

func (cc *callerCache) put(h [32]byte, e callerEntry) {
	cc.mu.Lock()
	if cc.entries == nil || len(cc.entries) > 100_000 {
		cc.entries = map[[32]byte]callerEntry{}
	}
	cc.entries[h] = e
	cc.mu.Unlock()
}

// verify checks an access key and secret (cached).
func (s *Service) verify(key, secret string) (Caller, error) {
	return s.callers.load(sha256.Sum256([]byte(key+"\x00"+secret)), func() (Caller, error) { return s.checkUser(key, secret) })
}

// lookupUser is the user a gateway vouches for (cached like verify; the
// hashed "\x01for\x00" + key cannot be the hash of a pair).
func (s *Service) lookupUser(key string) (Caller, error) {
	return s.callers.load(sha256.Sum256([]byte("\x01for\x00"+key)), func() (Caller, error) { return s.userOf(key, "", false) })
}

// load returns the cached outcome for h, or loads and caches it. A store
// failure is not cached.
func (cc *callerCache) load(h [32]byte, f func() (Caller, error)) (Caller, error) {
	now := time.Now()
	if e, ok := cc.get(h, now); ok {
		return e.c, e.err
	}
	c, err := f()
	e := callerEntry{c: c, err: err, expires: now.Add(callerTTL)}
	if err != nil {
		if !errors.Is(errors.Unauthenticated, err) {
			return Caller{}, err
		}
		e.expires = now.Add(callerFailTTL)
	}
	cc.put(h, e)
	return c, err
}

var errBadCredentials = errors.E(errors.Unauthenticated, "bad access key or secret")

// checkUser verifies a pair against the one set of keys: the keys made by
// `cairn admin key create` (sK/, sealed secret, user name and grants) and
// those of the native store (u/, hashed secret: the root pair and keys of
// CreateUser), in constant time for unknown keys too.
func (s *Service) checkUser(key, secret string) (Caller, error) {
	if key == "" {
		return Caller{}, errBadCredentials
	}
	return s.userOf(key, secret, true)
}

// userOf loads the user of access key; with check, only if secret is its
// secret.
func (s *Service) userOf(key, secret string, check bool) (Caller, error) {
	if key == "" {
		return Caller{}, errBadCredentials
	}
	v, err := s.readView()
	if err != nil {
		return Caller{}, err
	}
	defer v.close()
	k := &metapb.S3Key{}
	found, err := v.getProto(s3KeyKey(key), k)
	if err != nil {
		return Caller{}, err
	}
	if found {
		if check {
			plain, err := s.unseal(k)
			if err != nil {
				return Caller{}, err
			}
			if subtle.ConstantTimeCompare([]byte(plain), []byte(secret)) != 1 {
				return Caller{}, errBadCredentials
			}
		}
		return Caller{Key: k.AccessKey, User: k.User, Root: k.Root, Grants: k.Grants}, nil
	}
	u := &metapb.User{}
	found, err = v.getProto(userKey(key), u)
	if err != nil {
		return Caller{}, err
	}
	if !found {
		u = &metapb.User{Salt: make([]byte, 16), Hash: make([]byte, sha256.Size)}
	}
	if check && subtle.ConstantTimeCompare(hashSecret(u.Salt, secret), u.Hash) != 1 || !found {
		return Caller{}, errBadCredentials
	}
	c := Caller{Key: key, Root: u.Root}
	if u.Root {
		c.User = "root"
	}
	return c, nil
}
