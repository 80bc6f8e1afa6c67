package capability

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"sync"
	"time"

	"cairn/errors"
)

// Op is one operation, or a set of them, a capability allows.
type Op uint8

const (
	// Read: GET and HEAD of a needle, and local reads.
	Read Op = 1 << iota
	// Write: POST of a new needle (the server picks its key).
	Write
	// Delete: DELETE of a needle.
	Delete
	// Replicate: PUT of a needle under a key the caller chose (a primary
	// forwarding a write, a copy, a repair).
	Replicate
	// Admin: the /admin routes (create a volume, replica sets, copies,
	// compaction, needle lists) and repair.
	Admin
)

func (o Op) String() string {
	names := []string{"read", "write", "delete", "replicate", "admin"}
	s := ""
	for i, n := range names {
		if o&(1<<i) != 0 {
			if s != "" {
				s += "+"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// AnyVolume as a capability's volume allows every volume.
const AnyVolume = math.MaxUint32

// AllKeys is the last key of a capability for every key of a volume.
const AllKeys = math.MaxUint64

// Header is the HTTP header that carries a capability; Query the query
// parameter, for URLs that must work alone (a GET handed to a browser).
const (
	Header = "X-Cairn-Cap"
	Query  = "cap"
)

// Cap is a decoded capability.
type Cap struct {
	Ops       Op
	KeyID     uint32
	Volume    uint32
	First     uint64 // first needle key allowed
	Last      uint64 // last needle key allowed, inclusive
	Expires   time.Time
	Namespace string // what meta issued it for (renewal checks it)
}

// Allows reports whether c covers op on needle key of volume vid (key 0:
// a call that names no key, which needs the whole key range).
func (c *Cap) Allows(op Op, vid uint32, key uint64) bool {
	if c.Ops&op != op || (c.Volume != vid && c.Volume != AnyVolume) {
		return false
	}
	if key == 0 {
		return c.First == 0 && c.Last == AllKeys
	}
	return c.First <= key && key <= c.Last
}

const (
	version  = 1
	fixedLen = 31
	macLen   = 16
	maxNS    = 255
	// MaxLen bounds an encoded token; longer input is refused unread.
	MaxLen = (fixedLen + maxNS + macLen + 2) / 3 * 4
	// SecretLen is the length of a signing secret.
	SecretLen = 32
)

// Key is a signing key: meta creates it, data servers receive it in
// heartbeat answers.
type Key struct {
	ID     uint32
	Secret []byte // SecretLen bytes
}

// NewKey returns a key with a fresh random secret.
func NewKey(id uint32) Key {
	k := Key{ID: id, Secret: make([]byte, SecretLen)}
	if _, err := rand.Read(k.Secret); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return k
}

// signer is one key with a pool of its HMAC states: hmac.New costs more
// than the MAC of a token, Reset restores the keyed state.
type signer struct {
	id     uint32
	secret []byte
	pool   sync.Pool
}

func newSigner(k Key) *signer {
	secret := append([]byte(nil), k.Secret...)
	s := &signer{id: k.ID, secret: secret}
	s.pool.New = func() any { return hmac.New(sha256.New, secret) }
	return s
}

func (s *signer) mac(dst, msg []byte) []byte {
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	s.pool.Put(h)
	return append(dst, out[:macLen]...)
}

// Keyring holds the keys a role signs and verifies with: the current one
// (signs) and the ones still accepted (the previous, after a rotation).
// The zero Keyring has no keys: it verifies nothing and signs nothing.
type Keyring struct {
	mu      sync.RWMutex
	current *signer
	byID    map[uint32]*signer
	now     func() time.Time
}

// NewKeyring returns a keyring that signs with current and accepts it and
// the others.
func NewKeyring(current Key, accepted ...Key) *Keyring {
	k := &Keyring{}
	k.Set(current, accepted...)
	return k
}

// Set replaces the keys. A key already held (same id, same secret) keeps
// its state; an id that comes back with another secret (a meta that
// made its own keys, then learnt its group's) takes the new one.
func (k *Keyring) Set(current Key, accepted ...Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.byID
	k.byID = make(map[uint32]*signer, 1+len(accepted))
	for _, key := range append([]Key{current}, accepted...) {
		if len(key.Secret) != SecretLen {
			continue
		}
		if s, ok := old[key.ID]; ok && hmac.Equal(s.secret, key.Secret) {
			k.byID[key.ID] = s
		} else {
			k.byID[key.ID] = newSigner(key)
		}
	}
	k.current = k.byID[current.ID]
}

// Ready reports whether the keyring has a key to sign and verify with.
func (k *Keyring) Ready() bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.current != nil
}

// KeyID is the id of the key that signs (0: none).
func (k *Keyring) KeyID() uint32 {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.current == nil {
		return 0
	}
	return k.current.id
}

// SetClock replaces time.Now (tests).
func (k *Keyring) SetClock(now func() time.Time) {
	k.mu.Lock()
	k.now = now
	k.mu.Unlock()
}

func (k *Keyring) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// Sign encodes c and signs it with the current key (c.KeyID is set).
func (k *Keyring) Sign(c Cap) (string, error) {
	k.mu.RLock()
	s := k.current
	k.mu.RUnlock()
	if s == nil {
		return "", errors.E(errors.Op("capability.Sign"), errors.Unavailable, "no signing key yet")
	}
	if len(c.Namespace) > maxNS {
		return "", errors.E(errors.Op("capability.Sign"), errors.Invalid, "namespace too long for a capability")
	}
	c.KeyID = s.id
	var buf [fixedLen + maxNS + macLen]byte
	b := encode(buf[:0], &c)
	b = s.mac(b, b)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Mint signs a capability for ops on keys [first, last] of volume vid,
// good for ttl.
func (k *Keyring) Mint(ops Op, vid uint32, first, last uint64, ns string, ttl time.Duration) (string, error) {
	return k.Sign(Cap{Ops: ops, Volume: vid, First: first, Last: last, Namespace: ns, Expires: k.clock().Add(ttl)})
}

func encode(b []byte, c *Cap) []byte {
	b = append(b, version, byte(c.Ops))
	b = binary.LittleEndian.AppendUint32(b, c.KeyID)
	b = binary.LittleEndian.AppendUint32(b, c.Volume)
	b = binary.LittleEndian.AppendUint64(b, c.First)
	b = binary.LittleEndian.AppendUint64(b, c.Last)
	exp := c.Expires.Unix()
	exp = max(0, min(exp, math.MaxUint32))
	b = binary.LittleEndian.AppendUint32(b, uint32(exp))
	b = append(b, byte(len(c.Namespace)))
	return append(b, c.Namespace...)
}

// Parse decodes a token without checking its MAC: the fields, the signed
// bytes and the MAC. Use Keyring.Verify to trust it.
func Parse(tok string) (c Cap, signed, mac []byte, err error) {
	const op = errors.Op("capability.Parse")
	if len(tok) > MaxLen {
		return c, nil, nil, errors.E(op, errors.Permission, "capability too long")
	}
	b := make([]byte, base64.RawURLEncoding.DecodedLen(len(tok)))
	n, derr := base64.RawURLEncoding.Decode(b, []byte(tok))
	if derr != nil {
		return c, nil, nil, errors.E(op, errors.Permission, "capability is not base64url")
	}
	return parse(b[:n])
}

func parse(b []byte) (c Cap, signed, mac []byte, err error) {
	const op = errors.Op("capability.Parse")
	if len(b) < fixedLen+macLen || b[0] != version {
		return c, nil, nil, errors.E(op, errors.Permission, "malformed capability")
	}
	n := int(b[30])
	if len(b) != fixedLen+n+macLen {
		return c, nil, nil, errors.E(op, errors.Permission, "malformed capability")
	}
	c = Cap{
		Ops:       Op(b[1]),
		KeyID:     binary.LittleEndian.Uint32(b[2:]),
		Volume:    binary.LittleEndian.Uint32(b[6:]),
		First:     binary.LittleEndian.Uint64(b[10:]),
		Last:      binary.LittleEndian.Uint64(b[18:]),
		Expires:   time.Unix(int64(binary.LittleEndian.Uint32(b[26:])), 0),
		Namespace: string(b[fixedLen : fixedLen+n]),
	}
	return c, b[:fixedLen+n], b[fixedLen+n:], nil
}

// Verify checks tok's MAC (in constant time) against the key it names,
// its expiry, and that it allows op on needle key of volume vid (key 0:
// the call names no key). An empty tok is errors.Unauthenticated; every
// other refusal errors.Permission, saying why.
func (k *Keyring) Verify(tok string, op Op, vid uint32, key uint64) (Cap, error) {
	c, err := k.check(tok)
	if err != nil {
		return c, err
	}
	if !c.Allows(op, vid, key) {
		return c, errors.E(errors.Op("capability.Verify"), errors.Permission,
			fmt.Sprintf("capability for %s on volume %d keys %d-%d does not allow %s on %d/%d", c.Ops, c.Volume, c.First, c.Last, op, vid, key))
	}
	return c, nil
}

// Check verifies tok's MAC and expiry, whatever its scope.
func (k *Keyring) Check(tok string) (Cap, error) { return k.check(tok) }

// Signed verifies tok's MAC only: it is a capability this keyring signed,
// expired or not (renewal).
func (k *Keyring) Signed(tok string) (Cap, error) {
	c, err := k.check(tok)
	if err != nil && errors.IsErr(err, expiredErr{}) {
		return c, nil
	}
	return c, err
}

// expiredErr is the cause of the refusal of an expired capability: the
// one refusal renewal mends.
type expiredErr struct{}

func (expiredErr) Error() string { return ErrExpired }

func (k *Keyring) check(tok string) (Cap, error) {
	const op = errors.Op("capability.Verify")
	if tok == "" {
		return Cap{}, errors.E(op, errors.Unauthenticated, "no capability (X-Cairn-Cap) with the request")
	}
	c, signed, mac, err := Parse(tok)
	if err != nil {
		return c, err
	}
	k.mu.RLock()
	s := k.byID[c.KeyID]
	now := k.clock()
	k.mu.RUnlock()
	if s == nil {
		return c, errors.E(op, errors.Permission, fmt.Sprintf("capability signed by unknown key %d", c.KeyID))
	}
	var buf [macLen]byte
	if !hmac.Equal(s.mac(buf[:0], signed), mac) {
		return c, errors.E(op, errors.Permission, "capability forged or damaged (bad MAC)")
	}
	if !now.Before(c.Expires) {
		return c, errors.E(op, errors.Permission, expiredErr{})
	}
	return c, nil
}

// ErrExpired is the message of the refusal of an expired capability.
const ErrExpired = "capability expired"
