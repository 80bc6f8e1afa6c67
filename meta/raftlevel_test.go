package meta

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn/internal/await"
)

// TestGroupWriteSetsWaitForEveryMember: while one member does not say in
// its Raft handshake that it reads write sets (a member of an older
// version), the leader logs entries of commands, which that member can
// run; once the member comes back saying it does, the leader logs write
// sets again. The members end equal either way.
func TestGroupWriteSetsWaitForEveryMember(t *testing.T) {
	var legacy atomic.Bool
	legacy.Store(true)
	g := &testGroup{t: t}
	g.tweak = func(gc *GroupConfig) {
		gc.legacyEntries = legacy.Load() && gc.ID == g.members[2].addr
	}
	g.boot(3)
	old := g.members[2]
	l := g.awaitLeader()
	if l == old { // the old member proposes commands itself: let a new one lead
		if err := old.svc.group.r.LeadershipTransfer().Error(); err != nil {
			t.Fatal(err)
		}
		await.Until(t, 20*time.Second, "a leader of this version", func() bool {
			l = g.leader()
			return l != nil && l != old
		})
	}
	cl := g.client()
	mkns(t, cl, "levels")

	// load puts files from 4 callers at once, so that entries hold
	// several commands, and returns the log's last index before them.
	key := uint64(0)
	load := func(phase string) uint64 {
		t.Helper()
		first, err := l.svc.group.logs.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			base := key + uint64(w*100)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					put(t, cl, "levels", fmt.Sprintf("%s/w%d/f%d", phase, w, i), 1, base+uint64(i)+1)
				}
			}()
		}
		wg.Wait()
		key += 1000
		return first
	}
	sameStores := func() {
		t.Helper()
		applied := l.svc.group.applied.Load()
		want := dump(t, l.svc.db)
		for _, m := range g.members {
			await.Until(t, 20*time.Second, "every member applied the load", func() bool { return m.svc.group.applied.Load() >= applied })
			if got := dump(t, m.svc.db); got != want {
				t.Fatalf("member %s's store differs from the leader's", m.addr)
			}
		}
	}

	first := load("old")
	entries := commandEntries(t, l, first)
	for _, e := range entries {
		if isWriteSet(e.Data) {
			t.Fatalf("entry %d is a write set, while member %s does not read them", e.Index, old.addr)
		}
	}
	if len(entries) == 0 {
		t.Fatal("no entries logged")
	}
	sameStores()

	// The member on this version: the leader dials it again and learns it.
	g.stop(old)
	legacy.Store(false)
	g.restart(old)
	await.Until(t, 20*time.Second, "the leader knows every member reads write sets", l.svc.group.writeSetsAgreed)
	first = load("new")
	sets := 0
	for _, e := range commandEntries(t, l, first) {
		if isWriteSet(e.Data) {
			sets++
		}
	}
	if sets == 0 {
		t.Fatal("no write sets once every member reads them")
	}
	sameStores()
}
