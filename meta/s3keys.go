package meta

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/pki"
	"cairn/proto/metapb"
)

// S3 users and access keys. SigV4 is an HMAC keyed by (a key derived
// from) the secret, so whoever verifies a signature needs the secret
// itself: a hash, as kept for the native API's Basic auth, cannot verify
// anything. Secrets are therefore sealed with AES-256-GCM under a master
// key kept in Config.Dir (mode 0600) and never stored in the clear; a
// copy of the store without the master key reveals no secret.

// MasterKeyFile holds the 32-byte key that seals S3 secrets.
const MasterKeyFile = "s3.master"

const (
	pS3User   = "sU/"
	pS3Key    = "sK/"
	keyS3Root = "c/s3root"
)

func s3UserKey(name string) []byte  { return []byte(pS3User + name) }
func s3KeyKey(access string) []byte { return []byte(pS3Key + access) }

// loadMasterKey reads the master key, creating it on first use.
func loadMasterKey(dir string) (cipher.AEAD, error) {
	const op = errors.Op("meta.Open")
	f := filepath.Join(dir, MasterKeyFile)
	key, err := os.ReadFile(f)
	if os.IsNotExist(err) {
		key = make([]byte, 32)
		rand.Read(key)
		if err := pki.WriteFileSync(f, key, 0o600); err != nil {
			return nil, errors.E(op, errors.IO, errors.Path(f), err)
		}
	} else if err != nil {
		return nil, errors.E(op, errors.IO, errors.Path(f), err)
	}
	if len(key) != 32 {
		return nil, errors.E(op, errors.Corrupt, errors.Path(f), "the S3 master key is not 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.E(op, errors.Corrupt, err)
	}
	return cipher.NewGCM(block)
}

// seal encrypts a secret; the access key is the associated data, so a
// sealed secret moved to another key's record does not open.
func (s *Service) seal(access, secret string) []byte {
	aead := s.masterKey()
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, []byte(secret), []byte(access))
}

func (s *Service) unseal(k *metapb.S3Key) (string, error) {
	aead := s.masterKey()
	if aead == nil {
		return "", errors.E(errors.Unavailable, "this meta has not learnt the S3 master key yet")
	}
	n := aead.NonceSize()
	if len(k.SealedSecret) < n {
		return "", errors.E(errors.Corrupt, "sealed secret too short")
	}
	plain, err := aead.Open(nil, k.SealedSecret[:n], k.SealedSecret[n:], []byte(k.AccessKey))
	if err != nil {
		return "", errors.E(errors.Corrupt, "cannot open a sealed secret (wrong master key?)")
	}
	return string(plain), nil
}

// setupS3 loads the master key and makes the root pair an S3 key too:
// from the configuration, from this Open's generated pair, or from
// root.credentials of an earlier start.
func (s *Service) setupS3() error {
	if s.masterKey() == nil { // loaded at Open, or from the group's state (secrets.go)
		return errors.E(errors.Op("meta.setupS3"), errors.Unavailable, "no S3 master key")
	}
	user, secret := s.cfg.RootUser, s.cfg.RootPassword
	if user == "" {
		user, secret = s.genUser, s.genSecret
	}
	if user == "" {
		user, secret = readCredentials(filepath.Join(s.cfg.Dir, RootCredentialsFile))
	}
	if user == "" {
		return nil
	}
	v, err := s.readView()
	if err != nil {
		return err
	}
	k := &metapb.S3Key{}
	found, err := v.getProto(s3KeyKey(user), k)
	v.close()
	if err != nil {
		return err
	}
	if found && k.Root {
		if old, err := s.unseal(k); err == nil && old == secret {
			return nil // already current: no write on every start
		}
	}
	_, err = s.propose(&metapb.Command{Op: &metapb.Command_PutS3Key{PutS3Key: &metapb.S3Key{
		AccessKey: user, User: "root", Root: true, SealedSecret: s.seal(user, secret)}}})
	return err
}

func readCredentials(f string) (user, secret string) {
	fh, err := os.Open(f)
	if err != nil {
		return "", ""
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "CAIRN_ROOT_USER":
			user = v
		case "CAIRN_ROOT_PASSWORD":
			secret = v
		}
	}
	if user == "" || secret == "" {
		return "", ""
	}
	return user, secret
}

func validUserName(name string) error {
	if name == "" || len(name) > 64 || name == "root" {
		return errors.E(errors.Invalid, errors.Path(name), "a user name is 1 to 64 characters of a-z, 0-9, '-', '_', '.' and not \"root\"")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errors.E(errors.Invalid, errors.Path(name), "a user name is 1 to 64 characters of a-z, 0-9, '-', '_', '.' and not \"root\"")
		}
	}
	return nil
}

