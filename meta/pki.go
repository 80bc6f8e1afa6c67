package meta

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Join tokens: meta keeps a JoinTokenRecord (the secret's hash, the role,
// expiry and uses left) under joinTokenKey; CreateJoinToken proposes one
// and Join spends a use in one command, so that two joins racing for the
// last use cannot both win, and the records replicate with the log.

const pJoinToken = 'j'

func joinTokenKey(id string) []byte { return append([]byte{pJoinToken, '/'}, id...) }

const (
	defaultTokenTTL = time.Hour
	maxTokenTTL     = 30 * 24 * time.Hour
	maxTokenUses    = 1000
)

// CreateJoinToken makes a join token for a data server or gateway.
func (s *Service) CreateJoinToken(ctx context.Context, req *metapb.CreateJoinTokenRequest) (*metapb.CreateJoinTokenResponse, error) {
	const op = errors.Op("meta.CreateJoinToken")
	// Root: the call's own credentials (authz.go), or a root pair in the
	// request (which works even through a caller that is not root).
	if c, _ := CallerOf(ctx); !c.Root && c.Role != pki.RoleMeta {
		if ok, root := s.checkSecret(req.AccessKey, req.Secret); !ok || !root || req.AccessKey == "" {
			return nil, errors.E(op, errors.Permission, "only root makes join tokens")
		}
	}
	ca := s.clusterCA() // the group's (secrets.go)
	if ca == nil {
		return nil, errors.E(op, errors.Unavailable, "this meta has no cluster CA")
	}
	role := pki.Role(req.Role)
	// A meta token buys a member of the meta group its certificate
	// (`cairn meta --join`); the group's secrets then reach it with the
	// log (secrets.go).
	if role != pki.RoleData && role != pki.RoleGateway && role != pki.RoleMeta {
		return nil, errors.E(op, errors.Invalid, errors.Path(req.Role), `role must be "data", "gateway" or "meta"`)
	}
	ttl, uses := time.Duration(req.TtlNs), req.Uses
	if ttl == 0 {
		ttl = defaultTokenTTL
	}
	if uses == 0 {
		uses = 1
	}
	if ttl < 0 || ttl > maxTokenTTL || uses > maxTokenUses {
		return nil, errors.E(op, errors.Invalid, "ttl must be at most 720h and uses at most 1000")
	}
	tok := pki.NewJoinToken(ca)
	expires := time.Now().Add(ttl).UnixNano()
	rec := &metapb.JoinTokenRecord{Id: tok.ID, SecretHash: pki.SecretHash(tok.Secret), Role: string(role), ExpiresNs: expires, Uses: uses}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutJoinToken{PutJoinToken: rec}}); err != nil {
		return nil, errors.E(op, err)
	}
	return &metapb.CreateJoinTokenResponse{Token: tok.String(), ExpiresNs: expires}, nil
}

// Join spends a use of the caller's token and certifies its public key
// for the token's role.
func (s *Service) Join(ctx context.Context, req *metapb.JoinRequest) (*metapb.JoinResponse, error) {
	const op = errors.Op("meta.Join")
	ca := s.clusterCA()
	if ca == nil { // then no token can be valid here
		return nil, errors.E(op, errors.Unauthenticated, "this meta has no cluster CA: it takes no join tokens")
	}
	tok, err := pki.ParseJoinToken(req.Token)
	if err != nil {
		return nil, errors.E(op, errors.Unauthenticated, err)
	}
	if tok.CAHash != ca.Fingerprint() {
		return nil, errors.E(op, errors.Unauthenticated, "the token is for another cluster")
	}
	if req.Name == "" || len(req.Name) > 255 || len(req.Sans) > 32 {
		return nil, errors.E(op, errors.Invalid, "a name (at most 255 bytes) and at most 32 SANs")
	}
	pub, err := x509.ParsePKIXPublicKey(req.PublicKey)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	res, err := s.propose(&metapb.Command{Op: &metapb.Command_UseJoinToken{UseJoinToken: &metapb.UseJoinTokenCommand{
		Id: tok.ID, SecretHash: pki.SecretHash(tok.Secret)}}})
	if err != nil {
		return nil, errors.E(op, err)
	}
	role := pki.Role(res.joinRole)
	der, err := ca.Sign(pub, role, req.Name, req.Sans, pki.CertLifetime)
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.log.Info("joined", "role", role, "name", req.Name, "token", tok.ID)
	return &metapb.JoinResponse{Cert: der, Ca: ca.PEM, Role: string(role)}, nil
}

