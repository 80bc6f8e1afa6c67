package meta

import (
	"bytes"
	"testing"
	"time"

	"cairn/proto/metapb"
)

// TestTierMoveIntent: meta dies after the mover copied part of a file (the
// copy is named in the move's intent, as the mover does before it copies
// on) and starts again. The copy is kept through the intent's grace, then
// collected; the file reads as before throughout; a switch naming copies
// already released is void; and the leader's own move in progress keeps
// its intent however old.
func TestTierMoveIntent(t *testing.T) {
	ts, c, n, data := tierFixture(t)
	svc := ts.svc
	mem := c.chunks("data1:80").(*memChunks)

	// The mover's first steps: copy the first extent, name it in the intent.
	key, vol, err := svc.tierPut(svc.dataCtx(bg), "tns", "ec-4+2", nil, data[:8])
	if err != nil {
		t.Fatal(err)
	}
	cp := &metapb.Extent{Offset: 0, Length: 8, Volume: vol.Id, Key: key}
	if err := svc.tierNoteCopy(n.Ino, cp); err != nil {
		t.Fatal(err)
	}

	// Meta stops there and starts again from its store.
	cfg := svc.cfg
	ts.stop()
	svc, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts = serve(t, svc)
	if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "data1:80", Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	intents := func() uint64 {
		t.Helper()
		st, err := ts.cl.TierStatus(bg, &metapb.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		return st.Intents
	}
	check := func(when string) {
		t.Helper()
		got, r := readFile(t, ts, c, "d/f")
		if !bytes.Equal(got, data) || r.Inode.Version != n.Version || r.Inode.StorageClass != "" {
			t.Fatalf("%s: the file reads %q (version %d, class %q); want %q, version %d", when, got, r.Inode.Version, r.Inode.StorageClass, data, n.Version)
		}
	}
	check("after the restart")
	if intents() != 1 {
		t.Fatalf("the intent did not survive the restart (%d open)", intents())
	}

	// Within the grace the copy stays (a mover may still be at work).
	if err := svc.releaseIntents(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	if mem.count(vol.Id) != 1 {
		t.Fatalf("the copy went before the intent's grace (%d needles)", mem.count(vol.Id))
	}
	// Past it, the copy is garbage: nothing is left in the target volume.
	later := time.Now().Add(svc.tierIntentGrace() + time.Second)
	if err := svc.releaseIntents(later); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	if got := mem.count(vol.Id); got != 0 {
		t.Fatalf("the unfinished move's copy was not reclaimed: %d needles in volume %d", got, vol.Id)
	}
	if intents() != 0 {
		t.Fatalf("%d intents left after the release", intents())
	}
	if st, _ := ts.cl.TierStatus(bg, &metapb.Empty{}); st.UnfinishedReleased != 1 {
		t.Fatalf("status counts %d unfinished moves released, want 1", st.UnfinishedReleased)
	}
	check("after the release")

	// A mover that lost the lead and won it back switches to copies another
	// leader released: the switch is void.
	_, r := readFile(t, ts, c, "d/f")
	res, err := svc.propose(&metapb.Command{Op: &metapb.Command_TierMove{TierMove: &metapb.TierMoveCommand{
		Ns: "tns", Path: "d/f", Ino: n.Ino, Version: r.Inode.Version, From: r.Extents,
		To: []*metapb.Extent{{Offset: 0, Length: 20, Volume: vol.Id, Key: key}}, StorageClass: "ec-4+2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.inode != nil {
		t.Fatal("a switch to released copies was committed")
	}
	check("after the void switch")

	// The leader's own move in progress keeps its intent, however old.
	key2, vol2, err := svc.tierPut(svc.dataCtx(bg), "tns", "ec-4+2", nil, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.tierNoteCopy(n.Ino, &metapb.Extent{Length: 20, Volume: vol2.Id, Key: key2}); err != nil {
		t.Fatal(err)
	}
	svc.tier.mu.Lock()
	svc.tier.moving[n.Ino] = "test move"
	svc.tier.mu.Unlock()
	if err := svc.releaseIntents(later); err != nil {
		t.Fatal(err)
	}
	if intents() != 1 {
		t.Fatal("the intent of a move in progress was released")
	}
	// Its abort (a copy failed) ends the intent and drops the copy.
	svc.discardCopies(n.Ino, []*metapb.Extent{{Length: 20, Volume: vol2.Id, Key: key2}})
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	if intents() != 0 || mem.count(vol2.Id) != 0 {
		t.Fatalf("after an abort: %d intents, %d needles in the target volume", intents(), mem.count(vol2.Id))
	}
	check("after the abort")
}

// TestTierNoteReads: reads a client reports from its cache move a file's
// atime as a Resolve does, and keep it from a rule for unread files.
func TestTierNoteReads(t *testing.T) {
	ts, _, n, _ := tierFixture(t)
	svc := ts.svc
	setGrain(svc, time.Nanosecond)
	if _, err := ts.cl.TierNoteReads(bg, &metapb.TierReadsRequest{Ns: "tns", Inos: []uint64{n.Ino}}); err != nil {
		t.Fatal(err)
	}
	if err := svc.flushReads(); err != nil {
		t.Fatal(err)
	}
	r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "tns", Path: "d/f"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Inode.AtimeNs <= n.MtimeNs {
		t.Fatalf("a reported read did not move atime (%d, mtime %d)", r.Inode.AtimeNs, n.MtimeNs)
	}
	if st, _ := ts.cl.TierStatus(bg, &metapb.Empty{}); st.CachedReads != 1 {
		t.Fatalf("status counts %d cached reads, want 1", st.CachedReads)
	}
}
