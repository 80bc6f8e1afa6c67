package client_test

import (
	"bytes"
	"fmt"
	"testing"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// TestEvictedCapabilityLooksUp: a client whose capability store is full
// has evicted the capabilities of files it looked up earlier; reading one
// of them looks the file up again rather than failing.
func TestEvictedCapabilityLooksUp(t *testing.T) {
	// Over HTTP: a read of the volume's files in place needs no capability.
	s := servertest.Start(t, func(c *server.Config) { c.NoLocalReads = true })
	mc, conn, err := meta.Dial(s.Addr("meta"), meta.DialTLS(s.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := client.New(client.Config{
		Meta:         mc,
		Dial:         func(addr string) cairn.Chunks { return chunk.NewRemoteTLS(addr, s.UserTLS()) },
		CapCacheSize: 2 << 10, // a few capabilities
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.CreateNamespace(bg, "data", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	const n = 40
	files := make([]*client.File, n)
	for i := range n {
		p := fmt.Sprintf("f%d", i)
		put(t, c, "data", p, "content of "+p)
		f, err := c.StatFresh(bg, "data", p)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	for i, f := range files { // the first ones' capabilities are long gone
		got, err := c.ReadAll(bg, f)
		if err != nil {
			t.Fatalf("read f%d: %v", i, err)
		}
		if want := fmt.Sprintf("content of f%d", i); !bytes.Equal(got, []byte(want)) {
			t.Fatalf("f%d: %q, want %q", i, got, want)
		}
	}
}
