package meta

import (
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/meta/metatest"
)

// TestGroupLinearizable records every call of 4 clients (puts, deletes
// and reads of 3 files) across the loss of the leader and checks the
// history with porcupine: no acknowledged write lost, no stale read.
func TestGroupLinearizable(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	old := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "lin")
	h := metatest.Clients(cl, "lin", 4, 20*time.Second)
	await.Until(t, 30*time.Second, "300 operations", func() bool { return h.Len() >= 300 })
	g.stop(old)
	before := h.Len()
	await.Until(t, 30*time.Second, "300 operations after the leader's loss", func() bool { return h.Len() >= before+300 })
	h.Stop()
	t.Logf("the leader stopped after %d operations", before)
	h.Check(t)
}
