package capability

import (
	"context"
	"time"
)

// Source gives the capability a data-plane call presents: the client
// library's store of tokens from meta, or a Keyring that signs its own.
type Source interface {
	// Token returns the token for op on needle key of volume vid (key 0:
	// the call names no key), or "" if it has none.
	Token(ctx context.Context, op Op, vid uint32, key uint64) string
}

// Keeper is a Source that also takes the tokens a data server hands back:
// the read and delete capability of a needle just written.
type Keeper interface {
	Source
	Keep(vid uint32, key uint64, token string)
}

type ctxKey struct{}

// NewContext returns ctx carrying src for the data-plane calls made with it.
func NewContext(ctx context.Context, src Source) context.Context {
	return context.WithValue(ctx, ctxKey{}, src)
}

// FromContext returns the Source ctx carries, or nil.
func FromContext(ctx context.Context) Source {
	src, _ := ctx.Value(ctxKey{}).(Source)
	return src
}

// Signer makes a Keyring a Source: each call gets a capability for exactly
// its operation, volume and key, good for TTL.
type Signer struct {
	Keys *Keyring
	TTL  time.Duration // default one minute
	NS   string
}

// Token signs a capability for the call; "" if the keyring has no key.
func (s Signer) Token(_ context.Context, op Op, vid uint32, key uint64) string {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	first, last := key, key
	if key == 0 {
		first, last = 0, AllKeys
	}
	tok, err := s.Keys.Mint(op, vid, first, last, s.NS, ttl)
	if err != nil {
		return ""
	}
	return tok
}
