package meta

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"cairn"
	"cairn/errors"
	"cairn/proto/metapb"
)

// memChunks is an in-memory data server: a real implementation of
// cairn.Chunks, so that tests see needles actually created and deleted.
type memChunks struct {
	mu   sync.Mutex
	vols map[uint32]*memVol
}

type memVol struct {
	gen     uint64
	next    uint64
	needles map[uint64][]byte
}

var _ cairn.Chunks = (*memChunks)(nil)

func newMemChunks() *memChunks { return &memChunks{vols: map[uint32]*memVol{}} }

func (m *memChunks) vol(vid uint32, gen uint64) (*memVol, error) {
	v := m.vols[vid]
	if v == nil {
		return nil, errors.E(errors.NotExist, "no such volume")
	}
	if gen != v.gen {
		return nil, errors.E(errors.Stale, "generation mismatch")
	}
	return v, nil
}

func (m *memChunks) Put(ctx context.Context, vid uint32, gen uint64, data []byte) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.vol(vid, gen)
	if err != nil {
		return 0, err
	}
	v.next++
	v.needles[v.next] = bytes.Clone(data)
	return v.next, nil
}

func (m *memChunks) ReadTo(ctx context.Context, vid uint32, key uint64, off, length int64, w io.Writer) (int64, error) {
	m.mu.Lock()
	v := m.vols[vid]
	var d []byte
	if v != nil {
		d = v.needles[key]
	}
	m.mu.Unlock()
	if d == nil {
		return 0, errors.E(errors.NotExist, "no such needle")
	}
	if off < 0 || length < 0 || off+length > int64(len(d)) {
		return 0, errors.E(errors.Range, "range past the needle")
	}
	n, err := w.Write(d[off : off+length])
	return int64(n), err
}

func (m *memChunks) Delete(ctx context.Context, vid uint32, gen uint64, key uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, err := m.vol(vid, gen)
	if err != nil {
		return err
	}
	delete(v.needles, key)
	return nil
}

func (m *memChunks) CreateVolume(ctx context.Context, vid uint32, gen uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.vols[vid]; v != nil {
		if v.gen == gen {
			return nil
		}
		return errors.E(errors.Exist, "volume exists with another generation")
	}
	m.vols[vid] = &memVol{gen: gen, needles: map[uint64][]byte{}}
	return nil
}

func (m *memChunks) count(vid uint32) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.vols[vid]; v != nil {
		return len(v.needles)
	}
	return -1
}

// cluster maps data-plane addresses to in-memory data servers.
type cluster struct {
	mu      sync.Mutex
	servers map[string]*memChunks
}

func newCluster() *cluster { return &cluster{servers: map[string]*memChunks{}} }

func (c *cluster) chunks(addr string) cairn.Chunks {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[addr]
	if s == nil {
		s = newMemChunks()
		c.servers[addr] = s
	}
	return s
}

func testConfig(dir string, c *cluster) Config {
	cfg := Config{
		Dir:        dir,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
		// The tests of the API itself call over plaintext as a cluster
		// member; authz_test.go tests who may call what over TLS.
		TrustPlaintext: true,
	}
	if c != nil {
		cfg.Chunks = c.chunks
	}
	return cfg
}

type testServer struct {
	svc  *Service
	cl   metapb.MetaClient
	addr string
	stop func()
}

// serve starts svc behind a real gRPC server on loopback and dials it.
func serve(t testing.TB, svc *Service) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(svc)
	go gs.Serve(lis)
	cl, conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	ts := &testServer{svc: svc, cl: cl, addr: lis.Addr().String()}
	ts.stop = func() {
		once.Do(func() {
			conn.Close()
			gs.Stop()
			svc.Close()
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

func start(t testing.TB, c *cluster) *testServer {
	t.Helper()
	svc, err := Open(testConfig(t.TempDir(), c))
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, svc)
}

var bg = context.Background()

func mkns(t testing.TB, cl metapb.MetaClient, name string) {
	t.Helper()
	if _, err := cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: name, Owner: "o"}); err != nil {
		t.Fatal(err)
	}
}

func ext(off, n uint64, vol uint32, key uint64) *metapb.Extent {
	return &metapb.Extent{Offset: off, Length: n, Volume: vol, Key: key}
}

// put commits a file of size bytes held by one needle.
func put(t testing.TB, cl metapb.MetaClient, ns, p string, size uint64, key uint64) *metapb.Inode {
	t.Helper()
	n, err := cl.Commit(bg, &metapb.CommitRequest{Ns: ns, Path: p, Size: size, Extents: []*metapb.Extent{ext(0, size, 1, key)}, Parents: true, Etag: "e"})
	if err != nil {
		t.Fatalf("commit %s: %v", p, err)
	}
	return n
}

func wantKind(t testing.TB, err error, kind errors.Kind) {
	t.Helper()
	if !errors.Is(kind, err) {
		t.Fatalf("got error %v (kind %v), want kind %v", err, errors.KindOf(err), kind)
	}
}
