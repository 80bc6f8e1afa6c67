package meta

import (
	"slices"
	"testing"

	"cairn/proto/metapb"
)

// TestPlacementSkipsFullDisk: a data server whose disk is full (a volume
// refused a write with ENOSPC, or it has no space left) takes no new
// replicas, even when spread would choose it (alone in its zone); once it
// reports space again it takes them.
func TestPlacementSkipsFullDisk(t *testing.T) {
	ts := start(t, newCluster())
	beat := func(id, zone string, capacity, free uint64, noSpace uint32) {
		t.Helper()
		if _, err := ts.cl.Heartbeat(bg, &metapb.HeartbeatRequest{ServerId: id, Addr: id + ":1", Capacity: capacity, Free: free,
			Labels: map[string]string{"zone": zone}, Disk: &metapb.DiskHealth{NoSpaceVolumes: noSpace}}); err != nil {
			t.Fatal(err)
		}
	}
	beat("a1", "z1", 1<<40, 1<<39, 0)
	beat("a2", "z1", 1<<40, 1<<39, 0)
	if _, err := ts.cl.CreateNamespace(bg, &metapb.CreateNamespaceRequest{Name: "rf2", Owner: "o", Replication: 2}); err != nil {
		t.Fatal(err)
	}
	full := []uint32{}
	assign := func() []string {
		t.Helper()
		a, err := ts.cl.Assign(bg, &metapb.AssignRequest{Ns: "rf2", Full: full})
		if err != nil {
			t.Fatal(err)
		}
		full = append(full, a.Volume.Id) // the next call asks for a new volume
		return a.Volume.ServerIds
	}
	for _, c := range []struct {
		name          string
		free          uint64
		noSpace       uint32
		wantPlacement bool
	}{
		{"has space", 20 << 20, 0, true},
		{"a volume said ENOSPC", 20 << 20, 1, false},
		{"no space left", 0, 0, false},
		{"space again", 20 << 20, 0, true},
	} {
		beat("b1", "z2", 24<<20, c.free, c.noSpace)
		if got := slices.Contains(assign(), "b1"); got != c.wantPlacement {
			t.Errorf("%s: b1 (alone in its zone) placed %v, want %v", c.name, got, c.wantPlacement)
		}
	}
}
