package meta

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn"
	"cairn/ec"
	"cairn/errors"
	"cairn/proto/metapb"
)

// shardServer is an in-memory data server that also encodes and copies
// volumes (cairn.Shards, cairn.Replicas), with nothing behind it: the
// tests here are of what meta records, and in which order. An encode
// announces itself on encoding and then waits for gate, if set.
type shardServer struct {
	*memChunks
	encoding chan struct{}
	gate     chan struct{}
	copied   chan struct{}
}

var (
	_ cairn.Shards   = (*shardServer)(nil)
	_ cairn.Replicas = (*shardServer)(nil)
)

func (f *shardServer) EncodeVolume(ctx context.Context, vid uint32, gen uint64, k, m int, cell int64, to []string) (int64, error) {
	if f.encoding != nil {
		f.encoding <- struct{}{}
	}
	if f.gate != nil {
		<-f.gate
	}
	return 3 << 20, nil
}

func (f *shardServer) RebuildShard(ctx context.Context, vid uint32, idx int, l ec.Layout, servers []string) error {
	return nil
}

func (f *shardServer) SetReplicas(ctx context.Context, vid uint32, gen uint64, addrs []string) error {
	return nil
}

func (f *shardServer) Seal(ctx context.Context, vid uint32, gen uint64) error { return nil }

func (f *shardServer) CopyFrom(ctx context.Context, vid uint32, gen uint64, from string, rate int64) error {
	select {
	case f.copied <- struct{}{}:
	default:
	}
	return nil
}

// TestEncodeAndRepairRace: a volume of an ec class that is sealed and has
// lost a replica is both encoded (the ec loop) and re-replicated (the
// repair loop, which runs beside it). Whichever records second must not
// undo the first: the repair used to record a replicated volume over the
// encoded one (and without its class), which then stayed replicated for
// good; TestECEncodeCrash timed out on it. A repair also keeps the
// volume's class.
func TestEncodeAndRepairRace(t *testing.T) {
	servers := map[string]*shardServer{}
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "x"} {
		servers[id+":1"] = &shardServer{memChunks: newMemChunks(), copied: make(chan struct{}, 4)}
	}
	cfg := testConfig(t.TempDir(), nil)
	cfg.Chunks = func(addr string) cairn.Chunks { return servers[addr] }
	cfg.DeadAfter = time.Hour // the loops of meta itself leave these volumes alone
	svc, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, svc)
	ctx := svc.dataCtx(bg)
	ds := func(id string) *dataServer { return &dataServer{id: id, addr: id + ":1"} }
	cls := Class{Name: "cold", K: 4, M: 2} // not configured: meta's own ec loop skips it
	sealed := func(vid uint32) *metapb.Volume {
		v := &metapb.Volume{Id: vid, Generation: 1, Servers: []string{"a:1", "b:1"}, ServerIds: []string{"a", "b"},
			ReadOnly: true, Replication: 2, StorageClass: "cold"}
		if _, err := ts.svc.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: v}}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	jobs := func(v *metapb.Volume) (*ecJob, *repairJob) {
		enc := &ecJob{vol: proto.Clone(v).(*metapb.Volume), class: cls, idx: encodeJob,
			to: []*dataServer{ds("c"), ds("d"), ds("e"), ds("f"), ds("g"), ds("h")}}
		svc.pmu.Lock()
		rep := &repairJob{kind: "re-replicate", vol: svc.volumes[v.Id], from: ds("a"), to: ds("x"), drop: []string{"b"}}
		svc.pmu.Unlock()
		return enc, rep
	}
	current := func(vid uint32) *metapb.Volume {
		svc.pmu.Lock()
		defer svc.pmu.Unlock()
		return svc.volumes[vid]
	}

	// The encode is planned and running when the repair starts; the
	// repair copies, then waits for the encode to finish.
	enc, rep := jobs(sealed(7))
	primary := servers["a:1"]
	primary.encoding, primary.gate = make(chan struct{}), make(chan struct{})
	encoded := make(chan error, 1)
	go func() { encoded <- svc.encode(ctx, enc) }()
	<-primary.encoding
	repaired := make(chan error, 1)
	go func() { repaired <- svc.repair(bg, rep) }()
	<-servers["x:1"].copied
	close(primary.gate)
	if err := <-encoded; err != nil {
		t.Fatalf("encode: %v", err)
	}
	if err := <-repaired; !errors.Is(errors.Stale, err) {
		t.Errorf("repair of a volume encoded meanwhile: %v, want a Stale error", err)
	}
	if v := current(7); v.Ec == nil || v.StorageClass != "cold" || len(v.Servers) != 0 {
		t.Fatalf("volume encoded while a repair ran: recorded as %v", v)
	}

	// The repair records first; the encode planned before it is refused
	// (the volume changed) and planned again from the new record.
	primary.encoding, primary.gate = nil, nil
	enc, rep = jobs(sealed(8))
	if err := svc.repair(bg, rep); err != nil {
		t.Fatalf("repair: %v", err)
	}
	v := current(8)
	if v.Ec != nil || v.Generation != 2 || v.StorageClass != "cold" || !v.ReadOnly {
		t.Fatalf("after the repair: %v, want generation 2, read-only, class cold", v)
	}
	if err := svc.encode(ctx, enc); !errors.Is(errors.Stale, err) {
		t.Errorf("encode planned before a repair recorded: %v, want a Stale error", err)
	}
	if v := current(8); v.Ec != nil || v.Generation != 2 {
		t.Fatalf("a stale encode was recorded: %v", v)
	}
}
