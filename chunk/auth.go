package chunk

import (
	"net/http"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Authorisation of the data plane (package capability): every HTTP route
// but GET /local needs a capability meta signed for exactly what it does,
// or a verified meta or data-server identity (mutual TLS). No capability
// is 401 Unauthenticated; a bad, expired, forged or too narrow one 403
// Permission; either way nothing is read or changed. The in-process path
// (a *Store called directly) checks nothing: its caller is this process.

// need is the capability a route asks for: op on the request's volume
// (AnyVolume when the route names none) and needle key (0 when it names
// none, which asks for a capability of the whole key range).
type need struct {
	op       capability.Op
	vid, key bool // the route names {vid}, {key}
}

// guard wraps a route's handler with the check of need.
func (s *Store) guard(n need, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authorize(r, n); err != nil {
			writeError(w, r, errors.E(errors.Op("chunk.http.auth"), errors.Path(r.URL.Path), err))
			return
		}
		h(w, r)
	}
}

// authorize checks the request's capability (or peer identity) against n
// and returns the capability (zero for a peer).
func (s *Store) authorize(r *http.Request, n need) (capability.Cap, error) {
	if r.TLS != nil {
		// Per request too: a connection made before the revocation
		// reached this server outlives its handshake.
		if err := s.cfg.Revoked.CheckPeer(r.TLS); err != nil {
			return capability.Cap{}, err
		}
		if role, _, ok := pki.PeerIdentity(r.TLS); ok && (role == pki.RoleMeta || role == pki.RoleData) {
			return capability.Cap{}, nil
		}
	}
	vid, key := uint32(capability.AnyVolume), uint64(0)
	if n.vid {
		v, err := parseVid(r)
		if err != nil {
			return capability.Cap{}, err
		}
		vid = v
	}
	if n.key {
		k, err := parseKey(r)
		if err != nil {
			return capability.Cap{}, err
		}
		key = k
	}
	if !s.caps.Ready() {
		// Meta hands out the keys with the lease: a server that has not
		// heard from it yet can check nothing, like it can serve nothing.
		return capability.Cap{}, errors.E(errors.Unavailable, "data server has no capability keys yet (no lease from meta)")
	}
	return s.caps.Verify(capToken(r), n.op, vid, key)
}

// capToken is the request's capability: the header, else the query
// parameter (a URL that works alone).
func capToken(r *http.Request) string {
	if v := r.Header[capability.Header]; len(v) > 0 {
		return v[0]
	}
	if r.URL.RawQuery == "" {
		return ""
	}
	return r.URL.Query().Get(capability.Query)
}

// CapKeys is the data server's keyring: filled by meta's heartbeat
// answers (or Config.Caps), it verifies every HTTP request and signs the
// server's calls to its peers.
func (s *Store) CapKeys() *capability.Keyring { return s.caps }

// setCapKeys applies the keys of a heartbeat answer: the first signs.
func (s *Store) setCapKeys(keys []*metapb.CapKey) {
	if len(keys) == 0 {
		return
	}
	ks := make([]capability.Key, len(keys))
	for i, k := range keys {
		ks[i] = capability.Key{ID: k.GetId(), Secret: k.GetSecret()}
	}
	s.caps.Set(ks[0], ks[1:]...)
}

// setRevoked applies the revocation list of a heartbeat answer (always
// the whole list).
func (s *Store) setRevoked(list []*metapb.RevokedCert) {
	out := make([]pki.Revoked, len(list))
	for i, r := range list {
		out[i] = pki.Revoked{ID: r.GetId(), Serial: r.GetSerial(), At: time.Unix(0, r.GetRevokedNs())}
	}
	s.cfg.Revoked.Set(out)
}

// Revocations is the list this server refuses peers by (Config.Revoked).
func (s *Store) Revocations() *pki.Revocations { return s.cfg.Revoked }

// peer is a client of another data server, signing each call with this
// server's keys (replication, copies, repair), over TLS with this server's
// data certificate when it has one (Config.TLS).
func (s *Store) peer(addr string) *Remote {
	r := NewRemoteTLS(addr, s.cfg.TLS)
	r.SetCaps(capability.Signer{Keys: s.caps})
	return r
}

// newNeedleCap is the capability a writer gets back for the needle it
// just stored: read and delete of that key (to read it back, or discard it
// if its commit fails), in the namespace and until the expiry of the write
// capability it presented, so that a data server never extends what meta
// granted.
func (s *Store) newNeedleCap(w capability.Cap, vid uint32, key uint64) string {
	if w.Expires.IsZero() {
		return "" // a peer identity wrote, not a capability holder
	}
	tok, err := s.caps.Sign(capability.Cap{Ops: capability.Read | capability.Delete, Volume: vid, First: key, Last: key, Namespace: w.Namespace, Expires: w.Expires})
	if err != nil {
		return ""
	}
	return tok
}
