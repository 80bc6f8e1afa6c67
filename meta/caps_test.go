package meta

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn/capability"
	"cairn/proto/metapb"
)

// TestCaps: Resolve signs a read capability per extent, scoped to its
// needle; Assign a write capability of the volume; heartbeats carry the
// keys (only a data-server identity may heartbeat: TestUserRights); keys
// persist 0600 and rotate.
func TestCaps(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, newCluster())
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	mkns(t, ts.cl, "docs")
	put(t, ts.cl, "docs", "a", 10, 42)
	r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "docs", Path: "a", WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Caps) != 1 {
		t.Fatalf("%d capabilities for 1 extent", len(r.Caps))
	}
	keys := svc.CapKeyring()
	if _, err := keys.Verify(r.Caps[0], capability.Read, 1, 42); err != nil {
		t.Fatalf("read capability: %v", err)
	}
	for _, bad := range []struct {
		op  capability.Op
		key uint64
	}{{capability.Read, 43}, {capability.Delete, 42}, {capability.Write, 0}} {
		if _, err := keys.Verify(r.Caps[0], bad.op, 1, bad.key); err == nil {
			t.Fatalf("read capability of key 42 allows %v on %d", bad.op, bad.key)
		}
	}
	b, err := ts.cl.BatchResolve(bg, &metapb.BatchResolveRequest{Requests: []*metapb.ResolveRequest{{Ns: "docs", Path: "a", WantExtents: true}}})
	if err != nil || len(b.Results[0].Response.Caps) != 1 {
		t.Fatalf("BatchResolve: %v %v", b, err)
	}

	// Heartbeats carry the keys.
	hb := &metapb.HeartbeatRequest{ServerId: "s1", Addr: "127.0.0.1:1"}
	resp, err := svc.Heartbeat(bg, hb)
	if err != nil || len(resp.CapKeys) == 0 || resp.CapKeys[0].Id != keys.KeyID() {
		t.Fatalf("heartbeat answer keys: %v %v", resp.GetCapKeys(), err)
	}

	// Assign: a write capability of the volume it hands out.
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "docs"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Verify(a.WriteCap, capability.Write, a.Volume.Id, 0); err != nil {
		t.Fatalf("write capability: %v", err)
	}
	if _, err := keys.Verify(a.WriteCap, capability.Read, a.Volume.Id, 1); err == nil {
		t.Fatal("a write capability reads")
	}

	// The keys are meta's secret: 0600, and the same after a restart.
	st, err := os.Stat(filepath.Join(dir, CapKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", CapKeyFile, st.Mode(), err)
	}
	loaded, err := LoadCapKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loaded.Verify(r.Caps[0], capability.Read, 1, 42); err != nil {
		t.Fatalf("keys read back: %v", err)
	}

	// Rotation: the new key is handed out first and signs later; what the
	// old key signed still verifies.
	before := keys.KeyID()
	if err := svc.RotateCapKeys(); err != nil {
		t.Fatal(err)
	}
	resp, _ = svc.Heartbeat(bg, hb)
	if keys.KeyID() != before || len(resp.CapKeys) != 2 || resp.CapKeys[0].Id != before {
		t.Fatalf("a new key signs before data servers know it: signing %d, handed %v", keys.KeyID(), resp.CapKeys)
	}
	if _, err := keys.Verify(r.Caps[0], capability.Read, 1, 42); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
}

// TestRenewCaps: meta re-signs what it signed, expired or not, while the
// namespace exists; never a forgery, an admin capability or one of a
// namespace that is gone.
func TestRenewCaps(t *testing.T) {
	ts := start(t, newCluster())
	mkns(t, ts.cl, "docs")
	keys := ts.svc.CapKeyring()
	expired, _ := keys.Mint(capability.Read, 1, 42, 42, "docs", -time.Minute)
	admin, _ := keys.Mint(capability.Admin, 1, 0, capability.AllKeys, "docs", -time.Minute)
	gone, _ := keys.Mint(capability.Read, 1, 42, 42, "nosuch", -time.Minute)
	forged, _ := capability.NewKeyring(capability.Key{ID: keys.KeyID(), Secret: make([]byte, capability.SecretLen)}).Mint(capability.Read, 1, 42, 42, "docs", -time.Minute)
	r, err := ts.cl.RenewCaps(bg, &metapb.RenewCapsRequest{Caps: []string{expired, admin, gone, forged, "junk"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Caps) != 5 {
		t.Fatalf("%d answers for 5", len(r.Caps))
	}
	c, err := keys.Verify(r.Caps[0], capability.Read, 1, 42)
	if err != nil || time.Until(c.Expires) < 9*time.Hour {
		t.Fatalf("renewed: %+v %v", c, err)
	}
	for i, what := range []string{"", "admin", "a gone namespace's", "forged", "junk"} {
		if i > 0 && r.Caps[i] != "" {
			t.Errorf("renewed a %s capability", what)
		}
	}
}
