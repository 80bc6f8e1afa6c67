package meta

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cairn"
	"cairn/capability"
	"cairn/chunk"
	"cairn/errors"
	"cairn/proto/metapb"
)

// dataServers starts n real data servers on loopback (in process, with
// meta's keyring), and their data-plane addresses.
func dataServers(t *testing.T, n int, keys *capability.Keyring) ([]*chunk.Store, []string) {
	t.Helper()
	var addrs []string
	var out []*chunk.Store
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s, err := chunk.Open(chunk.Config{
			Dir: t.TempDir(), Addr: lis.Addr().String(), MaxVolumeSize: 4 << 20, MaxNeedle: 1 << 20,
			ReplicaTimeout: 10 * time.Second, Caps: keys,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(lis)
		t.Cleanup(func() { srv.Close(); s.Close() })
		out = append(out, s)
		addrs = append(addrs, lis.Addr().String())
	}
	return out, addrs
}

// copyHook is a data server whose copies run a function after each pass.
type copyHook struct {
	*chunk.Store
	passes int
	after  func(pass int)
}

func (c *copyHook) CopyFrom(ctx context.Context, vid uint32, gen uint64, from string, rate int64) error {
	err := c.Store.CopyFrom(ctx, vid, gen, from, rate)
	c.passes++
	c.after(c.passes)
	return err
}

// TestRepairFencesOldSet: a repair replaces a replica declared dead that is
// in fact alive (slow under load, --dead-after 3s). Meta's read-only mark
// reaches the data servers only with their next heartbeat answers, so a
// writer assigned the volume before goes on writing to the old set, and
// every replica of it acknowledges. A write acknowledged after the final
// copy pass listed the source must be refused instead, or the new replica
// lacks it: the needle was left on the survivors alone, and a second
// repair copying from the new replica lost it (TestTiering, issue 20).
func TestRepairFencesOldSet(t *testing.T) {
	chunks := map[string]cairn.Chunks{}
	cfg := testConfig(t.TempDir(), nil)
	cfg.Chunks = func(addr string) cairn.Chunks { return chunks[addr] }
	cfg.DeadAfter = time.Hour // meta's own loops leave the volume alone
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, svc)
	ds, addrs := dataServers(t, 3, svc.CapKeyring())
	a, b, x := ds[0], ds[1], ds[2]
	addr := map[*chunk.Store]string{a: addrs[0], b: addrs[1], x: addrs[2]}
	ctx := context.Background()
	const vid = 5
	set := []string{addr[a], addr[b]}
	for _, s := range []*chunk.Store{a, b} {
		if err := s.SetReplicas(ctx, vid, 1, set); err != nil {
			t.Fatal(err)
		}
	}
	var acked [][]byte
	keys := map[string]uint64{}
	put := func(data []byte) error {
		key, err := a.Put(ctx, vid, 1, data)
		if err == nil {
			acked = append(acked, data)
			keys[string(data)] = key
		}
		return err
	}
	if err := put([]byte("before the repair")); err != nil {
		t.Fatal(err)
	}
	var late error
	target := &copyHook{Store: x, after: func(pass int) {
		// The writer still holds its assignment of the volume at
		// generation 1 and writes through the primary, a, which forwards
		// to b: both are alive.
		if pass == 1 {
			if err := put([]byte("between the passes")); err != nil {
				t.Errorf("put between the copy passes: %v", err)
			}
		} else {
			late = put([]byte("after the final pass"))
		}
	}}
	chunks[addr[a]], chunks[addr[b]], chunks[addr[x]] = a, b, target
	v := &metapb.Volume{Id: vid, Generation: 1, Servers: set, ServerIds: []string{"a", "b"}, Replication: 2}
	if _, err := svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
		t.Fatal(err)
	}
	svc.pmu.Lock()
	j := &repairJob{kind: "re-replicate", vol: svc.volumes[vid],
		from: &dataServer{id: "a", addr: addr[a]}, to: &dataServer{id: "x", addr: addr[x]}, drop: []string{"b"}}
	svc.pmu.Unlock()
	if err := svc.repair(ctx, j); err != nil {
		t.Fatalf("repair: %v", err)
	}
	if target.passes != 2 {
		t.Fatalf("%d copy passes, want 2", target.passes)
	}
	if late == nil {
		t.Logf("a write after the final pass was acknowledged (the old set was not fenced)")
	} else if !errors.Is(errors.ReadOnly, late) {
		t.Errorf("a write after the final pass: %v, want ReadOnly (the writer moves to another volume)", late)
	}
	// Every acknowledged needle is on every replica of the new set.
	for _, s := range []*chunk.Store{a, x} {
		for _, data := range acked {
			var got bytes.Buffer
			if _, err := s.ReadTo(ctx, vid, keys[string(data)], 0, int64(len(data)), &got); err != nil || !bytes.Equal(got.Bytes(), data) {
				t.Errorf("%s of the new set lacks the acknowledged needle %q: %v", addr[s], data, err)
			}
		}
	}
}

