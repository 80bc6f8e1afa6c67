package meta

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"path/filepath"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

const (
	accessKeyLen = 20
	secretLen    = 40
	// RootCredentialsFile is written in Config.Dir when Open generates
	// the root pair.
	RootCredentialsFile = "root.credentials"
)

// Secrets are 40 random characters (about 238 bits), so a salted fast hash
// is enough: there is nothing to brute-force that a slow hash would save.
func hashSecret(salt []byte, secret string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(secret))
	return h.Sum(nil)
}

func randomFrom(n int, alphabet string) string {
	b := make([]byte, n)
	// Rejection sampling keeps every character equally likely.
	limit := 256 - 256%len(alphabet)
	buf := make([]byte, 1)
	for i := 0; i < n; {
		if _, err := rand.Read(buf); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		if int(buf[0]) < limit {
			b[i] = alphabet[int(buf[0])%len(alphabet)]
			i++
		}
	}
	return string(b)
}

const (
	keyAlphabet    = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	secretAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
)

func newUser(access, secret string, root bool) *metapb.User {
	salt := make([]byte, 16)
	rand.Read(salt)
	return &metapb.User{AccessKey: access, Salt: salt, Hash: hashSecret(salt, secret), Root: root}
}

// setupRoot makes the stored root user match the configuration: the given
// pair replaces it; with none given and none stored, a pair is generated,
// written to root.credentials (mode 0600) and kept for GeneratedRoot.
func (s *Service) setupRoot() error {
	const op = errors.Op("meta.Open")
	if s.cfg.RootUser != "" {
		if ok, _ := s.checkSecret(s.cfg.RootUser, s.cfg.RootPassword); ok {
			return nil // already the stored root: no write on every start
		}
		_, err := s.propose(&metapb.Command{Op: &metapb.Command_PutUser{PutUser: newUser(s.cfg.RootUser, s.cfg.RootPassword, true)}})
		return err
	}
	v, err := s.readView()
	if err != nil {
		return err
	}
	_, found, err := v.get(keyRoot)
	v.close()
	if err != nil || found {
		return err
	}
	user, secret := randomFrom(accessKeyLen, keyAlphabet), randomFrom(secretLen, secretAlphabet)
	// The file first: a root nobody can learn the secret of is useless.
	f := filepath.Join(s.cfg.Dir, RootCredentialsFile)
	body := fmt.Sprintf("CAIRN_ROOT_USER=%s\nCAIRN_ROOT_PASSWORD=%s\n", user, secret)
	if err := pki.WriteFileSync(f, []byte(body), 0o600); err != nil {
		return errors.E(op, errors.IO, errors.Path(f), err)
	}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutUser{PutUser: newUser(user, secret, true)}}); err != nil {
		return err
	}
	s.genUser, s.genSecret = user, secret
	return nil
}

// GeneratedRoot returns the root pair that this Open generated, so that
// `cairn server` can print it once. ok is false if none was generated.
func (s *Service) GeneratedRoot() (user, secret string, ok bool) {
	return s.genUser, s.genSecret, s.genUser != ""
}

// checkSecret verifies a pair in constant time (also for unknown keys).
func (s *Service) checkSecret(access, secret string) (ok, root bool) {
	v, err := s.readView()
	if err != nil {
		return false, false
	}
	defer v.close()
	u := &metapb.User{}
	found, err := v.getProto(userKey(access), u)
	if err != nil || !found {
		u = &metapb.User{Salt: make([]byte, 16), Hash: make([]byte, sha256.Size)}
	}
	match := subtle.ConstantTimeCompare(hashSecret(u.Salt, secret), u.Hash) == 1
	return match && found, u.Root
}

// Authenticate checks an access key and secret against the one set of
// keys (see checkUser) and says what the key may do.
func (s *Service) Authenticate(ctx context.Context, req *metapb.AuthRequest) (*metapb.AuthResponse, error) {
	c, err := s.verify(req.AccessKey, req.Secret)
	if err != nil {
		return nil, errors.E(errors.Op("meta.Authenticate"), err)
	}
	return &metapb.AuthResponse{AccessKey: c.Key, Root: c.Root, User: c.User, Grants: c.Grants}, nil
}

// CreateUser makes a new (non-root) access key; the secret is returned
// only here.
func (s *Service) CreateUser(ctx context.Context, _ *metapb.CreateUserRequest) (*metapb.CreateUserResponse, error) {
	user, secret := randomFrom(accessKeyLen, keyAlphabet), randomFrom(secretLen, secretAlphabet)
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutUser{PutUser: newUser(user, secret, false)}}); err != nil {
		return nil, err
	}
	return &metapb.CreateUserResponse{AccessKey: user, Secret: secret}, nil
}
