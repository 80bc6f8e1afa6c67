package volume

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/vfs"
)

// heldFS holds the next Datasync of a .dat file, once armed, until
// released: a write then has its place in the file and waits for its
// group commit.
type heldFS struct {
	vfs.FS
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when the held sync has begun
	release chan struct{}
}

func (h *heldFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || filepath.Ext(name) != ".dat" {
		return f, err
	}
	return heldFile{f, h}, nil
}

type heldFile struct {
	vfs.File
	h *heldFS
}

func (f heldFile) Datasync() error {
	f.h.mu.Lock()
	hold := f.h.armed
	f.h.armed = false
	f.h.mu.Unlock()
	if hold {
		close(f.h.held)
		<-f.h.release
	}
	return f.File.Datasync()
}

// TestSealWaitsForPendingWrites: a needle written before the volume is
// sealed but acknowledged only after (its fdatasync was under way) is in
// the index Seal leaves behind, the one an encode packs
// (chunk.Store.EncodeVolume). With a read-only mark alone it was left out
// of the shards and lost when the replicas were dropped.
func TestSealWaitsForPendingWrites(t *testing.T) {
	h := &heldFS{FS: vfs.Default, held: make(chan struct{}), release: make(chan struct{})}
	v, _ := newVol(t, Options{FS: h})
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	type put struct {
		key uint64
		err error
	}
	acked := make(chan put, 1)
	go func() {
		key, err := v.Append(1, payload(1, 5000))
		acked <- put{key, err}
	}()
	<-h.held // the write's group commit is syncing, held

	type sealed struct {
		locs []NeedleLoc
		err  error
	}
	done := make(chan sealed, 1)
	go func() {
		err := v.Seal()
		_, locs := v.Locations() // what an encode packs
		done <- sealed{locs, err}
	}()
	// Seal either waits for the held write (it joins the group commit's
	// waiters) or has returned; only then is the sync let go.
	var s sealed
	returned := false
	await.Until(t, time.Minute, "Seal to wait for the pending write, or return", func() bool {
		select {
		case s = <-done:
			returned = true
			return true
		default:
		}
		v.pendMu.Lock()
		defer v.pendMu.Unlock()
		return v.waiters > 0
	})
	close(h.release)
	p := <-acked
	if p.err != nil {
		t.Fatal(p.err)
	}
	if !returned {
		s = <-done
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	if !slices.ContainsFunc(s.locs, func(l NeedleLoc) bool { return l.Key == p.key }) {
		t.Fatalf("needle %d was acknowledged but is not in the index taken after Seal (%d needles)", p.key, len(s.locs))
	}
	if _, err := v.Append(1, payload(2, 10)); err == nil {
		t.Fatal("a sealed volume took a new needle")
	}
}
