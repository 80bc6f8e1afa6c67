package fusefs_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn"
	"cairn/chunk"
	"cairn/client"
	"cairn/fusefs"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// TestMountOutlivesCapabilities: a mount holds a file open (its extents
// and their read capabilities) for longer than a capability lives, across
// key rotations, and keeps reading: the client renews the capabilities
// with meta. Reads go over HTTP (no local reads) and past a block cache
// too small to hold the file, so each read reaches a data server.
func TestMountOutlivesCapabilities(t *testing.T) {
	const ttl = 2 * time.Second
	srv := servertest.Start(t, func(c *server.Config) {
		c.NoLocalReads, c.CapTTL, c.CapRotate, c.ExtentSize = true, ttl, 3*time.Second, 256<<10
	})
	ctx := context.Background()
	if _, err := srv.Client().CreateNamespace(ctx, "data", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4<<20)
	rand.New(rand.NewSource(1)).Read(want)
	if _, err := srv.Client().Put(ctx, "data", "big", bytes.NewReader(want), client.PutOptions{SizeHint: int64(len(want))}); err != nil {
		t.Fatal(err)
	}
	dir, _ := mount(t, srv, "data", func(c *fusefs.Config) { c.BlockSize, c.CacheSize = 64<<10, 256<<10 })
	f, err := os.Open(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	check := func(round int) {
		t.Helper()
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: wrong bytes", round)
		}
	}
	check(0)
	// Past two lifetimes (and at least one rotation), twice.
	for round := 1; round <= 2; round++ {
		until := time.Now().Add(2*ttl + 500*time.Millisecond)
		for time.Now().Before(until) {
			time.Sleep(100 * time.Millisecond) // waiting for the clock itself
		}
		check(round)
	}
}

// TestMountEvictedCapabilities: the mount holds the extents of files it
// read while its client evicts their capabilities (it keeps a bounded
// number); reading such a file through an open descriptor looks it up
// afresh instead of failing with EACCES. Reads go over HTTP past a block
// cache too small to keep the files, with the kernel's page cache dropped.
func TestMountEvictedCapabilities(t *testing.T) {
	srv := remoteStore(t)
	dir, _ := mount(t, srv, "data", func(c *fusefs.Config) {
		cl, err := client.New(client.Config{
			Meta: c.Meta, Dial: func(a string) cairn.Chunks { return chunk.NewRemoteTLS(a, srv.UserTLS()) },
			NoWatch: true, CacheEntries: -1, CapCacheSize: 2 << 10, // a few capabilities
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		c.Client, c.BlockSize, c.CacheSize = cl, 64<<10, 64<<10
	})
	const n = 30
	body := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 300<<10) } // a needle each
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), body(i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Open all first: an open looks the file up (and brings its
	// capabilities), reads through a descriptor do not.
	files := make([]*os.File, n)
	for i := range n {
		f, err := os.Open(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	for round := range 2 {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1\n"), 0); err != nil {
			t.Fatal(err)
		}
		for i, f := range files {
			got := make([]byte, len(body(i)))
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatalf("round %d, file %d: %v", round, i, err)
			}
			if !bytes.Equal(got, body(i)) {
				t.Fatalf("round %d, file %d: wrong bytes", round, i)
			}
		}
	}
}
