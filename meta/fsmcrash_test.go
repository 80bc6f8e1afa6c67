package meta

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"cairn/internal/await"
	"cairn/proto/metapb"
)

// The state machine's batches are not logged (raft.go, ApplyBatch;
// storeOptions): a member that crashes loses what its store had not yet
// flushed to tables, not the Raft log's entries. TestGroupMemberReappliesLostTail gives a
// follower that loss (its store put back to a checkpoint taken earlier,
// as if everything after had not reached the disk) and restarts it: it
// applies again from the applied index its store holds, and ends with
// the leader's state: nothing acknowledged lost, no append applied twice.
func TestGroupMemberReappliesLostTail(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "crash")
	// Half the appends through the group client (with request ids), half
	// straight to the leader (without): those only the applied index
	// keeps from applying twice.
	lc, conn, err := Dial(l.addr, DialTLS(l.node.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	appendOnce := func(i int) {
		t.Helper()
		c := cl
		if i%2 == 1 {
			c = lc
		}
		if _, err := c.Append(bg, &metapb.AppendRequest{Ns: "crash", Path: "log", Create: true,
			Extents: []*metapb.Extent{ext(0, 10, 1, uint64(1000+i))}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		appendOnce(i)
	}
	f := g.follower(l)
	caughtUp := func() bool { return f.svc.group.applied.Load() >= l.svc.group.applied.Load() }
	await.Until(t, 20*time.Second, "the follower to apply the first appends", caughtUp)
	// A member's store has no write-ahead log (storeOptions): what a crash
	// keeps of it is its tables, so the checkpoint is of them.
	if err := f.svc.db.Flush(); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if err := f.svc.db.Checkpoint(ckpt); err != nil {
		t.Fatal(err)
	}
	// What the checkpoint holds is read from it: the follower may apply
	// more between the flush and the checkpoint.
	lost := checkpointApplied(t, ckpt)
	for i := 20; i < 50; i++ {
		appendOnce(i)
		put(t, cl, "crash", fmt.Sprintf("f%d", i), 1, uint64(i))
	}
	await.Until(t, 20*time.Second, "the follower to apply the rest", caughtUp)

	g.stop(f)
	store := filepath.Join(f.dir, "pebble")
	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ckpt, store); err != nil {
		t.Fatal(err)
	}
	if want := l.svc.group.applied.Load(); lost+60 > want {
		t.Fatalf("the checkpoint holds the entries to %d of %d: it does not lose the 60 commands after it", lost, want)
	}
	// The member restarts from the checkpoint's applied index; it is not
	// read here, because Raft may apply entries from the log at once,
	// before the test looks (it did at load 36). The checks below fail if
	// it started from another: later, what was lost stays missing; earlier,
	// appends without request ids are applied twice.
	g.restart(f)
	await.Until(t, 20*time.Second, "the restarted follower to catch up", caughtUp)
	r, err := f.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "crash", Path: "log"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inode.Size != 500 {
		t.Fatalf("the follower's appended file is %d bytes after re-applying, want 500 (50 appends of 10)", r.Inode.Size)
	}
	for i := 20; i < 50; i++ {
		if _, err := f.svc.Resolve(bg, &metapb.ResolveRequest{Ns: "crash", Path: fmt.Sprintf("f%d", i)}); err != nil {
			t.Fatalf("f%d, committed after the lost point, is missing on the restarted follower: %v", i, err)
		}
	}
	if a, b := dump(t, f.svc.db), dump(t, l.svc.db); a != b {
		t.Fatalf("the restarted follower's store differs from the leader's")
	}
}

// checkpointApplied is the applied index of the store checkpointed in dir.
func checkpointApplied(t *testing.T, dir string) uint64 {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietLogger{slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	i, err := appliedIndex(db)
	if err != nil {
		t.Fatal(err)
	}
	return i
}
