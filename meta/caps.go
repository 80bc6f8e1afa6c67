package meta

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Data-plane capabilities (package capability). Meta holds the signing
// keys in CapKeyFile (mode 0600, like s3.master): the current key, which
// signs, and the previous one, which data servers still accept, so that a
// capability signed just before a rotation lives its full CapTTL. A
// rotation every CapRotate (> CapTTL) is enough for that; data servers get
// the keys with every heartbeat answer. A new key is handed out capActivate
// before it signs, so that every data server knows it before the first
// capability it signed reaches them.

// CapKeyFile holds the capability signing keys in meta's directory.
const CapKeyFile = "caps.keys"

type capKeyFile struct {
	Keys []capKeyRecord `json:"keys"` // current first
}

type capKeyRecord struct {
	ID     uint32 `json:"id"`
	Secret []byte `json:"secret"`
	Active int64  `json:"active"` // unix seconds: signs from then on
}

// capActivate is how long a new key is handed to data servers before it
// signs: several heartbeats.
const capActivate = 10 * time.Second

// setupCaps loads the signing keys, creating the first on a new store.
func (s *Service) setupCaps() error {
	const op = errors.Op("meta.Open")
	f := filepath.Join(s.cfg.Dir, CapKeyFile)
	b, err := os.ReadFile(f)
	switch {
	case os.IsNotExist(err):
		return s.rotateCaps()
	case err != nil:
		return errors.E(op, errors.IO, errors.Path(f), err)
	}
	var kf capKeyFile
	if err := json.Unmarshal(b, &kf); err != nil || len(kf.Keys) == 0 {
		return errors.E(op, errors.Corrupt, errors.Path(f), "unreadable capability keys")
	}
	s.capMu.Lock()
	s.capFile = kf
	s.capMu.Unlock()
	s.applyCapKeys(kf)
	return nil
}

