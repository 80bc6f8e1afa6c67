package meta

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cairn"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

func TestAuth(t *testing.T) {
	dir := t.TempDir()
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	user, secret, ok := svc.GeneratedRoot()
	if !ok || len(user) != 20 || len(secret) != 40 {
		t.Fatalf("generated root %q %q %v", user, secret, ok)
	}
	f := filepath.Join(dir, RootCredentialsFile)
	st, err := os.Stat(f)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file %v %v", st, err)
	}
	body, _ := os.ReadFile(f)
	if string(body) != fmt.Sprintf("CAIRN_ROOT_USER=%s\nCAIRN_ROOT_PASSWORD=%s\n", user, secret) {
		t.Fatalf("credentials file body %q", body)
	}
	ts := serve(t, svc)
	a, err := ts.cl.Authenticate(bg, &metapb.AuthRequest{AccessKey: user, Secret: secret})
	if err != nil || !a.Root {
		t.Fatalf("auth %v %v", a, err)
	}
	_, err = ts.cl.Authenticate(bg, &metapb.AuthRequest{AccessKey: user, Secret: secret[:39] + "!"})
	wantKind(t, err, errors.Unauthenticated)
	_, err = ts.cl.Authenticate(bg, &metapb.AuthRequest{AccessKey: "nobody", Secret: secret})
	wantKind(t, err, errors.Unauthenticated)
	nu, err := ts.cl.CreateUser(bg, &metapb.CreateUserRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := ts.cl.Authenticate(bg, &metapb.AuthRequest{AccessKey: nu.AccessKey, Secret: nu.Secret}); err != nil || a.Root {
		t.Fatalf("new user %v %v", a, err)
	}
	ts.stop()

	// Reopen without env: the stored root stays, nothing is generated.
	svc, err = Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := svc.GeneratedRoot(); ok {
		t.Fatal("generated a second root")
	}
	if ok, _ := svc.checkSecret(user, secret); !ok {
		t.Fatal("root lost across reopen")
	}
	svc.Close()

	// Env values replace the stored root.
	cfg := testConfig(dir, nil)
	cfg.RootUser, cfg.RootPassword = "admin", "correct horse battery"
	svc, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if ok, root := svc.checkSecret("admin", "correct horse battery"); !ok || !root {
		t.Fatal("env root not installed")
	}
	if ok, _ := svc.checkSecret(user, secret); ok {
		t.Fatal("old root still valid")
	}
	cfg.RootPassword = ""
	if err := cfg.Validate(); !errors.Is(errors.Invalid, err) {
		t.Fatalf("user without password: %v", err)
	}
}