func validGrants(g map[string]metapb.S3Access) error {
	for b, a := range g {
		if err := pathname.ValidNamespace(b); err != nil {
			return err
		}
		if a < metapb.S3Access_S3_NONE || a > metapb.S3Access_S3_WRITE {
			return errors.E(errors.Invalid, "unknown access level")
		}
	}
	return nil
}

// ---- RPCs -------------------------------------------------------------------

func (s *Service) S3CreateUser(ctx context.Context, req *metapb.S3User) (*metapb.S3User, error) {
	if err := validUserName(req.Name); err != nil {
		return nil, errors.E(errors.Op("meta.S3CreateUser"), err)
	}
	u := &metapb.S3User{Name: req.Name}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutS3User{PutS3User: u}}); err != nil {
		return nil, err
	}
	return u, nil
}

func (s *Service) S3DeleteUser(ctx context.Context, req *metapb.S3UserRequest) (*metapb.Empty, error) {
	_, err := s.propose(&metapb.Command{Op: &metapb.Command_DeleteS3User{DeleteS3User: req}})
	return &metapb.Empty{}, err
}

func (s *Service) S3ListUsers(ctx context.Context, _ *metapb.Empty) (*metapb.S3UserList, error) {
	out := &metapb.S3UserList{}
	err := s.scan([]byte(pS3User), func() proto.Message { return &metapb.S3User{} }, func(m proto.Message) bool {
		out.Users = append(out.Users, m.(*metapb.S3User))
		return true
	})
	return out, err
}

func (s *Service) S3CreateKey(ctx context.Context, req *metapb.S3CreateKeyRequest) (*metapb.S3KeySecret, error) {
	const op = errors.Op("meta.S3CreateKey")
	if err := validGrants(req.Grants); err != nil {
		return nil, errors.E(op, err)
	}
	access, secret := randomFrom(accessKeyLen, keyAlphabet), randomFrom(secretLen, secretAlphabet)
	k := &metapb.S3Key{AccessKey: access, User: req.User, SealedSecret: s.seal(access, secret), Grants: req.Grants}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutS3Key{PutS3Key: k}}); err != nil {
		return nil, err
	}
	return &metapb.S3KeySecret{Key: keyInfo(k), Secret: secret}, nil
}

func (s *Service) S3DeleteKey(ctx context.Context, req *metapb.S3KeyRequest) (*metapb.Empty, error) {
	_, err := s.propose(&metapb.Command{Op: &metapb.Command_DeleteS3Key{DeleteS3Key: req}})
	return &metapb.Empty{}, err
}

func (s *Service) S3ListKeys(ctx context.Context, req *metapb.S3UserRequest) (*metapb.S3KeyList, error) {
	out := &metapb.S3KeyList{}
	err := s.scan([]byte(pS3Key), func() proto.Message { return &metapb.S3Key{} }, func(m proto.Message) bool {
		k := m.(*metapb.S3Key)
		if req.Name == "" || k.User == req.Name {
			out.Keys = append(out.Keys, keyInfo(k))
		}
		return true
	})
	return out, err
}

func (s *Service) S3Grant(ctx context.Context, req *metapb.S3GrantRequest) (*metapb.S3KeyInfo, error) {
	const op = errors.Op("meta.S3Grant")
	if err := validGrants(map[string]metapb.S3Access{req.Bucket: req.Access}); err != nil {
		return nil, errors.E(op, err)
	}
	// Read-modify-write of one record: the Command carries the whole new
	// record, and apply checks that the key still exists.
	k, err := s.s3Key(req.AccessKey)
	if err != nil {
		return nil, errors.E(op, err)
	}
	if k.Grants == nil {
		k.Grants = map[string]metapb.S3Access{}
	}
	if req.Access == metapb.S3Access_S3_NONE {
		delete(k.Grants, req.Bucket)
	} else {
		k.Grants[req.Bucket] = req.Access
	}
	k.CreatedNs = 0
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutS3Key{PutS3Key: k}}); err != nil {
		return nil, err
	}
	return keyInfo(k), nil
}

func (s *Service) S3GetSecret(ctx context.Context, req *metapb.S3KeyRequest) (*metapb.S3KeySecret, error) {
	const op = errors.Op("meta.S3GetSecret")
	k, err := s.s3Key(req.AccessKey)
	if err != nil {
		return nil, errors.E(op, err)
	}
	secret, err := s.unseal(k)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return &metapb.S3KeySecret{Key: keyInfo(k), Secret: secret}, nil
}

