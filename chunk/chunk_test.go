package chunk

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"cairn"
	"cairn/capability"
	"cairn/chunk/chunktest"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/volume"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testKeys stands for the keys meta would hand out: every test server
// verifies with it and every test Remote signs its calls with it.
var testKeys = capability.NewKeyring(capability.NewKey(1))

func testConfig(dir string) Config {
	return Config{
		Dir: dir, MaxVolumeSize: chunktest.MaxVolumeSize, MaxNeedle: chunktest.MaxNeedle,
		Logger: quiet, Registerer: prometheus.NewRegistry(), Caps: testKeys,
	}
}

// signed is a client of the data server at addr that signs each call
// with testKeys, as meta does.
func signed(addr string) *Remote {
	r := NewRemote(addr)
	r.SetCaps(capability.Signer{Keys: testKeys})
	return r
}

func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// serve runs the store's handler on a real loopback listener.
func serve(t testing.TB, s *Store) *Remote {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return signed(lis.Addr().String())
}

func TestStore(t *testing.T) {
	chunktest.Run(t, func(t *testing.T) cairn.Chunks { return openStore(t, testConfig(t.TempDir())) })
}

func TestRemote(t *testing.T) {
	chunktest.Run(t, func(t *testing.T) cairn.Chunks { return serve(t, openStore(t, testConfig(t.TempDir()))) })
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "x", MaxVolumeSize: 64 << 30},
		{Dir: "x", MaxNeedle: 2 << 30},
		{Dir: "x", CompactRatio: 1.5},
		{Dir: "x", HeartbeatInterval: -1},
	} {
		c.EnsureDefaults()
		if err := c.Validate(); !errors.Is(errors.Invalid, err) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestServerIDAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.CreateVolume(ctx, 3, 1)
	k, _ := s.Put(ctx, 3, 1, []byte("persist"))
	id := s.ID()
	s.Close()
	if _, err := s.Put(ctx, 3, 1, nil); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("put after close: %v", err)
	}
	s = openStore(t, testConfig(dir))
	if s.ID() != id || len(id) != 32 {
		t.Fatalf("server id %q, then %q", id, s.ID())
	}
	var buf bytes.Buffer
	if _, err := s.ReadTo(ctx, 3, k, 0, 7, &buf); err != nil || buf.String() != "persist" {
		t.Fatalf("%q %v", buf.String(), err)
	}
}