// rotateCaps makes a new current key and keeps the last one as previous.
func (s *Service) rotateCaps() error {
	if s.sec.fromState.Load() {
		return s.proposeCapRotation() // the group's keys change by command (secrets.go)
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	var id uint32 = 1
	if len(s.capFile.Keys) > 0 {
		id = s.capFile.Keys[0].ID + 1
	}
	k := capability.NewKey(id)
	active := time.Now().Add(capActivate)
	if len(s.capFile.Keys) == 0 {
		active = time.Now() // a new cluster: no data server knows any key yet
	}
	// Newest first: the new key, the current one, the previous one
	// (which verifies until the new key signs).
	kf := capKeyFile{Keys: append([]capKeyRecord{{ID: k.ID, Secret: k.Secret, Active: active.Unix()}}, s.capFile.Keys[:min(2, len(s.capFile.Keys))]...)}
	b, _ := json.Marshal(&kf)
	f := filepath.Join(s.cfg.Dir, CapKeyFile)
	// Written aside and renamed: a crash mid-write must not lose the key
	// every data server is verifying with.
	if err := pki.WriteFileSync(f, b, 0o600); err != nil {
		return errors.E(errors.Op("meta.rotateCaps"), errors.IO, errors.Path(f), err)
	}
	s.capFile = kf
	s.applyCapKeys(kf)
	return nil
}

// applyCapKeys signs with the newest active key and accepts the others.
func (s *Service) applyCapKeys(kf capKeyFile) {
	now := time.Now().Unix()
	sign := len(kf.Keys) - 1
	for i, r := range kf.Keys {
		if r.Active <= now {
			sign = i
			break
		}
	}
	var others []capability.Key
	for i, r := range kf.Keys {
		if i != sign {
			others = append(others, capability.Key{ID: r.ID, Secret: r.Secret})
		}
	}
	s.caps.Set(capability.Key{ID: kf.Keys[sign].ID, Secret: kf.Keys[sign].Secret}, others...)
}

// RotateCapKeys rotates the capability keys now (tests, and an operator
// who fears a key leaked: capabilities of the key before the previous
// stop working at once).
func (s *Service) RotateCapKeys() error { return s.rotateCaps() }

// capLoop rotates the keys every CapRotate and switches signing to a new
// key once it is active.
func (s *Service) capLoop() {
	defer s.wg.Done()
	for {
		s.capMu.Lock()
		have := len(s.capFile.Keys) > 0
		var newest time.Time
		if have {
			newest = time.Unix(s.capFile.Keys[0].Active, 0)
		}
		s.capMu.Unlock()
		next, rotate := newest.Add(s.cfg.CapRotate), true
		switch {
		case !have: // a member that joined: the keys come with the log (kick)
			next, rotate = time.Now().Add(time.Hour), false
		case time.Now().Before(newest):
			next, rotate = newest, false
		case !s.mayRotateCaps(): // a follower: the leader rotates; look again later
			next, rotate = time.Now().Add(5*time.Second), false
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-s.sec.kick: // the group's keys changed (secrets.go)
			t.Stop()
			continue
		case <-t.C:
		}
		if !rotate || !s.mayRotateCaps() {
			s.capMu.Lock()
			if len(s.capFile.Keys) > 0 {
				s.applyCapKeys(s.capFile)
			}
			s.capMu.Unlock()
			continue
		}
		if err := s.rotateCaps(); err != nil {
			s.log.Error("capability key rotation failed", "err", err)
			select {
			case <-s.closing:
				return
			case <-time.After(time.Minute):
			}
		}
	}
}

// capKeys is the heartbeat answer's copy of the keys, the signing one
// first (data servers sign with it too). Only a verified data-server
// identity (or meta) gets them: Heartbeat's rule (authz.go) refuses every
// other caller before the handler runs.
func (s *Service) capKeys() []*metapb.CapKey {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	sign := s.caps.KeyID()
	out := make([]*metapb.CapKey, 0, len(s.capFile.Keys))
	for _, r := range s.capFile.Keys {
		k := &metapb.CapKey{Id: r.ID, Secret: r.Secret}
		if r.ID == sign {
			out = append([]*metapb.CapKey{k}, out...)
		} else {
			out = append(out, k)
		}
	}
	return out
}

// readCaps signs the read capability of each extent's needle.
func (s *Service) readCaps(ns string, exts []*metapb.Extent) []string {
	if len(exts) == 0 {
		return nil
	}
	out := make([]string, len(exts))
	for i, e := range exts {
		if e.Key == 0 {
			continue // a hole
		}
		out[i], _ = s.caps.Mint(capability.Read, e.Volume, e.Key, e.Key, ns, s.cfg.CapTTL)
	}
	return out
}

// writeCap signs the capability to add needles to volume vid.
func (s *Service) writeCap(ns string, vid uint32) string {
	tok, _ := s.caps.Mint(capability.Write, vid, 0, capability.AllKeys, ns, s.cfg.CapTTL)
	return tok
}

// dataCtx is ctx carrying meta's own capabilities for its calls to data
// servers (volume creation, replica sets, copies, garbage collection).
func (s *Service) dataCtx(ctx context.Context) context.Context {
	return capability.NewContext(ctx, capability.Signer{Keys: s.caps, TTL: 10 * time.Minute})
}

// CapKeyring is meta's keyring (tests and in-process callers that sign).
func (s *Service) CapKeyring() *capability.Keyring { return s.caps }

// RenewCaps re-signs capabilities meta (or a data server, with meta's
// keys) signed, expired or not, for another CapTTL, if their namespace
// still exists. Operations meta keeps to itself (admin, replication) are
// never renewed.
func (s *Service) RenewCaps(ctx context.Context, req *metapb.RenewCapsRequest) (*metapb.RenewCapsResponse, error) {
	const op = errors.Op("meta.RenewCaps")
	if len(req.Caps) > maxBatch {
		return nil, errors.E(op, errors.TooLarge, "more than 10000 capabilities")
	}
	out := &metapb.RenewCapsResponse{Caps: make([]string, len(req.Caps))}
	type scope struct {
		ns  string
		ops capability.Op
	}
	known := map[scope]bool{} // per namespace and operations: a read grant renews no write
	for i, tok := range req.Caps {
		c, err := s.caps.Signed(tok)
		if err != nil || c.Ops&(capability.Admin|capability.Replicate) != 0 {
			continue
		}
		ok, seen := known[scope{c.Namespace, c.Ops}]
		if !seen {
			// The hook for per-user authorisation: the caller must still
			// be allowed to read (or write) this namespace.
			_, err := s.GetNamespace(ctx, &metapb.NamespaceRequest{Name: c.Namespace})
			ok = err == nil && (s.cfg.CapRenewFor == nil || s.cfg.CapRenewFor(ctx, c.Namespace, c.Ops))
			known[scope{c.Namespace, c.Ops}] = ok
		}
		if !ok {
			continue
		}
		c.Expires = time.Now().Add(s.cfg.CapTTL)
		out.Caps[i], _ = s.caps.Sign(c)
	}
	return out, nil
}

// LoadCapKeys reads the capability keys of the meta whose directory is
// dir into a keyring: for an operator (and tests) with access to meta's
// files, who may sign what meta signs.
func LoadCapKeys(dir string) (*capability.Keyring, error) {
	f := filepath.Join(dir, CapKeyFile)
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, errors.E(errors.Op("meta.LoadCapKeys"), errors.IO, errors.Path(f), err)
	}
	var kf capKeyFile
	if err := json.Unmarshal(b, &kf); err != nil || len(kf.Keys) == 0 {
		return nil, errors.E(errors.Op("meta.LoadCapKeys"), errors.Corrupt, errors.Path(f), "unreadable capability keys")
	}
	s := &Service{caps: &capability.Keyring{}}
	s.applyCapKeys(kf)
	return s.caps, nil
}