// lateCreate is a data server whose SetReplicas calls, while hold is set,
// time out at the caller but are kept, to reach the server later.
type lateCreate struct {
	*chunk.Store
	hold bool
	late []func() error
}

func (l *lateCreate) SetReplicas(ctx context.Context, vid uint32, gen uint64, addrs []string) error {
	if l.hold {
		l.late = append(l.late, func() error { return l.Store.SetReplicas(context.Background(), vid, gen, addrs) })
		return errors.E(errors.Canceled, "context deadline exceeded")
	}
	return l.Store.SetReplicas(ctx, vid, gen, addrs)
}

// TestLateCreateKeepsReplicaSet: meta creates a volume by telling each
// chosen server its replica set, and retries a creation that timed out on
// other servers, under the same volume id. A call that timed out at meta
// may still reach its server later (a handler stalled under load). If the
// later creation chose that server again as the primary, the late call
// replaced its set with the failed attempt's: the primary then forwarded
// needles to a server meta did not record, and acknowledged them without
// the replica meta did record (a single copy, lost at the next repair).
// Each attempt takes a higher generation, so a late call is Stale.
func TestLateCreateKeepsReplicaSet(t *testing.T) {
	chunks := map[string]cairn.Chunks{}
	cfg := testConfig(t.TempDir(), nil)
	cfg.Chunks = func(addr string) cairn.Chunks { return chunks[addr] }
	cfg.DeadAfter = time.Hour // suspicion lasts, and no server dies
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	ds, addrs := dataServers(t, 3, svc.CapKeyring())
	var ls []*lateCreate
	for i, s := range ds {
		l := &lateCreate{Store: s}
		ls = append(ls, l)
		chunks[addrs[i]] = l
	}
	x, a, b := ls[0], ls[1], ls[2]
	names := map[*lateCreate]string{x: "x", a: "a", b: "b"}
	addrOf := map[*lateCreate]string{x: addrs[0], a: addrs[1], b: addrs[2]}
	beat := func(free map[*lateCreate]uint64) {
		t.Helper()
		for l, f := range free {
			if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: names[l], Addr: addrOf[l], Free: f}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := ts.cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "rf2", Owner: "o", Replication: 2}); err != nil {
		t.Fatal(err)
	}
	// The first creation picks x and a (the most free space); both time
	// out, b alone is too few, and the Assign fails.
	beat(map[*lateCreate]uint64{x: 400 << 30, a: 300 << 30, b: 200 << 30})
	x.hold, a.hold = true, true
	if _, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf2"}); err == nil {
		t.Fatal("assign with two of three servers timing out succeeded")
	}
	if len(x.late) != 1 || len(a.late) != 1 {
		t.Fatalf("calls held: x %d, a %d; want one each (the creation chose x and a)", len(x.late), len(a.late))
	}
	x.hold, a.hold = false, false
	// Writers report b too; then all three answer heartbeats (slow, not
	// dead), now with b fuller than x.
	if _, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf2", Suspect: []string{addrOf[b]}}); err == nil {
		t.Fatal("assign with every server suspect and none heard from since succeeded")
	}
	beat(map[*lateCreate]uint64{x: 400 << 30, a: 100 << 30, b: 300 << 30})
	resp, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf2"})
	if err != nil {
		t.Fatal(err)
	}
	v := resp.Volume
	t.Logf("volume %d at generation %d on %v", v.Id, v.Generation, v.ServerIds)
	if len(v.ServerIds) != 2 || v.ServerIds[0] != "x" || v.ServerIds[1] != "b" {
		t.Fatalf("volume on %v, want x then b (the test arranges it so)", v.ServerIds)
	}
	// The first creation's calls reach x and a now.
	for _, l := range []*lateCreate{x, a} {
		if err := l.late[0](); err != nil {
			t.Logf("late creation call to %s: %v", names[l], err)
		}
	}
	data := []byte("written through the recorded primary")
	key, err := x.Put(bg, v.Id, v.Generation, data)
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	for _, l := range []*lateCreate{x, b} {
		var got bytes.Buffer
		if _, err := l.ReadTo(bg, v.Id, key, 0, int64(len(data)), &got); err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Errorf("%s, a replica meta recorded, lacks the acknowledged needle: %v", names[l], err)
		}
	}
}
