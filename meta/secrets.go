package meta

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// The shared secrets of a meta group: the cluster CA's key (Join signs
// certificates with it), the S3 master key (it seals S3 secrets), the
// capability keys (shared with data servers, rotated) — everything a
// member needs to lead. They live in the replicated state, under
// keySecrets, so that a member that joins brings nothing but its join
// token: it learns them from the log or a snapshot like any other state,
// and loads them into memory when a secrets command is applied (published)
// or a snapshot restored (rebuild).
//
// Where they come from: the member that founds the group (or a meta that
// ran alone and now starts a group) has them in files, as a meta alone
// keeps them (ca.key, s3.master, caps.keys, all 0600); when it first leads
// it proposes them (secrets_init, which fills only what the state lacks:
// the first member's secrets win). From then on the state is what counts:
// capability keys rotate by command (secrets_rotate_caps), which reaches
// every member with the log. A member's caps.keys is rewritten from the
// state as a cache, for LoadCapKeys.
//
// At rest they are as safe as the store: Pebble's files, the Raft log and
// Raft's snapshots under Config.Dir, which a group member keeps at 0700,
// and every backup (`cairn admin meta snapshot`, written 0600) holds them.
// See "Trust" in docs/architecture.md.

// keySecrets holds the metapb.SecretsState.
var keySecrets = []byte("c/secrets")

// secrets is a member's copy of the shared secrets in memory.
type secrets struct {
	ca   atomic.Pointer[pki.CA]
	aead atomic.Pointer[aeadBox]
	// fromState: the replicated state holds the secrets and this member
	// loaded them; capability keys then change only by command.
	fromState atomic.Bool
	// kick wakes capLoop when the keys changed under it.
	kick chan struct{}
}

type aeadBox struct{ cipher.AEAD }

// clusterCA is the CA that Join signs with: the group's, else the one
// this meta was configured with; nil when it has none.
func (s *Service) clusterCA() *pki.CA { return s.sec.ca.Load() }

// masterKey is the AEAD that seals S3 secrets; nil on a member that has
// not learnt it yet.
func (s *Service) masterKey() cipher.AEAD {
	if b := s.sec.aead.Load(); b != nil {
		return b.AEAD
	}
	return nil
}

func masterAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, errors.E(errors.Corrupt, "the S3 master key is not 32 bytes")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.E(errors.Corrupt, err)
	}
	return cipher.NewGCM(block)
}

// mayMakeSecrets reports whether this member may take (or create) its
// secrets from its own files: a meta alone, a founding member of a group
// (it has --bootstrap), or one that holds the CA's key. A member that
// joined has none and waits for the group's.
func (s *Service) mayMakeSecrets() bool {
	g := s.cfg.Group
	return g == nil || len(g.Bootstrap) > 0 || (s.cfg.CA != nil && s.cfg.CA.Key != nil)
}

// setupSecrets runs at Open, after the state was loaded (rebuild): what
// the state does not hold comes from this member's files, if it may make
// secrets.
func (s *Service) setupSecrets() error {
	const op = errors.Op("meta.Open")
	s.sec.kick = make(chan struct{}, 1)
	if s.sec.ca.Load() == nil && s.cfg.CA != nil {
		s.sec.ca.Store(s.cfg.CA)
	}
	if s.cfg.Group != nil {
		// The store holds the group's private keys: only meta's user
		// may enter it.
		if err := os.Chmod(s.cfg.Dir, 0o700); err != nil {
			return errors.E(op, errors.IO, errors.Path(s.cfg.Dir), err)
		}
	}
	if !s.mayMakeSecrets() {
		return nil
	}
	s.capMu.Lock()
	haveCaps := len(s.capFile.Keys) > 0
	s.capMu.Unlock()
	if !haveCaps {
		if err := s.setupCaps(); err != nil {
			return err
		}
	}
	if s.masterKey() == nil {
		aead, err := loadMasterKey(s.cfg.Dir)
		if err != nil {
			return err
		}
		s.sec.aead.Store(&aeadBox{aead})
	}
	return nil
}

// seedSecrets, run by a member of a group when it takes the lead, puts
// into the state what it lacks and this member has. A leader that ends
// up without every secret refuses to serve.
func (s *Service) seedSecrets() error {
	const op = errors.Op("meta.seedSecrets")
	if s.cfg.Group == nil {
		return nil
	}
	st, err := s.readSecrets()
	if err != nil {
		return err
	}
	add := &metapb.SecretsState{}
	if ca := s.cfg.CA; len(st.CaCert) == 0 && ca != nil && ca.Key != nil {
		key, err := ca.KeyPEM()
		if err != nil {
			return errors.E(op, err)
		}
		add.CaCert, add.CaKey = ca.PEM, key
	}
	if len(st.S3Master) == 0 && s.mayMakeSecrets() {
		key, err := os.ReadFile(filepath.Join(s.cfg.Dir, MasterKeyFile))
		if err != nil && !os.IsNotExist(err) {
			return errors.E(op, errors.IO, err)
		}
		add.S3Master = key
	}
	if len(st.CapKeys) == 0 && s.mayMakeSecrets() {
		s.capMu.Lock()
		for _, k := range s.capFile.Keys {
			add.CapKeys = append(add.CapKeys, &metapb.SecretsCapKey{Id: k.ID, Secret: k.Secret, ActiveUnix: k.Active})
		}
		s.capMu.Unlock()
	}
	if len(add.CaCert) > 0 || len(add.S3Master) > 0 || len(add.CapKeys) > 0 {
		if _, err := s.propose(&metapb.Command{Op: &metapb.Command_SecretsInit{SecretsInit: add}}); err != nil {
			return errors.E(op, err)
		}
		if st, err = s.readSecrets(); err != nil {
			return err
		}
	}
	if len(st.S3Master) == 0 || len(st.CapKeys) == 0 {
		return errors.E(op, errors.Unavailable, "the group holds no S3 master key or capability keys, and this member has none to give: start the group's first member with its files")
	}
	return nil
}

