package clustertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/internal/await"
)

// TestMountRidesThroughMetaLeaderChange: a FUSE mount of a cluster whose
// meta is a group of three writes files and lists its directory while
// the meta leader is killed (kill -9), twice. The mount's session, its
// leases and its invalidation stream move to the new leader: no call the
// kernel made fails, and every file written reads back.
func TestMountRidesThroughMetaLeaderChange(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := Start(t, Options{Bin: bin, Servers: 3, MetaGroup: 3})
	c.CreateNS(t, "mnt", 2)
	dir, unmount := mountNS(t, c, c.MetaAddr, "mnt")

	var (
		mu      sync.Mutex
		written []string
		failure error
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		fail := func(err error) {
			mu.Lock()
			failure = err
			mu.Unlock()
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("f%04d", i)
			if err := os.WriteFile(filepath.Join(dir, name), chunktest.Data(uint64(i), 4096), 0o644); err != nil {
				fail(fmt.Errorf("write %s: %w", name, err))
				return
			}
			mu.Lock()
			written = append(written, name)
			mu.Unlock()
			if i%4 == 3 {
				ents, err := os.ReadDir(dir)
				if err != nil {
					fail(fmt.Errorf("list after %s: %w", name, err))
					return
				}
				if len(ents) != i+1 {
					fail(fmt.Errorf("list after %s: %d entries, want %d", name, len(ents), i+1))
					return
				}
			}
		}
	}()
	progress := func() (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(written), failure
	}
	waitMore := func(n int, what string) {
		t.Helper()
		await.Until(t, 60*time.Second, what, func() bool {
			got, err := progress()
			if err != nil {
				t.Fatalf("the mount failed a call: %v", err)
			}
			return got >= n
		})
	}
	waitMore(10, "files before the first kill")
	for round := range 2 {
		leader := c.MetaLeader(t)
		n, _ := progress()
		killed := time.Now()
		leader.Kill(t)
		waitMore(n+10, "files after the kill")
		t.Logf("round %d: killed meta leader %s; 10 more files written and listed %v later", round, leader.Addr, time.Since(killed).Round(time.Millisecond))
		leader.Start(t)
	}
	close(stop)
	<-done
	if _, err := progress(); err != nil {
		t.Fatalf("the mount failed a call: %v", err)
	}
	mu.Lock()
	names := append([]string(nil), written...)
	mu.Unlock()
	for i, name := range names {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != string(chunktest.Data(uint64(i), 4096)) {
			t.Fatalf("%s reads back %d bytes, %v", name, len(got), err)
		}
	}
	unmount()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, name := range names {
		if err := c.Check(ctx, "mnt", name, chunktest.Data(uint64(i), 4096)); err != nil {
			t.Errorf("store: %v", err)
		}
	}
}
