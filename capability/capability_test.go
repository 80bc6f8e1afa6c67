package capability

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"cairn/errors"
)

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k := NewKeyring(NewKey(7))
	k.SetClock(func() time.Time { return now })
	read, err := k.Mint(Read, 3, 42, 42, "docs", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write, _ := k.Mint(Write|Delete, 3, 0, AllKeys, "docs", time.Hour)
	admin, _ := k.Mint(Admin, AnyVolume, 0, AllKeys, "", time.Hour)
	expired, _ := k.Mint(Read, 3, 42, 42, "docs", -time.Second)
	other := NewKeyring(NewKey(7)) // same id, another secret
	wrongKey, _ := other.Mint(Read, 3, 42, 42, "docs", time.Hour)
	unknownKey, _ := NewKeyring(NewKey(8)).Mint(Read, 3, 42, 42, "docs", time.Hour)

	// A forgery: widen the scope of a valid token and keep its MAC.
	c, signed, mac, err := Parse(read)
	if err != nil {
		t.Fatal(err)
	}
	c.Last = AllKeys
	forged := enc(encode(nil, &c), mac)
	flipped := enc(signed, append([]byte{mac[0] ^ 1}, mac[1:]...))

	for _, tc := range []struct {
		name string
		tok  string
		op   Op
		vid  uint32
		key  uint64
		kind errors.Kind // Other: allowed
		msg  string
	}{
		{"read", read, Read, 3, 42, errors.Other, ""},
		{"none", "", Read, 3, 42, errors.Unauthenticated, "no capability"},
		{"expired", expired, Read, 3, 42, errors.Permission, ErrExpired},
		{"other key", read, Read, 3, 43, errors.Permission, "does not allow"},
		{"other volume", read, Read, 4, 42, errors.Permission, "does not allow"},
		{"wrong op", read, Delete, 3, 42, errors.Permission, "does not allow"},
		{"read of a write cap", write, Read, 3, 42, errors.Permission, "does not allow"},
		{"write", write, Write, 3, 0, errors.Other, ""},
		{"delete any key", write, Delete, 3, 99, errors.Other, ""},
		{"keyless call needs all keys", read, Read, 3, 0, errors.Permission, "does not allow"},
		{"admin any volume", admin, Admin, 9, 0, errors.Other, ""},
		{"admin is not read", admin, Read, 9, 1, errors.Permission, "does not allow"},
		{"forged scope", forged, Read, 3, 43, errors.Permission, "bad MAC"},
		{"flipped mac", flipped, Read, 3, 42, errors.Permission, "bad MAC"},
		{"wrong secret", wrongKey, Read, 3, 42, errors.Permission, "bad MAC"},
		{"unknown key", unknownKey, Read, 3, 42, errors.Permission, "unknown key"},
		{"garbage", "!!!", Read, 3, 42, errors.Permission, "base64"},
		{"short", "AQ", Read, 3, 42, errors.Permission, "malformed"},
		{"too long", strings.Repeat("A", MaxLen+1), Read, 3, 42, errors.Permission, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Verify(tc.tok, tc.op, tc.vid, tc.key)
			if tc.kind == errors.Other {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(tc.kind, err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v with %q", err, tc.kind, tc.msg)
			}
		})
	}
}

func enc(signed, mac []byte) string {
	return base64.RawURLEncoding.EncodeToString(append(append([]byte(nil), signed...), mac...))
}