func TestWatch(t *testing.T) {
	ts := start(t, nil)
	cl := ts.cl
	mkns(t, cl, "ww1")
	stream, err := cl.Watch(bg, &metapb.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The subscription is registered asynchronously: mutate until an
	// event arrives, then sync on a marker.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			cl.Commit(bg, &metapb.CommitRequest{Ns: "ww1", Path: fmt.Sprintf("warm%d", i)})
		}
	}()
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-stopped
	put(t, cl, "ww1", "marker", 1, 1)
	var seen []*metapb.Event
	for len(seen) == 0 || seen[len(seen)-1].Path != "marker" {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev)
	}
	put(t, cl, "ww1", "x/file", 1, 1) // two events: the new dir x, then x/file
	if _, err := cl.Rename(bg, &metapb.RenameRequest{Ns: "ww1", From: "x/file", To: "y"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetVisibility(bg, &metapb.SetVisibilityRequest{Name: "ww1", Visibility: metapb.Visibility_PUBLIC_READ}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ww1/x", "ww1/x/file", "ww1/x/file", "ww1/y", "ww1 ns"}
	var got []string
	last := seen[len(seen)-1].Seq
	for range want {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq != last+1 {
			t.Fatalf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		s := ev.Ns + "/" + ev.Path
		if ev.Namespace {
			s = ev.Ns + " ns"
		}
		got = append(got, s)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events %q want %q", got, want)
	}

	// Resuming within the ring replays; before it resets.
	s2, err := cl.Watch(bg, &metapb.WatchRequest{After: last - 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		ev, err := s2.Recv()
		if err != nil || ev.Seq != last-2+i || ev.Reset_ {
			t.Fatalf("replay %v %v", ev, err)
		}
	}
	for range 4200 { // more than the ring holds
		ts.svc.hub.publish([]*metapb.Event{{Seq: ts.svc.hub.last + 1, Ns: "ww1", Path: "synthetic"}})
	}
	s3, err := cl.Watch(bg, &metapb.WatchRequest{After: last})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s3.Recv()
	if err != nil || !ev.Reset_ {
		t.Fatalf("want reset, got %v %v", ev, err)
	}
}

func TestSlowWatcherDoesNotBlockApply(t *testing.T) {
	ts := start(t, nil)
	mkns(t, ts.cl, "slow")
	w, _, _ := ts.svc.hub.subscribe(0) // never read
	done := make(chan struct{})
	go func() {
		for i := range 6000 {
			ts.svc.hub.publish([]*metapb.Event{{Seq: ts.svc.hub.last + 1, Path: fmt.Sprint(i)}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish blocked on a slow watcher")
	}
	n := 0
	for range w.ch { // the watcher was cut off: its channel is closed
		n++
	}
	if n == 0 || n >= 6000 {
		t.Fatalf("slow watcher got %d events", n)
	}
}

func TestGarbageCollection(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	cl := ts.cl
	mkns(t, cl, "gc1")
	if _, err := cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "data1:80", Free: 100}); err != nil {
		t.Fatal(err)
	}
	a, err := cl.Assign(bg, &metapb.AssignRequest{Ns: "gc1"})
	if err != nil {
		t.Fatal(err)
	}
	vid, gen, data := a.Volume.Id, a.Volume.Generation, c.chunks("data1:80")
	putNeedle := func(s string) uint64 {
		k, err := data.Put(bg, vid, gen, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	commit := func(p string, keys ...uint64) {
		var exts []*metapb.Extent
		for i, k := range keys {
			exts = append(exts, &metapb.Extent{Offset: uint64(i * 4), Length: 4, Volume: vid, Key: k})
		}
		if _, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "gc1", Path: p, Size: uint64(4 * len(keys)), Extents: exts}); err != nil {
			t.Fatal(err)
		}
	}
	k1, k2, k3 := putNeedle("aaaa"), putNeedle("bbbb"), putNeedle("cccc")
	commit("f", k1, k2)
	commit("g", k3)
	mem := data.(*memChunks)
	k4 := putNeedle("dddd")
	commit("f", k4, k2) // overwrite keeps k2, drops k1
	await.Until(t, 10*time.Second, "the collector", func() bool { return mem.count(vid) == 3 })
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "gc1", Path: "g"}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the collector", func() bool { return mem.count(vid) == 2 })
	u := uint64(4)
	if _, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "gc1", Path: "f", Size: &u}); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "the collector", func() bool { return mem.count(vid) == 1 })
	var buf strings.Builder
	if _, err := data.ReadTo(bg, vid, k4, 0, 4, &buf); err != nil || buf.String() != "dddd" {
		t.Fatalf("live needle lost: %v %q", err, buf.String())
	}
	// The queue is empty once the needles are gone.
	await.Until(t, 10*time.Second, "the collector", func() bool {
		v, _ := ts.svc.readView()
		defer v.close()
		it, _ := v.newIter([]byte("g/"), []byte("g0"))
		defer it.Close()
		return !it.First()
	})
}

// flaky fails Delete while *fail is set: GC must retry, not lose needles.
type flaky struct {
	*memChunks
	mu    sync.Mutex
	fail  *bool
	calls atomic.Int64
}

func (f *flaky) Delete(ctx context.Context, vid uint32, gen uint64, key uint64) error {
	f.calls.Add(1)
	f.mu.Lock()
	fail := *f.fail
	f.mu.Unlock()
	if fail {
		return errors.E(errors.Unavailable, "data server down")
	}
	return f.memChunks.Delete(ctx, vid, gen, key)
}

func TestGarbageRetry(t *testing.T) {
	cfg := testConfig(t.TempDir(), nil)
	mem := newMemChunks()
	failing := true
	fc := &flaky{memChunks: mem, fail: &failing}
	cfg.Chunks = func(string) cairn.Chunks { return fc }
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	mkns(t, ts.cl, "gc2")
	ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "s1", Addr: "x:1", Free: 1})
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "gc2"})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := mem.Put(bg, a.Volume.Id, a.Volume.Generation, []byte("x"))
	ts.cl.Commit(bg, &metapb.CommitRequest{Ns: "gc2", Path: "f", Size: 1, Extents: []*metapb.Extent{{Length: 1, Volume: a.Volume.Id, Key: k}}})
	ts.cl.Delete(bg, &metapb.DeleteRequest{Ns: "gc2", Path: "f"})
	// The collector tried (and failed) on the server: the needle stays.
	await.Until(t, 10*time.Second, "a delete tried on the failing server", func() bool { return fc.calls.Load() > 0 })
	if mem.count(a.Volume.Id) != 1 {
		t.Fatalf("needle deleted while the server fails (calls %d)", fc.calls.Load())
	}
	fc.mu.Lock()
	failing = false
	fc.mu.Unlock()
	await.Until(t, 10*time.Second, "the collector", func() bool { return mem.count(a.Volume.Id) == 0 })
}