// putJoinToken stores a token, dropping any that expired.
func (t *txn) putJoinToken(rec *metapb.JoinTokenRecord) error {
	if rec.Id == "" || len(rec.SecretHash) == 0 || rec.Uses == 0 {
		return errors.E(errors.Invalid, "incomplete join token")
	}
	var expired []string
	prefix := joinTokenKey("")
	err := t.v.scanFrom(prefix, prefix, func() proto.Message { return &metapb.JoinTokenRecord{} }, func(m proto.Message) bool {
		if r := m.(*metapb.JoinTokenRecord); r.ExpiresNs <= t.now {
			expired = append(expired, r.Id)
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, id := range expired {
		if err := t.del(joinTokenKey(id)); err != nil {
			return err
		}
	}
	return t.put(joinTokenKey(rec.Id), rec)
}

// useJoinToken spends one use of a token whose secret matches and that
// has not expired; the last use deletes it. Every refusal is the same
// error, so a caller learns nothing about which tokens exist.
func (t *txn) useJoinToken(c *metapb.UseJoinTokenCommand) error {
	refused := errors.E(errors.Unauthenticated, "join token unknown, used up, expired or wrong")
	rec := &metapb.JoinTokenRecord{}
	found, err := t.v.getProto(joinTokenKey(c.Id), rec)
	if err != nil {
		return err
	}
	if !found {
		return refused
	}
	if subtle.ConstantTimeCompare(rec.SecretHash, c.SecretHash) != 1 {
		return refused
	}
	if rec.ExpiresNs <= t.now || rec.Uses == 0 {
		return refused // swept by the next putJoinToken
	}
	t.res.joinRole = rec.Role
	if rec.Uses--; rec.Uses == 0 {
		return t.del(joinTokenKey(c.Id))
	}
	return t.put(joinTokenKey(c.Id), rec)
}

// joinWait bounds how long a join looks for the meta group's leader: an
// election takes a second or two, longer on a loaded machine.
const joinWait = 30 * time.Second

// joinLeader sends req to the member at addr, or to the leader it names
// when it does not lead. A refusal for not leading is retried (with none
// named, an election is under way): it consumed nothing of the token.
// Any other failure is final, since a join that reached the leader may
// have used the token up.
func joinLeader(ctx context.Context, addr string, pinned *tls.Config, req *metapb.JoinRequest) (*metapb.JoinResponse, error) {
	deadline := time.Now().Add(joinWait)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		mc, conn, err := Dial(addr, DialTLS(pinned))
		if err != nil {
			return nil, err
		}
		resp, err := mc.Join(ctx, req)
		conn.Close()
		leader, refused := LeaderOf(err)
		if err == nil || !refused || time.Now().After(deadline) {
			return resp, err
		}
		if leader != "" {
			addr = leader
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// JoinCluster returns the identity kept in dir, or, with none there yet,
// joins the cluster whose meta is at addr with token: it makes a key,
// trades the token for a certificate naming name (and sans) and keeps both
// in dir, so that a restart reuses them without a new token. The first
// contact trusts meta only if its chain holds the CA the token pins.
func JoinCluster(ctx context.Context, addr, token, dir, name string, sans []string) (*pki.Node, error) {
	const op = errors.Op("meta.JoinCluster")
	n, err := pki.LoadNodeDir(dir)
	if err == nil || !errors.Is(errors.NotExist, err) {
		return n, err
	}
	if token == "" {
		return nil, errors.E(op, errors.Unauthenticated, errors.Path(dir), "no certificate kept here and no join token given (cairn admin join-token)")
	}
	tok, err := pki.ParseJoinToken(token)
	if err != nil {
		return nil, errors.E(op, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	resp, err := joinLeader(ctx, addr, tok.PinnedConfig(), &metapb.JoinRequest{Token: token, PublicKey: pub, Name: name, Sans: sans})
	if err != nil {
		return nil, errors.E(op, errors.Path(addr), err)
	}
	ca, err := pki.ParseCA(resp.Ca)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if ca.Fingerprint() != tok.CAHash {
		return nil, errors.E(op, errors.Unauthenticated, "meta answered with a CA the token does not name")
	}
	leaf, err := x509.ParseCertificate(resp.Cert)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	n = &pki.Node{Cert: tls.Certificate{Certificate: [][]byte{resp.Cert, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, CA: ca}
	if err := n.Save(dir); err != nil {
		return nil, errors.E(op, err)
	}
	return n, nil
}
