package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

var bg = context.Background()

// counting wraps a MetaClient and counts resolutions, so a test can tell a
// cache hit from a round trip.
type counting struct {
	metapb.MetaClient
	resolves atomic.Int64
}

func (c *counting) Resolve(ctx context.Context, in *metapb.ResolveRequest, opts ...grpc.CallOption) (*metapb.ResolveResponse, error) {
	c.resolves.Add(1)
	return c.MetaClient.Resolve(ctx, in, opts...)
}

func start(t *testing.T) (*server.Server, *counting, *client.Client) {
	t.Helper()
	s := servertest.Start(t, nil)
	cm, c := newClient(t, s)
	return s, cm, c
}

// newClient returns a client of s of its own, with a short TTL, whose
// resolutions are counted.
func newClient(t *testing.T, s *server.Server) (*counting, *client.Client) {
	t.Helper()
	// A client of its own, as root (a mount's or the CLI's way in).
	mc, conn, err := meta.Dial(s.Addr("meta"), meta.DialTLS(s.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cm := &counting{MetaClient: mc}
	c, err := client.New(client.Config{
		Meta:       cm,
		Dial:       func(addr string) cairn.Chunks { return chunk.NewRemoteTLS(addr, s.UserTLS()) },
		CacheTTL:   20 * time.Millisecond,
		ExtentSize: 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cm, c
}

// delivered writes a marker file in ns and waits until its change event
// reaches c: the events of every change before it have then been applied.
func delivered(t *testing.T, c *client.Client, ns string) {
	t.Helper()
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	var seen atomic.Bool
	c.OnChange(func(ev *metapb.Event) {
		if ev.Ns == ns && ev.Path == marker {
			seen.Store(true)
		}
	})
	put(t, c, ns, marker, "")
	await.Until(t, 10*time.Second, "the marker's change event", seen.Load)
}

func put(t *testing.T, c *client.Client, ns, p, body string) {
	t.Helper()
	if _, err := c.Put(bg, ns, p, bytes.NewReader([]byte(body)), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestCacheTrustedOnQuietStream is the regression test for a cache that
// only went live after the first change event: on a store nobody writes
// to, every stat went back to meta once the TTL passed.
func TestCacheTrustedOnQuietStream(t *testing.T) {
	s, _, _ := start(t)
	other := s.Client()
	if _, err := other.CreateNamespace(bg, "quiet", "root", metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	put(t, other, "quiet", "a/b/c/file", "v1")
	cm, c := newClient(t, s) // connects after the last change
	c.OnChange(func(ev *metapb.Event) { t.Logf("event %v", ev) })
	// The first stat may race the stream's start; once the stream is
	// live, a cached entry must outlive the TTL many times over.
	await.Until(t, 5*time.Second, "a cached stat", func() bool {
		if _, err := c.Stat(bg, "quiet", "a/b/c/file"); err != nil {
			t.Fatal(err)
		}
		before := cm.resolves.Load()
		// The clock passing three TTLs is what is tested, not an event
		// awaited; a sleep never ends early, so a slow machine cannot
		// make this pass.
		time.Sleep(60 * time.Millisecond)
		if _, err := c.Stat(bg, "quiet", "a/b/c/file"); err != nil {
			t.Fatal(err)
		}
		return cm.resolves.Load() == before
	})
}

// TestCacheSeesOtherWriters checks that another client's overwrite,
// delete and rename reach this client's cache through the change stream.
func TestCacheSeesOtherWriters(t *testing.T) {
	s, _, c := start(t)
	other := s.Client()
	if _, err := other.CreateNamespace(bg, "coherent", "root", metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	put(t, other, "coherent", "d/f", "one")
	read := func(p string) (string, error) {
		f, err := c.Stat(bg, "coherent", p)
		if err != nil {
			return "", err
		}
		b, err := c.ReadAll(bg, f)
		return string(b), err
	}
	if got, err := read("d/f"); err != nil || got != "one" {
		t.Fatalf("read %q %v", got, err)
	}
	put(t, other, "coherent", "d/f", "two")
	await.Until(t, 5*time.Second, "the overwrite", func() bool { got, _ := read("d/f"); return got == "two" })

	if _, err := other.Rename(bg, "coherent", "d", "e", false); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 5*time.Second, "the rename", func() bool {
		_, err := read("d/f")
		got, err2 := read("e/f")
		return errors.Is(errors.NotExist, err) && err2 == nil && got == "two"
	})
	if err := other.Delete(bg, "coherent", "e/f", false, ""); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 5*time.Second, "the delete", func() bool { _, err := read("e/f"); return errors.Is(errors.NotExist, err) })
}

// BenchmarkCachedStat measures a warm Stat: the path every gateway GET
// takes before it reads data.
func BenchmarkCachedStat(b *testing.B) {
	c := servertest.Start(b, nil).Client()
	if _, err := c.CreateNamespace(bg, "bench", "root", metapb.Visibility_PRIVATE); err != nil {
		b.Fatal(err)
	}
	const n = 1000
	for i := range n {
		if _, err := c.Put(bg, "bench", fmt.Sprintf("d%d/f%d", i%10, i), bytes.NewReader([]byte("x")), client.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := c.Stat(bg, "bench", fmt.Sprintf("d%d/f%d", i%10, i%n)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// TestOwnWriteCached checks that a file the client just wrote is read back
// with no meta call, that the cached record matches meta's, and that a
// later write by another client still replaces it.
func TestOwnWriteCached(t *testing.T) {
	s, cm, c := start(t)
	if _, err := c.CreateNamespace(bg, "own", "root", metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	// Writes before the stream is live are not cached; wait for it.
	await.Until(t, 5*time.Second, "a cached write", func() bool {
		put(t, c, "own", "probe", "x")
		before := cm.resolves.Load()
		if _, err := c.Stat(bg, "own", "probe"); err != nil {
			t.Fatal(err)
		}
		return cm.resolves.Load() == before
	})
	body := bytes.Repeat([]byte("cairn"), 100_000) // several extents at a small extent size
	if _, err := c.Put(bg, "own", "new/dir/file", bytes.NewReader(body), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	delivered(t, c, "own") // the write's own events have arrived
	before := cm.resolves.Load()
	f, err := c.Stat(bg, "own", "new/dir/file")
	if err != nil {
		t.Fatal(err)
	}
	if n := cm.resolves.Load() - before; n != 0 {
		t.Fatalf("%d resolves to read back our own write", n)
	}
	fresh, err := c.StatFresh(bg, "own", "new/dir/file")
	if err != nil {
		t.Fatal(err)
	}
	if f.Inode.Version != fresh.Inode.Version || len(f.Extents) != len(fresh.Extents) || f.Size() != fresh.Size() {
		t.Fatalf("cached %v / %d extents, meta %v / %d", f.Inode, len(f.Extents), fresh.Inode, len(fresh.Extents))
	}
	for i := range f.Extents {
		a, b := f.Extents[i], fresh.Extents[i]
		if a.Volume != b.Volume || a.Key != b.Key || a.Offset != b.Offset || a.Length != b.Length {
			t.Fatalf("extent %d: cached %v, meta %v", i, a, b)
		}
	}
	got, err := c.ReadAll(bg, f)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	put(t, s.Client(), "own", "new/dir/file", "replaced")
	await.Until(t, 5*time.Second, "another client's overwrite", func() bool {
		f, err := c.Stat(bg, "own", "new/dir/file")
		return err == nil && f.Size() == int64(len("replaced"))
	})
}