func TestPlacement(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	cl := ts.cl
	mkns(t, cl, "pl1")
	_, err := cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1"})
	wantKind(t, err, errors.Unavailable) // no data servers yet
	_, err = cl.Assign(bg, &metapb.AssignRequest{Ns: "nope"})
	wantKind(t, err, errors.NotExist)
	hb := func(id, addr string, free uint64, vols ...*metapb.VolumeStat) {
		r, err := cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: addr, Free: free, Capacity: 1000, Volumes: vols})
		if err != nil || r.MaxVolumeSize != 8<<30 {
			t.Fatalf("heartbeat %v %v", r, err)
		}
	}
	hb("s1", "h1:1", 100)
	hb("s2", "h2:1", 500)
	a, err := cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1"})
	if err != nil {
		t.Fatal(err)
	}
	v1 := a.Volume
	if v1.Servers[0] != "h2:1" || c.chunks("h2:1").(*memChunks).count(v1.Id) != 0 {
		t.Fatalf("volume %v not created on the freest server", v1)
	}
	if a, _ := cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1"}); a.Volume.Id != v1.Id {
		t.Fatalf("second assign made a new volume %v", a.Volume)
	}
	// Reported full by a client: read-only, and a new volume is made.
	a, err = cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1", Full: []uint32{v1.Id}})
	if err != nil || a.Volume.Id == v1.Id {
		t.Fatalf("assign after full: %v %v", a, err)
	}
	v2 := a.Volume
	// Reported full by its server's heartbeat.
	hb("s2", "h2:1", 400, &metapb.VolumeStat{Id: v2.Id, Generation: 1, Size: 8 << 30})
	vs, err := cl.Volumes(bg, &metapb.VolumesRequest{})
	if err != nil || len(vs.Volumes) != 2 || !vs.Volumes[0].ReadOnly || !vs.Volumes[1].ReadOnly || vs.Volumes[1].Size != 8<<30 {
		t.Fatalf("volumes %v %v", vs, err)
	}
	a, err = cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1"})
	if err != nil || a.Volume.Id == v1.Id || a.Volume.Id == v2.Id {
		t.Fatalf("assign with all full: %v %v", a, err)
	}
	// A dead server is not chosen.
	ts.svc.pmu.Lock()
	ts.svc.servers["s2"].lastSeen = time.Now().Add(-time.Minute)
	ts.svc.pmu.Unlock()
	if _, err := cl.Assign(bg, &metapb.AssignRequest{Ns: "pl1", Full: []uint32{a.Volume.Id}}); err != nil {
		t.Fatal(err)
	}
	vs, _ = cl.Volumes(bg, &metapb.VolumesRequest{Ids: []uint32{4}})
	if len(vs.Volumes) != 1 || vs.Volumes[0].Servers[0] != "h1:1" {
		t.Fatalf("volume on a dead server: %v", vs)
	}
	info, _ := cl.Info(bg, &metapb.Empty{})
	if len(info.DataServers) != 1 || info.DataServers[0] != "h1:1" {
		t.Fatalf("info %v", info)
	}
	// Volume records survive a restart.
	dir := ts.svc.cfg.Dir
	ts.stop()
	svc, err := Open(testConfig(dir, c))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if r, _ := svc.Volumes(bg, &metapb.VolumesRequest{}); len(r.Volumes) != 4 {
		t.Fatalf("volumes after reopen: %v", r)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	info := func() string {
		t.Helper()
		i, err := ts.cl.Info(bg, &metapb.Empty{})
		if err != nil || len(i.ClusterId) != 32 {
			t.Fatalf("Info: cluster id %q, %v", i.GetClusterId(), err)
		}
		return i.ClusterId
	}
	id := info()
	mkns(t, ts.cl, "keep")
	want := buildTree(t, ts.cl, "keep", 300)
	n := put(t, ts.cl, "keep", "zz/last", 9, 9)
	ts.stop()
	svc, err = Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	ts = serve(t, svc)
	if got := info(); got != id {
		t.Fatalf("cluster id %s after reopen, was %s", got, id)
	}
	other, err := Open(testConfig(t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.clusterID == id {
		t.Fatalf("two stores chose the same cluster id %s", id)
	}
	other.Close()
	got := listAll(t, ts.cl, &metapb.ListRequest{Ns: "keep"})
	want = append(want, "zz/last")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after reopen %d entries, want %d", len(got), len(want))
	}
	r, err := ts.cl.Resolve(bg, &metapb.ResolveRequest{Ns: "keep", Path: "zz/last"})
	if err != nil || r.Inode.Ino != n.Ino || r.Inode.Version != n.Version {
		t.Fatalf("%v %v", r, err)
	}
	// New inodes do not reuse numbers.
	m := put(t, ts.cl, "keep", "zz/new", 1, 1)
	if m.Ino <= n.Ino {
		t.Fatalf("ino %d reused after %d", m.Ino, n.Ino)
	}
}

// TestCrash runs mutations in a child process, kills it with SIGKILL in
// mid-stream and checks that every mutation it acknowledged is present.
func TestCrash(t *testing.T) {
	if dir := os.Getenv("CAIRN_META_CRASH_DIR"); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
	cmd.Env = append(os.Environ(), "CAIRN_META_CRASH_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	buf := make([]byte, 0, 1<<16)
	tmp := make([]byte, 4096)
	for len(acked) < 400 {
		n, err := out.Read(tmp)
		if err != nil {
			break
		}
		buf = append(buf, tmp[:n]...)
		for {
			i := strings.IndexByte(string(buf), '\n')
			if i < 0 {
				break
			}
			if line := string(buf[:i]); strings.HasPrefix(line, "ACK ") {
				acked = append(acked, strings.TrimPrefix(line, "ACK "))
			}
			buf = buf[i+1:]
		}
	}
	cmd.Process.Kill() // SIGKILL: no deferred close, no flush
	cmd.Wait()
	if len(acked) < 50 {
		t.Fatalf("child acknowledged only %d mutations", len(acked))
	}
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for _, p := range acked {
		if _, err := svc.Resolve(bg, &metapb.ResolveRequest{Ns: "crash", Path: p}); err != nil {
			t.Fatalf("acknowledged %s lost: %v", p, err)
		}
	}
	dirs := 0
	for _, p := range acked {
		if p[0] == 'm' || p[0] == 'n' {
			dirs++
		}
	}
	if dirs == 0 {
		t.Fatal("no directory made without the sync wait was acknowledged")
	}
	t.Logf("%d acknowledged mutations survived kill -9 (%d of them directories made without the sync wait)", len(acked), dirs)
}

func crashChild(dir string) {
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if _, err := svc.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "crash"}); err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("d%d/f%d", w, i)
				if _, err := svc.Commit(bg, &metapb.CommitRequest{Ns: "crash", Path: p, Parents: true}); err != nil {
					fmt.Println("ERR", err)
					os.Exit(1)
				}
				fmt.Println("ACK " + p)
			}
		}()
	}
	// Directories made without waiting for the log sync are durable once
	// a later call is: Sync, or a synced commit inside them.
	go func() {
		for i := 0; ; i++ {
			p := fmt.Sprintf("m%d", i)
			_, err := svc.Mkdir(bg, &metapb.MkdirRequest{Ns: "crash", Path: p, NoSyncWait: true})
			if err == nil {
				_, err = svc.Sync(bg, &metapb.Empty{})
			}
			if err != nil {
				fmt.Println("ERR", err)
				os.Exit(1)
			}
			fmt.Println("ACK " + p)
		}
	}()
	go func() {
		for i := 0; ; i++ {
			p := fmt.Sprintf("n%d", i)
			_, err := svc.Mkdir(bg, &metapb.MkdirRequest{Ns: "crash", Path: p, NoSyncWait: true})
			if err == nil {
				_, err = svc.Commit(bg, &metapb.CommitRequest{Ns: "crash", Path: p + "/f"})
			}
			if err != nil {
				fmt.Println("ERR", err)
				os.Exit(1)
			}
			fmt.Println("ACK " + p + "/f")
		}
	}()
	<-done // killed by the parent
}