func TestRotation(t *testing.T) {
	k1, k2, k3 := NewKey(1), NewKey(2), NewKey(3)
	meta := NewKeyring(k1)
	old, _ := meta.Mint(Read, 1, 5, 5, "", time.Hour)
	meta.Set(k2, k1) // rotated: k2 signs, k1 still accepted
	cur, _ := meta.Mint(Read, 1, 5, 5, "", time.Hour)
	if c, _, _, _ := Parse(cur); c.KeyID != 2 {
		t.Fatalf("signed with key %d after rotation, want 2", c.KeyID)
	}
	data := NewKeyring(k2, k1)
	for _, tok := range []string{old, cur} {
		if _, err := data.Verify(tok, Read, 1, 5); err != nil {
			t.Fatalf("across one rotation: %v", err)
		}
	}
	data.Set(k3, k2) // a second rotation retires k1
	if _, err := data.Verify(old, Read, 1, 5); !errors.Is(errors.Permission, err) {
		t.Fatalf("token of a retired key: %v", err)
	}
	if _, err := (&Keyring{}).Verify(cur, Read, 1, 5); !errors.Is(errors.Permission, err) {
		t.Fatalf("keyring without keys: %v", err)
	}
	// The same id with another secret (a meta that made its own key 1,
	// then learnt its group's key 1) replaces the key, not keeps it.
	other := NewKey(2)
	data.Set(other)
	if _, err := data.Verify(cur, Read, 1, 5); !errors.Is(errors.Permission, err) {
		t.Fatalf("a key replaced by another secret under its id still verifies: %v", err)
	}
	data.Set(k2)
	if _, err := data.Verify(cur, Read, 1, 5); err != nil {
		t.Fatalf("the key set back: %v", err)
	}
	if _, err := (&Keyring{}).Mint(Read, 1, 5, 5, "", time.Hour); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("signing without a key: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	k := NewKeyring(NewKey(1))
	want := Cap{Ops: Read | Delete, Volume: 12, First: 1 << 40, Last: 1<<40 + 9, Namespace: "photos", Expires: time.Unix(2_000_000_000, 0)}
	tok, err := k.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Check(tok)
	if err != nil {
		t.Fatal(err)
	}
	want.KeyID = 1
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if len(tok) > 80 {
		t.Fatalf("token of %d characters; the header budget is 80", len(tok))
	}
}

func TestSigner(t *testing.T) {
	k := NewKeyring(NewKey(1))
	ctx := NewContext(context.Background(), Signer{Keys: k})
	tok := FromContext(ctx).Token(ctx, Replicate, 4, 77)
	if _, err := k.Verify(tok, Replicate, 4, 77); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(tok, Replicate, 4, 78); err == nil {
		t.Fatal("a per-key capability allowed another key")
	}
	if FromContext(context.Background()) != nil {
		t.Fatal("a bare context carries a source")
	}
}

func FuzzParse(f *testing.F) {
	k := NewKeyring(NewKey(1))
	tok, _ := k.Mint(Read, 3, 42, 42, "docs", time.Hour)
	f.Add(tok)
	f.Add("")
	f.Add("AQ")
	f.Add(strings.Repeat("_", 80))
	f.Fuzz(func(t *testing.T, s string) {
		c, signed, mac, err := Parse(s)
		if err != nil {
			if _, verr := k.Verify(s, Read, 3, 42); verr == nil {
				t.Fatalf("Verify accepted what Parse refused: %q", s)
			}
			return
		}
		// What parses re-encodes to the same bytes (one encoding per
		// capability), with the MAC apart.
		if got := encode(nil, &c); string(got) != string(signed) || len(mac) != macLen {
			t.Fatalf("re-encoding %q differs", s)
		}
		if _, err := k.Verify(s, c.Ops, c.Volume, c.First); err == nil && s != tok {
			// Only a token we signed verifies; the fuzzer cannot find a MAC.
			if _, again := k.Check(s); again == nil && !sameCap(s, tok) {
				t.Fatalf("forged token accepted: %q", s)
			}
		}
	})
}

// sameCap: base64url without padding may end in bits that decode the
// same; such a string is the same token.
func sameCap(a, b string) bool {
	x, _, _, _ := Parse(a)
	y, _, _, _ := Parse(b)
	return x == y
}

func BenchmarkVerify(b *testing.B) {
	k := NewKeyring(NewKey(1), NewKey(2))
	tok, _ := k.Mint(Read, 3, 42, 42, "docs", time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Verify(tok, Read, 3, 42); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	k := NewKeyring(NewKey(1))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Mint(Read, 3, 42, 42, "docs", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSigned(t *testing.T) {
	k := NewKeyring(NewKey(1))
	expired, _ := k.Mint(Read, 1, 2, 2, "ns", -time.Minute)
	if _, err := k.Check(expired); !errors.Is(errors.Permission, err) {
		t.Fatalf("expired token checked: %v", err)
	}
	if c, err := k.Signed(expired); err != nil || c.Namespace != "ns" {
		t.Fatalf("Signed of an expired token: %+v %v", c, err)
	}
	forged, _ := NewKeyring(NewKey(1)).Mint(Read, 1, 2, 2, "ns", -time.Minute)
	if _, err := k.Signed(forged); err == nil {
		t.Fatal("Signed accepted another secret's token")
	}
}
