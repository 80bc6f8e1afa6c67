package meta

import (
	"testing"
	"time"

	"cairn/internal/await"
)

// TestGroupIdleLeaderHoldsCommitAppends: a leader with nothing new to
// tell its followers sends them a commit-only append about every holdMax,
// not every CommitTimeout (5-10 ms): 20 appends to a follower take it at
// least 20 holdMax. Writes still reach every member.
func TestGroupIdleLeaderHoldsCommitAppends(t *testing.T) {
	g := newTestGroup(t, 3, nil)
	l := g.awaitLeader()
	cl := g.client()
	mkns(t, cl, "idle")
	rt := l.svc.group.repl
	start, n0 := time.Now(), rt.commitOnly.Load()
	const n = 40 // to two followers: 20 each
	await.Until(t, 20*time.Second, "commit-only appends", func() bool { return rt.commitOnly.Load() >= n0+n })
	if took, least := time.Since(start), n/2*holdMax*9/10; took < least {
		t.Fatalf("%d commit-only appends in %v on an idle group, want at least %v", n, took, least)
	}
	put(t, cl, "idle", "after", 1, 1)
	applied := l.svc.group.applied.Load()
	for _, m := range g.members {
		await.Until(t, 10*time.Second, "every member applied the write", func() bool { return m.svc.group.applied.Load() >= applied })
	}
}