func (s *Service) s3Key(access string) (*metapb.S3Key, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	k := &metapb.S3Key{}
	found, err := v.getProto(s3KeyKey(access), k)
	if err != nil {
		return nil, err
	}
	if !found || access == "" {
		return nil, errors.E(errors.NotExist, errors.Path(access), "no such access key")
	}
	return k, nil
}

func keyInfo(k *metapb.S3Key) *metapb.S3KeyInfo {
	return &metapb.S3KeyInfo{AccessKey: k.AccessKey, User: k.User, Root: k.Root, CreatedNs: k.CreatedNs, Grants: k.Grants}
}

// scan calls fn with every record under prefix, in key order, until fn
// returns false.
func (s *Service) scan(prefix []byte, alloc func() proto.Message, fn func(proto.Message) bool) error {
	v, err := s.readView()
	if err != nil {
		return err
	}
	defer v.close()
	return v.scanFrom(prefix, prefix, alloc, fn)
}

// scanFrom is scan starting at key from (inside prefix).
func (v *view) scanFrom(prefix, from []byte, alloc func() proto.Message, fn func(proto.Message) bool) error {
	it, err := v.newIter(prefix, prefixEnd(prefix))
	if err != nil {
		return err
	}
	defer it.Close()
	if bytes.Compare(from, prefix) < 0 {
		from = prefix
	}
	for it.SeekGE(from); it.Valid(); it.Next() {
		m := alloc()
		if err := proto.Unmarshal(it.Value(), m); err != nil {
			return errors.E(errors.Corrupt, err)
		}
		if !fn(m) {
			break
		}
	}
	return it.Error()
}

// ---- apply ------------------------------------------------------------------

func (t *txn) putS3User(u *metapb.S3User) error {
	if err := validUserName(u.Name); err != nil {
		return err
	}
	if ok, err := t.v.has(s3UserKey(u.Name)); err != nil {
		return err
	} else if ok {
		return errors.E(errors.Exist, errors.Path(u.Name), "user exists")
	}
	u.CreatedNs = t.now
	return t.put(s3UserKey(u.Name), u)
}

// deleteS3User removes a user and every key of theirs.
func (t *txn) deleteS3User(name string) error {
	if ok, err := t.v.has(s3UserKey(name)); err != nil {
		return err
	} else if !ok {
		return errors.E(errors.NotExist, errors.Path(name), "no such user")
	}
	var keys []string
	err := t.v.scanFrom([]byte(pS3Key), []byte(pS3Key), func() proto.Message { return &metapb.S3Key{} }, func(m proto.Message) bool {
		if k := m.(*metapb.S3Key); k.User == name && !k.Root {
			keys = append(keys, k.AccessKey)
		}
		return true
	})
	if err != nil {
		return err
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := t.del(s3KeyKey(k)); err != nil {
			return err
		}
	}
	return t.del(s3UserKey(name))
}

func (t *txn) putS3Key(k *metapb.S3Key) error {
	if k.AccessKey == "" || len(k.SealedSecret) == 0 {
		return errors.E(errors.Invalid, "incomplete key record")
	}
	old := &metapb.S3Key{}
	found, err := t.v.getProto(s3KeyKey(k.AccessKey), old)
	if err != nil {
		return err
	}
	if found {
		k.CreatedNs = old.CreatedNs
	} else {
		k.CreatedNs = t.now
	}
	if k.Root {
		prev, found, err := t.v.get([]byte(keyS3Root))
		if err != nil {
			return err
		}
		if found && string(prev) != k.AccessKey {
			if err := t.del(s3KeyKey(string(prev))); err != nil {
				return err
			}
		}
		if err := t.b.Set([]byte(keyS3Root), []byte(k.AccessKey), nil); err != nil {
			return err
		}
	} else if !found {
		if ok, err := t.v.has(s3UserKey(k.User)); err != nil {
			return err
		} else if !ok {
			return errors.E(errors.NotExist, errors.Path(k.User), "no such user")
		}
	}
	return t.put(s3KeyKey(k.AccessKey), k)
}

func (t *txn) deleteS3Key(access string) error {
	k := &metapb.S3Key{}
	found, err := t.v.getProto(s3KeyKey(access), k)
	if err != nil {
		return err
	}
	if !found {
		return errors.E(errors.NotExist, errors.Path(access), "no such access key")
	}
	if k.Root {
		return errors.E(errors.Permission, "the root key is set by CAIRN_ROOT_USER / CAIRN_ROOT_PASSWORD")
	}
	return t.del(s3KeyKey(access))
}
