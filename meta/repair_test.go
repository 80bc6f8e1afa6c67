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
