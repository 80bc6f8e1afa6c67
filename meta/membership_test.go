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
	// c1 and c2 were slow, not dead: they answer heartbeats after the
	// report. Suspicion then only narrows the choice: it must not refuse
	// an RF 3 volume while 3 servers that may take one are alive.
	for _, id := range []string{"c1", "c2"} {
		if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: id + ":1", Free: 100,
			Labels: map[string]string{"zone": "z2", "rack": "r3"}}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf3", Full: []uint32{6}})
	if err != nil {
		t.Fatalf("assign with 2 placeable servers and 2 suspect ones that answer heartbeats: %v", err)
	}
	if v := a.Volume; len(v.ServerIds) != 3 || slices.Contains(v.ServerIds, "b1") {
		t.Fatalf("volume %d on %v: want 3 replicas, none on the drained b1", v.Id, v.ServerIds)
	}
	// Reported again and not heard from since: it may be dead now.
	if _, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf3", Full: []uint32{a.Volume.Id}, Suspect: []string{"c1:1", "c2:1"}}); !errors.Is(errors.Unavailable, err) {
		t.Fatalf("assign after a new report, with no heartbeat since: %v", err)
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

// Rebalancing moves volumes from fuller servers to emptier ones until no
// move narrows a gap. A committed move counts at once, not at the servers'
// next heartbeats: planning on the sizes they last reported moved every
// volume of the fullest server to the new one and left it empty.
func TestRebalancePlan(t *testing.T) {
	c := newCluster()
	ts := start(t, c)
	sizes := map[uint32]uint64{1: 6 << 20, 2: 3 << 20, 3: 3 << 20}
	for id := range sizes {
		v := &metapb.Volume{Id: id, Generation: 1, Servers: []string{"a:1", "b:1", "c:1"}, ServerIds: []string{"a", "b", "c"}, Replication: 3}
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
			t.Fatal(err)
		}
	}
	beat := func(id string, vids []uint32, labels map[string]string) {
		var vs []*metapb.VolumeStat
		for _, vid := range vids {
			vs = append(vs, &metapb.VolumeStat{Id: vid, Generation: 1, Size: sizes[vid]})
		}
		if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: id + ":1", Free: 1 << 40, Volumes: vs, Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		beat(id, []uint32{1, 2, 3}, nil)
	}
	beat("d", nil, nil) // joins empty
	placed := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, v := range ts.svc.volumes {
			for _, id := range v.ServerIds {
				out[id] += sizes[v.Id]
			}
		}
		return out
	}
	moves := 0
	for ; moves < 10; moves++ {
		ts.svc.pmu.Lock()
		j := ts.svc.planRebalance(time.Now())
		ts.svc.pmu.Unlock()
		if j == nil {
			break
		}
		// Commit the move as repair does; no heartbeat follows.
		next := &metapb.Volume{Id: j.vol.Id, Generation: j.vol.Generation + 1, Replication: 3}
		for i, id := range j.vol.ServerIds {
			if id != j.from.id {
				next.ServerIds, next.Servers = append(next.ServerIds, id), append(next.Servers, j.vol.Servers[i])
			}
		}
		next.ServerIds, next.Servers = append(next.ServerIds, j.to.id), append(next.Servers, j.to.addr)
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: next}}); err != nil {
			t.Fatal(err)
		}
	}
	p := placed()
	var lo, hi uint64 = 1 << 62, 0
	for _, id := range []string{"a", "b", "c", "d"} {
		lo, hi = min(lo, p[id]), max(hi, p[id])
	}
	// 12 MiB on a, b and c, none on d: the 6 MiB volume moves to d, then a
	// 3 MiB one; nothing further narrows a gap by whole volumes.
	if moves != 2 || p["d"] != 9<<20 || hi-lo != 6<<20 {
		t.Fatalf("%d moves, bytes placed %v", moves, p)
	}

	// A move never brings two replicas into one zone: volumes 4 and 5 are
	// on zones z1, z2, z3 and the emptiest server is in z1.
	for _, id := range []uint32{4, 5} {
		sizes[id] = 4 << 20
		v := &metapb.Volume{Id: id, Generation: 1, Servers: []string{"e:1", "f:1", "g:1"}, ServerIds: []string{"e", "f", "g"}, Replication: 3}
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
			t.Fatal(err)
		}
	}
	ts.svc.pmu.Lock()
	for id, d := range ts.svc.servers { // out of the way: only e, f, g, h count
		if id < "e" {
			d.lastSeen = time.Time{}
		}
	}
	ts.svc.pmu.Unlock()
	beat("e", []uint32{4, 5}, map[string]string{"zone": "z1"})
	beat("f", []uint32{4, 5}, map[string]string{"zone": "z2"})
	beat("g", []uint32{4, 5}, map[string]string{"zone": "z3"})
	beat("h", nil, map[string]string{"zone": "z1"})
	ts.svc.pmu.Lock()
	j := ts.svc.planRebalance(time.Now())
	ts.svc.pmu.Unlock()
	if j == nil || j.from.id != "e" || j.to.id != "h" {
		t.Fatalf("move %+v, want one from e to h (the only move keeping three zones)", j)
	}
}
