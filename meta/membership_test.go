package meta

import (
	"slices"
	"testing"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Replicas go to different zones first, then racks; suspect and draining
// servers get none.
func TestPlacementSpreads(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	for _, s := range []struct{ id, zone, rack string }{
		{"a1", "z1", "r1"}, {"a2", "z1", "r1"}, {"b1", "z1", "r2"}, {"c1", "z2", "r3"}, {"c2", "z2", "r3"},
	} {
		if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: s.id, Addr: s.id + ":1", Free: 100,
			Labels: map[string]string{"zone": s.zone, "rack": s.rack}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ts.cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "rf3", Owner: "o", Replication: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf3", Full: []uint32{uint32(i)}})
		if err != nil {
			t.Fatal(err)
		}
		v := a.Volume
		zones, racks := map[string]bool{}, map[string]bool{}
		for _, id := range v.ServerIds {
			zones[map[byte]string{'a': "z1", 'b': "z1", 'c': "z2"}[id[0]]] = true
			racks[map[byte]string{'a': "r1", 'b': "r2", 'c': "r3"}[id[0]]] = true
		}
		if len(v.ServerIds) != 3 || v.Replication != 3 || len(zones) != 2 || len(racks) != 3 {
			t.Fatalf("volume %d on %v: want 3 replicas over both zones and all three racks", v.Id, v.ServerIds)
		}
	}
	// A writer reports c1 and c2 failing, and b1 is drained: two servers
	// can take replicas, too few for 3.
	if _, err := ts.cl.ClusterDrain(bg, &metapb.ClusterDrainRequest{Server: "b1:1"}); err != nil {
		t.Fatal(err)
	}
	_, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf3", Full: []uint32{6}, Suspect: []string{"c1:1", "c2:1"}})
	if !errors.Is(errors.Unavailable, err) {
		t.Fatalf("assign with 2 placeable servers for RF 3: %v", err)
	}
	st, err := ts.cl.ClusterStatus(bg, &metapb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Servers {
		if s.Draining != (s.Id == "b1") || s.Suspect != (s.Id[0] == 'c') || !s.Alive {
			t.Errorf("status of %s: %+v", s.Id, s)
		}
	}
	// Drain survives a restart: it is a Command.
	ts.svc.Close()
	svc, err := Open(ts.svc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if !svc.cl.draining["b1"] {
		t.Error("drain lost across a restart")
	}
}

// A heartbeat tells a server the sets of its volumes and which copies it
// holds that are no longer its own.
func TestHeartbeatAnswer(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	put := func(v *metapb.Volume) {
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
			t.Fatal(err)
		}
	}
	put(&metapb.Volume{Id: 1, Generation: 2, Servers: []string{"a:1", "b:1"}, ServerIds: []string{"a", "b"}, Replication: 2})
	put(&metapb.Volume{Id: 2, Generation: 3, Servers: []string{"b:1", "c:1"}, ServerIds: []string{"b", "c"}, Replication: 2})
	r, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: "a", Addr: "a:1", Volumes: []*metapb.VolumeStat{
		{Id: 1, Generation: 1}, {Id: 2, Generation: 2}, {Id: 9, Generation: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Volumes) != 1 || r.Volumes[0].Id != 1 || r.Volumes[0].Generation != 2 {
		t.Errorf("volumes of a: %v", r.Volumes)
	}
	// 2 moved to b and c: a's copy is stale. 9 is unknown to meta (being
	// created, or meta lost it): never dropped on a guess.
	if !slices.Equal(r.Drop, []uint32{2}) {
		t.Errorf("drop %v, want [2]", r.Drop)
	}
	if r.LeaseNs <= 0 || time.Duration(r.LeaseNs) >= ts.svc.cfg.DeadAfter {
		t.Errorf("lease %v with dead-after %v", time.Duration(r.LeaseNs), ts.svc.cfg.DeadAfter)
	}
}

// Repairs are planned fewest live replicas first, and a volume with no
// live replica is left alone (nothing to copy from).
func TestRepairOrder(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	now := time.Now()
	for _, id := range []string{"a", "b", "c", "d"} {
		ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: id + ":1"})
	}
	for _, v := range []*metapb.Volume{
		{Id: 1, Generation: 1, Servers: []string{"a:1", "b:1", "x:1"}, ServerIds: []string{"a", "b", "x"}, Replication: 3},
		{Id: 2, Generation: 1, Servers: []string{"a:1", "x:1", "y:1"}, ServerIds: []string{"a", "x", "y"}, Replication: 3},
		{Id: 3, Generation: 1, Servers: []string{"x:1", "y:1", "z:1"}, ServerIds: []string{"x", "y", "z"}, Replication: 3},
	} {
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
			t.Fatal(err)
		}
	}
	// x, y, z were never heard from: dead once meta has been up DeadAfter.
	ts.svc.pmu.Lock()
	ts.svc.cl.started = now.Add(-time.Hour)
	ts.svc.pmu.Unlock()
	j := ts.svc.nextRepair(now)
	if j == nil || j.vol.Id != 2 || j.from.id != "a" || slices.Contains([]string{"a", "x", "y"}, j.to.id) {
		t.Fatalf("first repair %+v, want volume 2 from a to b, c or d", j)
	}
}
