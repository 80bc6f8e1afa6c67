package client

import (
	"context"
	"testing"
	"time"

	"cairn/capability"
)

// TestCapStoreBounded: the needles' capabilities never take more than the
// store's bound, the least recently used go first, and one in use stays.
// The store kept every needle a client ever read, up to a million.
func TestCapStoreBounded(t *testing.T) {
	keys := capability.NewKeyring(capability.NewKey(1))
	tok := func(key uint64) string {
		s, err := keys.Mint(capability.Read, 1, key, key, "ns", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cost := capCost(capEntry{tok: tok(1)})
	const fits = 100
	s := newCapStore(nil, fits*cost)
	ctx := context.Background()
	for key := uint64(1); key <= 10*fits; key++ {
		s.Keep(1, key, tok(key))
		if key > 1 && s.Token(ctx, capability.Read, 1, 1) == "" {
			t.Fatalf("after %d needles: the capability in use was evicted", key)
		}
		s.mu.Lock()
		used, n := s.used, len(s.needles)
		s.mu.Unlock()
		if used > s.max || n > fits {
			t.Fatalf("after %d needles: %d capabilities, %d bytes kept; bound %d bytes (%d capabilities)", key, n, used, s.max, fits)
		}
	}
	if s.Token(ctx, capability.Read, 1, 2) != "" {
		t.Error("the least recently used capability is still kept")
	}
	if s.Token(ctx, capability.Read, 1, 10*fits) == "" {
		t.Error("the newest capability is not kept")
	}
}
