package server_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	cairnapi "cairn/api"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// TestRevokedDataServerStopsServing: `cairn admin cert revoke` of a data
// server (by its id, the advertised address) in a running store: its next
// heartbeat is refused, so its lease runs out and it serves nothing; a
// read of a file it holds fails instead of being answered.
func TestRevokedDataServerStopsServing(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.HotCacheSize = 0 })
	ctx := context.Background()
	cl := cairnapi.New(s.URL(), servertest.Root, servertest.RootSecret)
	if _, err := cl.CreateNamespace(ctx, "revoked", cairnapi.Private); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "revoked", "a", strings.NewReader("held by the data server"), 23, cairnapi.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func() error {
		rc, _, err := cl.Get(ctx, "revoked", "a", cairnapi.GetOptions{})
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	mc, conn, err := meta.Dial(s.Addr("meta"), meta.DialTLS(s.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := mc.RevokeCert(ctx, &metapb.RevokedCert{Id: s.Addr("chunk")}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	await.Until(t, 30*time.Second, "a read from the revoked data server fails", func() bool { return read() != nil })
	t.Logf("reads refused %v after the revocation (the lease: --dead-after less a tenth)", time.Since(start).Round(100*time.Millisecond))
}