func (s *Service) readSecrets() (*metapb.SecretsState, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	st := &metapb.SecretsState{}
	if _, err := v.getProto(keySecrets, st); err != nil {
		return nil, err
	}
	return st, nil
}

// loadSecrets takes the secrets the state holds into memory: after a
// secrets command was applied, and after the state was loaded or
// restored. What the state lacks stays as it was.
func (s *Service) loadSecrets() error {
	const op = errors.Op("meta.loadSecrets")
	st, err := s.readSecrets()
	if err != nil {
		return err
	}
	if len(st.CaCert) == 0 && len(st.S3Master) == 0 && len(st.CapKeys) == 0 {
		return nil
	}
	if len(st.CaCert) > 0 {
		ca, err := pki.ParseCAKeyPair(st.CaCert, st.CaKey)
		if err != nil {
			return errors.E(op, errors.Corrupt, err)
		}
		s.sec.ca.Store(ca)
	}
	if len(st.S3Master) > 0 {
		aead, err := masterAEAD(st.S3Master)
		if err != nil {
			return errors.E(op, err)
		}
		s.sec.aead.Store(&aeadBox{aead})
	}
	if len(st.CapKeys) > 0 {
		kf := capKeyFile{}
		for _, k := range st.CapKeys {
			kf.Keys = append(kf.Keys, capKeyRecord{ID: k.Id, Secret: k.Secret, Active: k.ActiveUnix})
		}
		s.capMu.Lock()
		s.capFile = kf
		s.applyCapKeys(kf)
		s.capMu.Unlock()
		// The file is a cache of the state (LoadCapKeys reads it); the
		// state is what counts, so a failed write is only logged.
		b, _ := json.Marshal(&kf)
		if err := pki.WriteFileSync(filepath.Join(s.cfg.Dir, CapKeyFile), b, 0o600); err != nil {
			s.log.Warn("meta: writing the capability keys' cache file", "err", err)
		}
	}
	s.sec.fromState.Store(true)
	select {
	case s.sec.kick <- struct{}{}:
	default:
	}
	return nil
}

// proposeCapRotation is rotateCaps for keys the state holds: the leader
// makes the key, every member applies it.
func (s *Service) proposeCapRotation() error {
	s.capMu.Lock()
	var id uint32 = 1
	if len(s.capFile.Keys) > 0 {
		id = s.capFile.Keys[0].ID + 1
	}
	s.capMu.Unlock()
	k := capability.NewKey(id)
	_, err := s.propose(&metapb.Command{Op: &metapb.Command_SecretsRotateCaps{SecretsRotateCaps: &metapb.SecretsCapKey{
		Id: k.ID, Secret: k.Secret, ActiveUnix: time.Now().Add(capActivate).Unix()}}})
	if err != nil {
		return errors.E(errors.Op("meta.rotateCaps"), err)
	}
	return nil
}

// mayRotateCaps: keys in files rotate wherever they are; the group's only
// on its leader.
func (s *Service) mayRotateCaps() bool { return !s.sec.fromState.Load() || s.leading() }

// secretsInit stores what the state lacks of st (the first member's
// secrets win; a second init, or a member that founded the group too,
// changes nothing it already holds).
func (t *txn) secretsInit(st *metapb.SecretsState) error {
	cur := &metapb.SecretsState{}
	if _, err := t.v.getProto(keySecrets, cur); err != nil {
		return err
	}
	if len(cur.CaCert) == 0 && len(st.CaCert) > 0 {
		if _, err := pki.ParseCAKeyPair(st.CaCert, st.CaKey); err != nil {
			return errors.E(errors.Invalid, err)
		}
		cur.CaCert, cur.CaKey = st.CaCert, st.CaKey
	}
	if len(cur.S3Master) == 0 && len(st.S3Master) > 0 {
		if len(st.S3Master) != 32 {
			return errors.E(errors.Invalid, "the S3 master key is not 32 bytes")
		}
		cur.S3Master = st.S3Master
	}
	if len(cur.CapKeys) == 0 && len(st.CapKeys) > 0 {
		for _, k := range st.CapKeys {
			if len(k.Secret) != capability.SecretLen {
				return errors.E(errors.Invalid, "a capability key of the wrong length")
			}
		}
		cur.CapKeys = st.CapKeys[:min(3, len(st.CapKeys))]
	}
	t.res.secrets = true
	return t.put(keySecrets, cur)
}

// secretsRotateCaps puts a new capability key first and keeps the two
// before it (see caps.go). A key no newer than the newest held (two
// rotations raced) changes nothing.
func (t *txn) secretsRotateCaps(k *metapb.SecretsCapKey) error {
	if len(k.Secret) != capability.SecretLen {
		return errors.E(errors.Invalid, "a capability key of the wrong length")
	}
	cur := &metapb.SecretsState{}
	found, err := t.v.getProto(keySecrets, cur)
	if err != nil {
		return err
	}
	if !found || len(cur.CapKeys) == 0 {
		return errors.E(errors.Precondition, "the state holds no capability keys to rotate")
	}
	if k.Id <= cur.CapKeys[0].Id {
		return nil
	}
	cur.CapKeys = append([]*metapb.SecretsCapKey{k}, cur.CapKeys[:min(2, len(cur.CapKeys))]...)
	t.res.secrets = true
	return t.put(keySecrets, cur)
}
