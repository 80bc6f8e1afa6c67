package meta

import (
	"bytes"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// tierFixture is a meta with one in-memory data server and a file "f" of
// namespace "tns" in one needle.
func tierFixture(t *testing.T) (*testServer, *cluster, *metapb.Inode, []byte) {
	t.Helper()
	c := newCluster()
	cfg := testConfig(t.TempDir(), c)
	cfg.TierInterval = time.Hour // the test runs the steps itself
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	mkns(t, ts.cl, "tns")
	if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "data1:80", Free: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "tns"})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("0123456789abcdefghij")
	k, err := c.chunks("data1:80").Put(bg, a.Volume.Id, a.Volume.Generation, data)
	if err != nil {
		t.Fatal(err)
	}
	// Two extents into the one needle: a move copies each range.
	n, err := ts.cl.Commit(bg, &metapb.CommitRequest{Ns: "tns", Path: "d/f", Size: 20, Parents: true, Extents: []*metapb.Extent{
		{Offset: 0, Length: 8, Volume: a.Volume.Id, Key: k},
		{Offset: 8, Length: 12, Volume: a.Volume.Id, Key: k, NeedleOffset: 8},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return ts, c, n, data
}

func readFile(t *testing.T, ts *testServer, c *cluster, p string) ([]byte, *metapb.ResolveResponse) {
	t.Helper()
	r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "tns", Path: p, WantExtents: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, e := range r.Extents {
		ts.svc.pmu.Lock()
		v := ts.svc.volumes[e.Volume]
		ts.svc.pmu.Unlock()
		if _, err := c.chunks(v.Servers[0]).ReadTo(bg, e.Volume, e.Key, int64(e.NeedleOffset), int64(e.Length), &buf); err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
	}
	return buf.Bytes(), r
}

// TestTierMove: a policy moves a file to another class (copy, then
// switch): the file reads the same from the copies, names its class, and
// its old needle turns into garbage only after the grace period.
func TestTierMove(t *testing.T) {
	ts, c, n, data := tierFixture(t)
	svc := ts.svc
	// The file's volume before the policy: setting one kicks a scan, which
	// may move the file before the test's own scan.
	_, before := readFile(t, ts, c, "d/f")
	oldVol := before.Extents[0].Volume
	if _, err := ts.cl.TierSetPolicy(bg, &metapb.TierPolicy{Ns: "tns", Rules: []*metapb.TierRule{{To: "ec-4+2", Prefix: "d/"}}}); err != nil {
		t.Fatal(err)
	}
	scanNow(t, svc)

	got, r := readFile(t, ts, c, "d/f")
	if !bytes.Equal(got, data) {
		t.Fatalf("after the move the file reads %q, want %q", got, data)
	}
	if r.Inode.StorageClass != "ec-4+2" || r.Inode.Version != n.Version+1 || r.Inode.MtimeNs != n.MtimeNs {
		t.Fatalf("moved inode: class %q version %d mtime %d; want ec-4+2, %d, %d", r.Inode.StorageClass, r.Inode.Version, r.Inode.MtimeNs, n.Version+1, n.MtimeNs)
	}
	for _, e := range r.Extents {
		svc.pmu.Lock()
		v := svc.volumes[e.Volume]
		svc.pmu.Unlock()
		if v.StorageClass != "ec-4+2" {
			t.Fatalf("extent in volume %d of class %q", e.Volume, v.StorageClass)
		}
	}
	st, err := ts.cl.TierStatus(bg, &metapb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Moved != 1 || st.MovedBytes != 20 || len(st.Policies) != 1 || st.Failed != 0 {
		t.Fatalf("status after one move: %v", st)
	}

	// The old needle is kept for the grace period, then collected.
	mem := c.chunks("data1:80").(*memChunks)
	if err := svc.releaseGrace(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	if mem.count(oldVol) != 1 {
		t.Fatalf("the old needle went before its grace ended (%d needles left)", mem.count(oldVol))
	}
	if err := svc.releaseGrace(time.Now().Add(11 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := svc.WaitCollected(bg); err != nil {
		t.Fatal(err)
	}
	if mem.count(oldVol) != 0 {
		t.Fatalf("the old needle is still there after its grace (%d needles)", mem.count(oldVol))
	}

	// The next scan counts the file in its new class and leaves it there.
	scanNow(t, svc)
	st, _ = ts.cl.TierStatus(bg, &metapb.Empty{})
	if st.Moved != 1 || len(st.Classes) != 1 || st.Classes[0].Class != "ec-4+2" || st.Classes[0].Bytes != 20 {
		t.Fatalf("status after the second scan: %v", st)
	}
}

// TestTierMoveStale: a file changed after it was copied keeps its new
// content; the copies become garbage; so do they for a file shared with
// another owner.
func TestTierMoveStale(t *testing.T) {
	ts, c, n, _ := tierFixture(t)
	svc := ts.svc
	_, r := readFile(t, ts, c, "d/f")
	data := c.chunks("data1:80")
	vid := r.Extents[0].Volume
	// Extents the file does not have (since lists are coalesced the file
	// may have one extent, so a prefix of the list would be the list).
	other := proto.Clone(r.Extents[0]).(*metapb.Extent)
	other.Length--
	cases := []struct {
		name string
		cmd  *metapb.TierMoveCommand
	}{
		{"old version", &metapb.TierMoveCommand{Ns: "tns", Path: "d/f", Ino: n.Ino, Version: n.Version - 1, From: r.Extents}},
		{"other extents", &metapb.TierMoveCommand{Ns: "tns", Path: "d/f", Ino: n.Ino, Version: n.Version, From: []*metapb.Extent{other}}},
		{"no such file", &metapb.TierMoveCommand{Ns: "tns", Path: "d/g", Ino: n.Ino + 100, Version: n.Version, From: r.Extents}},
	}
	for _, tc := range cases {
		copyKey, err := data.Put(bg, vid, 1, []byte("copy of the file...."))
		if err != nil {
			t.Fatal(err)
		}
		tc.cmd.To = []*metapb.Extent{{Offset: 0, Length: 20, Volume: vid, Key: copyKey}}
		res, err := svc.propose(&metapb.Command{Op: &metapb.Command_TierMove{TierMove: tc.cmd}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.inode != nil {
			t.Fatalf("%s: the move was committed", tc.name)
		}
		if err := svc.WaitCollected(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := data.ReadTo(bg, vid, copyKey, 0, 20, io.Discard); !errors.Is(errors.NotExist, err) {
			t.Fatalf("%s: the copy was not collected: %v", tc.name, err)
		}
		if _, after := readFile(t, ts, c, "d/f"); after.Inode.Version != n.Version || after.Extents[0].Key != r.Extents[0].Key {
			t.Fatalf("%s: the file changed", tc.name)
		}
	}

	// A needle with a second owner (an S3 copy, a stored version) stays.
	if _, err := svc.propose(&metapb.Command{Op: &metapb.Command_S3Copy{S3Copy: &metapb.S3CopyRequest{
		SrcNs: "tns", SrcPath: "d/f", DstNs: "tns", DstPath: "copy"}}}); err != nil {
		t.Fatal(err)
	}
	res, err := svc.propose(&metapb.Command{Op: &metapb.Command_TierMove{TierMove: &metapb.TierMoveCommand{
		Ns: "tns", Path: "d/f", Ino: n.Ino, Version: n.Version, From: r.Extents}}})
	if err != nil || res.inode != nil {
		t.Fatalf("a move of a shared needle: %v, committed %v", err, res != nil && res.inode != nil)
	}
	if _, err := ts.cl.TierSetPolicy(bg, &metapb.TierPolicy{Rules: []*metapb.TierRule{{To: "ec-4+2"}}}); err != nil {
		t.Fatal(err)
	}
	scanNow(t, svc)
	if st, _ := ts.cl.TierStatus(bg, &metapb.Empty{}); st.Due != 0 || st.Moved != 0 {
		t.Fatalf("files sharing needles were planned to move: %v", st)
	}
}

// TestTierAccess: reads are recorded in batches, one write per file and
// grain however often it is read, and a recent read promotes a file.
func TestTierAccess(t *testing.T) {
	ts, c, n, _ := tierFixture(t)
	svc := ts.svc
	setGrain(svc, time.Nanosecond) // any earlier atime is old
	inode := func() *metapb.Inode {
		_, r := readFile(t, ts, c, "d/f")
		return r.Inode
	}
	inode()
	if err := svc.flushReads(); err != nil {
		t.Fatal(err)
	}
	a1 := inode().AtimeNs
	if a1 <= n.MtimeNs {
		t.Fatalf("a read did not move atime (%d, mtime %d)", a1, n.MtimeNs)
	}
	setGrain(svc, time.Hour)
	for range 5 {
		inode()
	}
	if err := svc.flushReads(); err != nil {
		t.Fatal(err)
	}
	if a2 := inode(); a2.AtimeNs != a1 || a2.Version != n.Version {
		t.Fatalf("reads within the grain moved atime %d -> %d (version %d -> %d)", a1, a2.AtimeNs, n.Version, a2.Version)
	}

	// Promotion: the file, in a cold class, was read lately: back to the hot one.
	if _, err := ts.cl.TierSetPolicy(bg, &metapb.TierPolicy{Ns: "tns", Rules: []*metapb.TierRule{{To: "ec-4+2", UnreadNs: int64(time.Hour)}},
		PromoteTo: ClassReplicated, PromoteReadNs: int64(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	moveTo(t, svc, n.Ino, "ec-4+2")
	scanNow(t, svc)
	if got := inode(); got.StorageClass != "" {
		t.Fatalf("a file read lately stays in %q", got.StorageClass)
	}
}

func setGrain(svc *Service, d time.Duration) {
	svc.tier.mu.Lock()
	svc.tier.grain = d
	svc.tier.mu.Unlock()
}

// scanNow has the mover scan (and move) now and waits for a pass that
// began after the call. A pass in flight may set lastScan after the reset:
// the reset and kick repeat until a new pass has run.
func scanNow(t *testing.T, svc *Service) {
	t.Helper()
	svc.tier.mu.Lock()
	begun := svc.tier.begun
	svc.tier.mu.Unlock()
	await.Until(t, 20*time.Second, "a tiering pass", func() bool {
		svc.tier.mu.Lock()
		done := svc.tier.ended > begun
		if !done {
			svc.tier.lastScan = time.Time{}
		}
		svc.tier.mu.Unlock()
		select {
		case svc.tier.kick <- struct{}{}:
		default:
		}
		return done
	})
}

// moveTo moves file ino to class cls as the mover does.
func moveTo(t *testing.T, svc *Service, ino uint64, cls string) {
	t.Helper()
	v, _ := svc.readView()
	n, _ := v.inode(ino)
	exts, _ := v.extents(n)
	v.close()
	res, err := svc.tierCopyAndSwitch(svc.dataCtx(bg), tierMove{ns: "tns", path: "d/f", from: ClassReplicated, to: cls, ino: ino,
		version: n.Version, size: n.Size, extents: exts, nsClass: ClassReplicated}, &tierLimit{rate: 1 << 30})
	if err != nil || res != "moved" {
		t.Fatalf("move to %s: %s %v", cls, res, err)
	}
}

func TestTierPolicyValidation(t *testing.T) {
	ts, _, _, _ := tierFixture(t)
	for _, tc := range []struct {
		name string
		p    *metapb.TierPolicy
	}{
		{"unknown class", &metapb.TierPolicy{Rules: []*metapb.TierRule{{To: "nvme"}}}},
		{"no class", &metapb.TierPolicy{Rules: []*metapb.TierRule{{UnreadNs: 1}}}},
		{"max below min", &metapb.TierPolicy{Rules: []*metapb.TierRule{{To: "ec-4+2", MinSize: 10, MaxSize: 5}}}},
		{"absolute prefix", &metapb.TierPolicy{Rules: []*metapb.TierRule{{To: "ec-4+2", Prefix: "/logs"}}}},
		{"promotion without window", &metapb.TierPolicy{PromoteTo: ClassReplicated}},
		{"window without promotion", &metapb.TierPolicy{PromoteReadNs: 5}},
		{"rate on a namespace", &metapb.TierPolicy{Ns: "tns", Rate: 5}},
	} {
		_, err := ts.cl.TierSetPolicy(bg, tc.p)
		if !errors.Is(errors.Invalid, err) {
			t.Errorf("%s: got %v, want Invalid", tc.name, err)
		}
	}
	if _, err := ts.cl.TierSetPolicy(bg, &metapb.TierPolicy{Ns: "nope", Rules: []*metapb.TierRule{{To: "ec-4+2"}}}); !errors.Is(errors.NotExist, err) {
		t.Errorf("a policy of a missing namespace: %v", err)
	}
	// Set, read back, remove.
	p := &metapb.TierPolicy{Ns: "tns", Rules: []*metapb.TierRule{{To: "ec-4+2", MinSize: 1}}}
	if _, err := ts.cl.TierSetPolicy(bg, p); err != nil {
		t.Fatal(err)
	}
	l, err := ts.cl.TierGetPolicy(bg, &metapb.TierPolicyRequest{Ns: "tns"})
	if err != nil || len(l.Policies) != 1 || l.Policies[0].Rules[0].MinSize != 1 {
		t.Fatalf("get: %v %v", l, err)
	}
	if _, err := ts.cl.TierSetPolicy(bg, &metapb.TierPolicy{Ns: "tns"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := ts.cl.TierGetPolicy(bg, &metapb.TierPolicyRequest{}); len(l.Policies) != 0 {
		t.Fatalf("after removal: %v", l)
	}
}

// TestTierTarget: which class a policy puts a file in.
func TestTierTarget(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	pol := &metapb.TierPolicy{
		Rules: []*metapb.TierRule{
			{To: "hot", Prefix: "pinned/"},
			{To: "cold", UnreadNs: int64(24 * time.Hour), MinSize: 100},
			{To: "archive", UnreadNs: int64(90 * 24 * time.Hour)},
		},
		PromoteTo: "hot", PromoteReadNs: int64(time.Hour),
	}
	for _, tc := range []struct {
		path       string
		size       uint64
		read       time.Duration
		cls, class string
	}{
		{"pinned/a", 10, 1000 * time.Hour, "cold", "hot"},
		{"a", 1000, 48 * time.Hour, "hot", "cold"},
		{"a", 10, 48 * time.Hour, "hot", ""},              // too small for cold, not old enough to archive
		{"a", 10, 100 * 24 * time.Hour, "hot", "archive"}, // the third rule
		{"a", 1000, 100 * 24 * time.Hour, "hot", "cold"},  // the first match wins
		{"a", 1000, time.Minute, "cold", "hot"},           // read lately: promoted
		{"a", 1000, time.Minute, "hot", ""},               // promoted already
		{"a", 1000, 2 * time.Hour, "cold", ""},            // read, but not lately
	} {
		n := &metapb.Inode{Size: tc.size, MtimeNs: ago(5000 * time.Hour), AtimeNs: ago(tc.read)}
		if got := tierTarget(pol, tc.path, n, tc.cls, now); got != tc.class {
			t.Errorf("%s (%d bytes, read %s ago, in %s): %q, want %q", tc.path, tc.size, tc.read, tc.cls, got, tc.class)
		}
	}
	if got := tierTarget(nil, "a", &metapb.Inode{}, "hot", now); got != "" {
		t.Errorf("no policy: %q", got)
	}
}
