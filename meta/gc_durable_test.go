package meta

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// walHold holds the next sync of Pebble's log, once armed, until released.
type walHold struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{}
	release chan struct{}
}

func (h *walHold) wrap(fs vfs.FS) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		default:
			return nil
		}
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		h.mu.Lock()
		hold := h.armed
		h.armed = false
		h.mu.Unlock()
		if hold {
			close(h.held)
			<-h.release
		}
		return nil
	}))
}

// inPebble reports whether a goroutine running fn is inside Pebble (a
// log sync, waiting for one).
func inPebble(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "cockroachdb/pebble") {
			return true
		}
	}
	return false
}

// TestGCDeletesOnlyDurableGarbage: a commit that released a needle is
// visible before its log sync is done. The collector must not delete the
// needle until then: a crash before the sync brings the file back as it
// was, naming that needle (an acknowledged write lost).
func TestGCDeletesOnlyDurableGarbage(t *testing.T) {
	h := &walHold{held: make(chan struct{}), release: make(chan struct{})}
	c := newCluster()
	cfg := testConfig(t.TempDir(), c)
	cfg.GCInterval = time.Hour // passes run when this test says
	cfg.wrapStoreFS = h.wrap
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "data1:80", Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	mkns(t, ts.cl, "gcns")
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "gcns"})
	if err != nil {
		t.Fatal(err)
	}
	vol := a.Volume
	mem := c.chunks(vol.Servers[0]).(*memChunks)
	commit := func(key uint64) error {
		_, err := ts.cl.Commit(bg, &metapb.CommitRequest{Ns: "gcns", Path: "f", Size: 3, Etag: "e",
			Extents: []*metapb.Extent{{Length: 3, Volume: vol.Id, Key: key}}})
		return err
	}
	k1, err := mem.Put(bg, vol.Id, vol.Generation, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(k1); err != nil {
		t.Fatal(err)
	}
	k2, err := mem.Put(bg, vol.Id, vol.Generation, []byte("two"))
	if err != nil {
		t.Fatal(err)
	}

	// The overwrite applies (k1 is garbage in what readers see), and its
	// log sync is held.
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	committed := make(chan error, 1)
	go func() { committed <- commit(k2) }()
	<-h.held
	await.Until(t, time.Minute, "the overwrite to be visible", func() bool {
		r, err := svc.Resolve(bg, &metapb.ResolveRequest{Ns: "gcns", Path: "f", WantExtents: true})
		return err == nil && len(r.Extents) == 1 && r.Extents[0].Key == k2
	})

	// A collection pass now: it may not delete k1 before the sync is done.
	collected := make(chan error, 1)
	go func() { _, err := svc.collect(); collected <- err }()
	await.Until(t, time.Minute, "the collector to finish or to wait on the store's log", func() bool {
		select {
		case err := <-collected:
			collected <- err
			return true
		default:
		}
		return inPebble("(*Service).collect(")
	})
	var early []byte
	mem.mu.Lock()
	if _, ok := mem.vols[vol.Id].needles[k1]; !ok {
		early = []byte("deleted")
	}
	mem.mu.Unlock()
	close(h.release)
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
	if early != nil {
		t.Fatal("the collector deleted the needle an overwrite released before the overwrite was durable")
	}
	// Once durable, it is collected.
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	mem.mu.Lock()
	_, kept := mem.vols[vol.Id].needles[k1]
	mem.mu.Unlock()
	if kept {
		t.Fatal("the released needle was never collected")
	}
}
