package chunktest

import (
	"bytes"
	"testing"

	"cairn"
	"cairn/errors"
)

// Replicated is a data server as the replication suite sees it: its
// Chunks and Replicas (in-process or over HTTP), its data-plane address
// (the others reach it there), and a way to stop serving (a dead server).
type Replicated interface {
	cairn.Chunks
	cairn.Replicas
}

// Server is one data server of RunReplicas.
type Server struct {
	S    Replicated
	Addr string
	Stop func() // the server stops answering
}

// RunReplicas tests replication across data servers. newServers starts n
// empty data servers that reach each other at their Addr and hold leases
// (or need none); it is called once per subtest.
func RunReplicas(t *testing.T, newServers func(t *testing.T, n int) []Server) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, ss []Server)
	}{
		{"FanOut", testFanOut},
		{"OnlyPrimaryAssigns", testOnlyPrimary},
		{"ReplicaDown", testReplicaDown},
		{"NewGeneration", testNewGeneration},
		{"CopyFrom", testCopyFrom},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newServers(t, 3)) })
	}
}

func addrs(ss []Server) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Addr)
	}
	return out
}

func setAll(t *testing.T, ss []Server, vid uint32, gen uint64, set []string) {
	t.Helper()
	for _, s := range ss {
		if err := s.S.SetReplicas(ctx, vid, gen, set); err != nil {
			t.Fatalf("SetReplicas on %s: %v", s.Addr, err)
		}
	}
}

// A needle put to the primary is on every replica, under the same key,
// when Put returns.
func testFanOut(t *testing.T, ss []Server) {
	setAll(t, ss, 1, 1, addrs(ss))
	want := map[uint64][]byte{}
	for i, n := range []int{0, 1, 70000, MaxNeedle} {
		d := Data(uint64(100+i), n)
		want[mustPut(t, ss[0].S, 1, 1, d)] = d
	}
	for _, s := range ss {
		for k, d := range want {
			if got, err := read(s.S, 1, k, 0, int64(len(d))); err != nil || !bytes.Equal(got, d) {
				t.Fatalf("%s, key %d: %v", s.Addr, k, err)
			}
		}
	}
}

// Keys come from the primary only: a put to another replica is refused.
func testOnlyPrimary(t *testing.T, ss []Server) {
	setAll(t, ss, 2, 1, addrs(ss))
	if _, err := ss[1].S.Put(ctx, 2, 1, []byte("x")); !errors.Is(errors.Stale, err) {
		t.Fatalf("put to a non-primary replica: %v", err)
	}
}

// A replica that does not answer fails the put, which names it, and the
// volume turns read-only so that writers move on.
func testReplicaDown(t *testing.T, ss []Server) {
	setAll(t, ss, 3, 1, addrs(ss))
	mustPut(t, ss[0].S, 3, 1, []byte("before"))
	ss[2].Stop()
	_, err := ss[0].S.Put(ctx, 3, 1, []byte("during"))
	if !errors.Is(errors.Unavailable, err) || string(errors.PathOf(err)) != ss[2].Addr {
		t.Fatalf("put with a replica down: %v (want Unavailable naming %s)", err, ss[2].Addr)
	}
	if _, err := ss[0].S.Put(ctx, 3, 1, []byte("after")); !errors.Is(errors.ReadOnly, err) {
		t.Fatalf("put after a replica failed: %v (want ReadOnly)", err)
	}
}

// Meta moves a volume to a new generation with a new set: writes at the
// old generation are refused, writes at the new one reach the new set.
func testNewGeneration(t *testing.T, ss []Server) {
	setAll(t, ss[:2], 4, 1, addrs(ss[:2]))
	mustPut(t, ss[0].S, 4, 1, []byte("g1"))
	if err := ss[2].S.CopyFrom(ctx, 4, 2, ss[1].Addr, 0); err != nil {
		t.Fatal(err)
	}
	set := []string{ss[0].Addr, ss[2].Addr}
	setAll(t, []Server{ss[0], ss[2]}, 4, 2, set)
	if _, err := ss[0].S.Put(ctx, 4, 1, []byte("old")); !errors.Is(errors.Stale, err) {
		t.Fatalf("put at the old generation: %v", err)
	}
	k := mustPut(t, ss[0].S, 4, 2, []byte("g2"))
	if got, err := read(ss[2].S, 4, k, 0, 2); err != nil || string(got) != "g2" {
		t.Fatalf("new replica after a put at the new generation: %q %v", got, err)
	}
}

// CopyFrom brings a copy level with the source: needles it lacks come,
// needles the source deleted go, and a copy at an older generation is
// replaced rather than merged.
func testCopyFrom(t *testing.T, ss []Server) {
	src, dst := ss[0], ss[1]
	if err := src.S.CreateVolume(ctx, 5, 1); err != nil {
		t.Fatal(err)
	}
	var keys []uint64
	for i := range 5 {
		keys = append(keys, mustPut(t, src.S, 5, 1, Data(uint64(i), 3000*(i+1))))
	}
	// A leftover at an older generation holding a needle the source never had.
	if err := dst.S.CreateVolume(ctx, 5, 1); err != nil {
		t.Fatal(err)
	}
	ghost := mustPut(t, dst.S, 5, 1, []byte("ghost"))
	if err := src.S.Delete(ctx, 5, 1, keys[0]); err != nil {
		t.Fatal(err)
	}
	if err := src.S.CreateVolume(ctx, 5, 2); err != nil {
		t.Fatal(err)
	}
	if err := dst.S.CopyFrom(ctx, 5, 2, src.Addr, 0); err != nil {
		t.Fatal(err)
	}
	check := func(deleted ...uint64) {
		t.Helper()
		for i, k := range keys {
			got, err := read(dst.S, 5, k, 0, int64(3000*(i+1)))
			gone := false
			for _, d := range deleted {
				gone = gone || d == k
			}
			if gone != errors.Is(errors.NotExist, err) || !gone && (err != nil || !bytes.Equal(got, Data(uint64(i), 3000*(i+1)))) {
				t.Fatalf("key %d (deleted %v): %v", k, gone, err)
			}
		}
	}
	check(keys[0])
	if ghost != keys[0] {
		if _, err := read(dst.S, 5, ghost, 0, 1); !errors.Is(errors.NotExist, err) {
			t.Errorf("needle of the replaced older copy: %v", err)
		}
	}
	// A second pass after a delete on the source deletes here too.
	if err := src.S.Delete(ctx, 5, 2, keys[3]); err != nil {
		t.Fatal(err)
	}
	if err := dst.S.CopyFrom(ctx, 5, 2, src.Addr, 0); err != nil {
		t.Fatal(err)
	}
	check(keys[0], keys[3])
}