// TestDurability takes crash images of the volume files while writers are
// running: every needle acknowledged before the image was taken must read
// back from it, whatever is torn after it.
func TestDurability(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, testConfig(dir))
	ctx := context.Background()
	if err := s.CreateVolume(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[uint64][]byte{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Uint64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				d := chunktest.Data(n, int(n*131%20000))
				k, err := s.Put(ctx, 1, 1, d)
				if errors.Is(errors.ReadOnly, err) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked[k] = d
				mu.Unlock()
			}
		})
	}
	dat, idx := volume.FileNames(dir, 1)
	type image struct {
		dir   string
		want  map[uint64][]byte
		floor int64 // the .dat size when want was taken: every acked needle lies below
	}
	var images []image
	last := 0
	for i := range 6 {
		// Each image is taken after more writes were acknowledged, with
		// the writers still going.
		await.Until(t, 30*time.Second, "more acknowledged writes", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= last+16
		})
		mu.Lock()
		want := make(map[uint64][]byte, len(acked))
		for k, d := range acked {
			want[k] = d
		}
		last = len(want)
		mu.Unlock()
		fi, err := os.Stat(dat)
		if err != nil {
			t.Fatal(err)
		}
		// The copy is taken while writes continue, so its tail holds
		// records in every state: whole, torn, written but not synced.
		img := t.TempDir()
		first, second := idx, dat
		if i%2 == 1 {
			first, second = dat, idx
		}
		copyFile(t, first, filepath.Join(img, filepath.Base(first)))
		copyFile(t, second, filepath.Join(img, filepath.Base(second)))
		images = append(images, image{img, want, fi.Size()})
	}
	close(stop)
	wg.Wait()

	for i, im := range images {
		imgDat := filepath.Join(im.dir, filepath.Base(dat))
		// Some images also lose part of their tail, as if the last
		// writes never reached the disk; never below what was acknowledged
		// before the image, which was synced.
		if i%3 == 2 {
			fi, _ := os.Stat(imgDat)
			if fi.Size() > im.floor {
				os.Truncate(imgDat, im.floor+(fi.Size()-im.floor)/2+3)
			}
		}
		st, err := Open(testConfig(im.dir))
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		for k, d := range im.want {
			var buf bytes.Buffer
			_, err := st.ReadTo(ctx, 1, k, 0, int64(len(d)), &buf)
			if err != nil || !bytes.Equal(buf.Bytes(), d) {
				t.Fatalf("image %d: acked needle %d: %v", i, k, err)
			}
		}
		vs := st.VolumeStats()
		t.Logf("image %d: %d acked needles, volume %+v", i, len(im.want), vs[0])
		st.Close()
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

// TestCorrupt flips a byte of a needle on disk: both the store and the
// HTTP client must answer errors.Corrupt, and the store counts it.
func TestCorrupt(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s := openStore(t, cfg)
	r := serve(t, s)
	ctx := context.Background()
	s.CreateVolume(ctx, 1, 1)
	k, _ := s.Put(ctx, 1, 1, chunktest.Data(1, 10000))
	good, _ := s.Put(ctx, 1, 1, chunktest.Data(2, 10000))
	// The first needle's data starts right after the 64-byte superblock
	// and its 24-byte header.
	dat, _ := volume.FileNames(dir, 1)
	f, _ := os.OpenFile(dat, os.O_RDWR, 0)
	f.WriteAt([]byte{0xde, 0xad}, 64+24+5000)
	f.Close()

	for name, c := range map[string]cairn.Chunks{"store": s, "remote": r} {
		var buf bytes.Buffer
		_, err := c.ReadTo(ctx, 1, k, 0, 10000, &buf)
		if !errors.Is(errors.Corrupt, err) {
			t.Errorf("%s: got %v, want Corrupt", name, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: %d bytes of a corrupt needle reached the writer", name, buf.Len())
		}
		buf.Reset()
		if _, err := c.ReadTo(ctx, 1, good, 0, 10000, &buf); err != nil || !bytes.Equal(buf.Bytes(), chunktest.Data(2, 10000)) {
			t.Errorf("%s: good needle: %v", name, err)
		}
	}
	mfs, _ := reg.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "cairn_chunk_corrupt_reads_total" {
			found = true
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 2 {
				t.Errorf("corrupt counter %v, want 2", v)
			}
		}
	}
	if !found {
		t.Error("no corrupt counter registered")
	}
	vols, err := r.Volumes(ctx)
	if err != nil || len(vols) != 1 || vols[0].Corrupt != 2 {
		t.Errorf("admin volumes: %+v %v", vols, err)
	}
}

// TestHTTP checks what the shared suite cannot see: statuses, headers,
// the error body and the request limits.
func TestHTTP(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	r := serve(t, s)
	base := "http://" + r.Addr()
	ctx := context.Background()
	s.CreateVolume(ctx, 1, 1)
	k, _ := s.Put(ctx, 1, 1, []byte("0123456789"))
	c := &http.Client{Transport: transport}
	all, _ := testKeys.Mint(capability.Read|capability.Write|capability.Admin, capability.AnyVolume, 0, capability.AllKeys, "", time.Hour)
	do := func(method, url, rng string, body io.Reader) (*http.Response, string) {
		return send(t, c, method, base+url, all, rng, body)
	}
	key := "/v/1/" + itoa(k)
	tests := []struct {
		method, url, rng string
		body             io.Reader
		status           int
		want             string
	}{
		{"GET", key, "", nil, 200, "0123456789"},
		{"GET", key, "bytes=2-4", nil, 206, "234"},
		{"GET", key, "bytes=7-", nil, 206, "789"},
		{"GET", key, "bytes=-2", nil, 206, "89"},
		{"GET", key, "bytes=5-100", nil, 206, "56789"},
		{"GET", key, "bytes=10-", nil, 416, `"code":"Range"`},
		{"HEAD", key, "", nil, 200, ""},
		{"GET", "/v/1/999", "", nil, 404, `"code":"NotExist"`},
		{"GET", "/v/1/abc", "", nil, 400, `"code":"Invalid"`},
		{"POST", "/v/1?gen=1", "", bytes.NewReader(make([]byte, chunktest.MaxNeedle+1)), 413, `"code":"TooLarge"`},
		{"POST", "/v/1", "", bytes.NewReader([]byte("x")), 400, `"code":"Invalid"`}, // no gen
		{"POST", "/v/1?gen=2", "", bytes.NewReader([]byte("x")), 409, `"code":"Stale"`},
		{"POST", "/v/1?gen=1", "", io.MultiReader(bytes.NewReader([]byte("x"))), 400, "Content-Length"},
		{"POST", "/v/1?gen=1", "", bytes.NewReader([]byte("new")), 200, `{"key":`},
		{"GET", "/admin/volumes", "", nil, 200, `"needles":2`},
	}
	for _, tt := range tests {
		resp, body := do(tt.method, tt.url, tt.rng, tt.body)
		if resp.StatusCode != tt.status || !bytes.Contains([]byte(body), []byte(tt.want)) {
			t.Errorf("%s %s %s: %d %q, want %d %q", tt.method, tt.url, tt.rng, resp.StatusCode, body, tt.status, tt.want)
		}
		if tt.status == 206 && resp.Header.Get("Content-Range") == "" {
			t.Errorf("%s %s: no Content-Range", tt.method, tt.rng)
		}
		if tt.method == "HEAD" && resp.ContentLength != 10 {
			t.Errorf("HEAD Content-Length %d", resp.ContentLength)
		}
	}
	rows := s.Ops().Snapshot()
	ops := map[string]uint64{}
	for _, row := range rows {
		ops[row.Op] = row.Calls
	}
	if ops["get"] == 0 || ops["put"] == 0 || ops["head"] == 0 {
		t.Errorf("ops not counted: %v", ops)
	}
}

func itoa(k uint64) string { return string(appendUint(nil, k)) }

func appendUint(b []byte, k uint64) []byte {
	if k >= 10 {
		b = appendUint(b, k/10)
	}
	return append(b, byte('0'+k%10))
}

// fakeMeta records heartbeats; every other method is unimplemented.
type fakeMeta struct {
	metapb.MetaClient
	mu      sync.Mutex
	got     []*metapb.HeartbeatRequest
	maxSize uint64           // the HeartbeatResponse's max_volume_size
	volumes []*metapb.Volume // the HeartbeatResponse's volumes
	late    time.Duration    // how long an answer takes (a meta failing over)
}

func (f *fakeMeta) Heartbeat(ctx context.Context, req *metapb.HeartbeatRequest, _ ...grpc.CallOption) (*metapb.HeartbeatResponse, error) {
	if f.late > 0 {
		t := time.NewTimer(f.late)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	return &metapb.HeartbeatResponse{MaxVolumeSize: f.maxSize, Volumes: f.volumes}, nil
}

// TestMaxVolumeSizeFromMeta: the volume size limit meta sends with its
// heartbeat answers applies to the volumes open and to those created
// later, in place of the server's own.
func TestMaxVolumeSizeFromMeta(t *testing.T) {
	meta := &fakeMeta{maxSize: 1 << 20}
	cfg := testConfig(t.TempDir())
	cfg.Meta, cfg.Addr = meta, "10.0.0.1:9000"
	s := openStore(t, cfg)
	ctx := context.Background()
	// Placed as meta places volumes: with their replica set (here, this
	// server alone); in a cluster a server takes needles only under one.
	self := []string{cfg.Addr}
	if err := s.SetReplicas(ctx, 1, 1, self); err != nil { // before meta has spoken
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReplicas(ctx, 2, 1, self); err != nil {
		t.Fatal(err)
	}
	for _, vid := range []uint32{1, 2} {
		var err error
		n := 0
		for ; n < 100 && err == nil; n++ {
			_, err = s.Put(ctx, vid, 1, make([]byte, 100<<10))
		}
		if !errors.Is(errors.ReadOnly, err) || n > 11 {
			t.Errorf("volume %d: %d puts of 100 KiB, then %v (want ReadOnly past 1 MiB)", vid, n, err)
		}
	}
	for _, st := range s.VolumeStats() {
		if st.Size > 1<<20 || st.Size < 900<<10 {
			t.Errorf("volume %d stopped at %d bytes (limit 1 MiB)", st.ID, st.Size)
		}
	}
	meta.mu.Lock()
	meta.maxSize = 8 << 20
	meta.mu.Unlock()
	if err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, 1, 1, make([]byte, 100<<10)); err != nil {
		t.Errorf("after meta raised the limit: %v", err)
	}
}

// TestHeartbeatOutwaitsMetaFailover: a heartbeat sent to a meta leader
// that went silent is carried by the group client to the next leader:
// watched after 1-1.25 s unanswered, then sent on as soon as a member
// names another leader (meta/failover.go). Its answer comes late, and the
// server must still be waiting for it: one that gave up at a period sent
// its next heartbeat wherever a follower pointed, often the silent leader
// again, and lost its lease across back-to-back leader changes
// (TestMetaFailoverKeepsLeases).
func TestHeartbeatOutwaitsMetaFailover(t *testing.T) {
	meta := &fakeMeta{late: 1500 * time.Millisecond}
	cfg := testConfig(t.TempDir())
	cfg.Meta, cfg.Addr = meta, "10.0.0.1:9000"
	cfg.HeartbeatInterval = 100 * time.Millisecond
	s := openStore(t, cfg)
	if err := s.Heartbeat(context.Background()); err != nil {
		t.Fatalf("a heartbeat answered by meta after %v: %v", meta.late, err)
	}
}

func TestRunHeartbeatAndCompaction(t *testing.T) {
	meta := &fakeMeta{}
	cfg := testConfig(t.TempDir())
	cfg.Meta, cfg.Addr, cfg.Labels = meta, "10.0.0.1:9000", map[string]string{"rack": "r1"}
	cfg.HeartbeatInterval = 20 * time.Millisecond
	s := openStore(t, cfg)
	ctx := context.Background()
	if err := s.Heartbeat(ctx); err != nil { // a server with a meta serves once it holds a lease
		t.Fatal(err)
	}
	if err := s.SetReplicas(ctx, 1, 1, []string{cfg.Addr}); err != nil { // as meta places a volume
		t.Fatal(err)
	}
	var keys []uint64
	for i := range 20 {
		k, _ := s.Put(ctx, 1, 1, chunktest.Data(uint64(i), 50000))
		keys = append(keys, k)
	}
	for _, k := range keys[:15] {
		s.Delete(ctx, 1, 1, k)
	}
	sizeBefore := s.VolumeStats()[0].Size
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- s.Run(rctx) }()
	await.Until(t, 5*time.Second, "background compaction", func() bool {
		st := s.VolumeStats()[0]
		return st.Size < sizeBefore && st.Needles == 5
	})
	cancel()
	<-done
	if st := s.VolumeStats()[0]; st.Size >= sizeBefore || st.Needles != 5 {
		t.Errorf("background compaction did not run: %+v (before %d)", st, sizeBefore)
	}
	meta.mu.Lock()
	defer meta.mu.Unlock()
	if len(meta.got) < 2 {
		t.Fatalf("%d heartbeats", len(meta.got))
	}
	hb := meta.got[len(meta.got)-1]
	if hb.ServerId != s.ID() || hb.Addr != cfg.Addr || hb.Labels["rack"] != "r1" || hb.Capacity == 0 ||
		len(hb.Volumes) != 1 || hb.Volumes[0].Needles != 5 {
		t.Errorf("heartbeat %v", hb)
	}
}

// servers starts n data servers on loopback, each behind its own listener
// so that one can be stopped; in-process selects the *Store as the
// implementation under test, else a *Remote of it.
func servers(t *testing.T, n int, inProcess bool) []chunktest.Server {
	var out []chunktest.Server
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t.TempDir())
		cfg.Addr, cfg.ReplicaTimeout = lis.Addr().String(), 500*time.Millisecond
		s := openStore(t, cfg)
		srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(lis)
		t.Cleanup(func() { srv.Close() })
		var impl chunktest.Replicated = s
		if !inProcess {
			impl = signed(cfg.Addr)
		}
		out = append(out, chunktest.Server{S: impl, Addr: cfg.Addr, Stop: func() { srv.Close() }})
	}
	return out
}

func TestStoreReplicas(t *testing.T) {
	chunktest.RunReplicas(t, func(t *testing.T, n int) []chunktest.Server { return servers(t, n, true) })
}

func TestRemoteReplicas(t *testing.T) {
	chunktest.RunReplicas(t, func(t *testing.T, n int) []chunktest.Server { return servers(t, n, false) })
}
