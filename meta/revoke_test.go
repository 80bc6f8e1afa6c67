package meta

import (
	"context"
	"testing"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// TestRevokedDataServer: root revokes a data server's certificate; it can
// no longer heartbeat, neither over the connection it already had (checked
// per call) nor over a new one (the guarded listener refuses the
// handshake); other data servers go on, receive the list in their
// heartbeat answers (to refuse the revoked one as a peer), and the list
// survives a restart of meta. Only root revokes.
func TestRevokedDataServer(t *testing.T) {
	m := startSecure(t)
	ctx := context.Background()
	hb := func(cl metapb.MetaClient, id string) (*metapb.HeartbeatResponse, error) {
		return cl.Heartbeat(ctx, &metapb.HeartbeatRequest{ServerId: id, Addr: id, Capacity: 1 << 40, Free: 1 << 40})
	}
	d1Cert := m.ca.Cert(t, pki.RoleData, "d1")
	d1 := m.dial(t, &d1Cert, nil)
	d2 := m.role(t, pki.RoleData, "d2")
	if _, err := hb(d1, "d1"); err != nil {
		t.Fatal(err)
	}
	rootCl := m.dial(t, nil, &m.root)
	// A user is not root; a gateway or data server cannot revoke either.
	if _, err := rootCl.S3CreateUser(ctx, &metapb.S3User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	k, err := rootCl.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for name, cl := range map[string]metapb.MetaClient{"alice": m.dial(t, nil, &Credentials{k.Key.AccessKey, k.Secret}), "gateway": m.role(t, pki.RoleGateway, "g"), "data": d2} {
		if _, err := cl.RevokeCert(ctx, &metapb.RevokedCert{Id: "d2"}); !errors.Is(errors.Permission, err) {
			t.Errorf("%s revoking: %v, want PermissionDenied", name, err)
		}
	}
	for _, bad := range []*metapb.RevokedCert{{}, {Id: "a", Serial: "ff"}, {Serial: "XYZ"}} {
		if _, err := rootCl.RevokeCert(ctx, bad); !errors.Is(errors.Invalid, err) {
			t.Errorf("revoking %v: %v, want Invalid", bad, err)
		}
	}
	list, err := rootCl.RevokeCert(ctx, &metapb.RevokedCert{Id: "d1"})
	if err != nil || len(list.Revoked) != 1 || list.Revoked[0].Id != "d1" {
		t.Fatalf("revoke: %v %v", list, err)
	}
	if _, err := hb(d1, "d1"); !errors.Is(errors.Unauthenticated, err) {
		t.Fatalf("heartbeat of the revoked server over its open connection: %v, want Unauthenticated", err)
	}
	if _, err := hb(m.dial(t, &d1Cert, nil), "d1"); err == nil {
		t.Fatal("heartbeat of the revoked server over a new connection succeeded")
	}
	resp, err := hb(d2, "d2")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Revoked) != 1 || resp.Revoked[0].Id != "d1" {
		t.Fatalf("heartbeat answer carries %v, want d1's revocation", resp.Revoked)
	}

	// The list is meta's state: it comes back after a restart.
	cfg := m.svc.cfg
	m.svc.Close()
	cfg.Revoked = nil
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if err := svc.cfg.Revoked.CheckPeer(nil); err != nil || len(svc.cfg.Revoked.List()) != 1 || svc.cfg.Revoked.List()[0].ID != "d1" {
		t.Fatalf("after a restart: %v", svc.cfg.Revoked.List())
	}
}
