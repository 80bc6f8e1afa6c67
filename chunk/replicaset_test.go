package chunk

import (
	"bytes"
	"context"
	"net"
	"testing"

	"cairn/chunk/chunktest"
	"cairn/errors"
	"cairn/proto/metapb"
)

// TestLateHeartbeatKeepsReplicaSet: meta tells a volume's servers its new
// replica set (SetReplicas) before the heartbeat answers that carry it, so
// an answer meta computed a moment earlier can arrive after SetReplicas:
// without the volume (meta records a new volume only once every server has
// it) or at the generation before a repair. Such an answer must not make
// the primary forget its replicas, or it acknowledges needles that are on
// its own disk alone, lost when that copy is later replaced. A soak lost
// 85 files so: volume 1's first needles, written in the second after its
// creation, were never sent to the replicas the volume was later copied
// from.
func TestLateHeartbeatKeepsReplicaSet(t *testing.T) {
	for _, tt := range []struct {
		name string
		// late is the volume as the late answer has it (nil: not yet recorded).
		late *metapb.Volume
		gen  uint64 // the generation SetReplicas brings, and the writes use
	}{
		{"new volume", nil, 1},
		{"after repair", &metapb.Volume{Id: 1, Generation: 1}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			reps := servers(t, 2, true)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis.Close() // only the address: the replicas never call the primary
			meta := &fakeMeta{}
			cfg := testConfig(t.TempDir())
			cfg.Meta, cfg.Addr = meta, lis.Addr().String()
			p := openStore(t, cfg)
			set := []string{cfg.Addr, reps[0].Addr, reps[1].Addr}
			if tt.late != nil {
				tt.late.Servers = set
				meta.volumes = []*metapb.Volume{tt.late}
				for _, s := range []chunktest.Replicated{p, reps[0].S, reps[1].S} {
					if err := s.SetReplicas(ctx, 1, tt.late.Generation, set); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := p.Heartbeat(ctx); err != nil { // the lease
				t.Fatal(err)
			}
			for _, s := range []chunktest.Replicated{p, reps[0].S, reps[1].S} {
				if err := s.SetReplicas(ctx, 1, tt.gen, set); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Heartbeat(ctx); err != nil { // the late answer
				t.Fatal(err)
			}
			data := chunktest.Data(7, 1000)
			key, err := p.Put(ctx, 1, tt.gen, data)
			if err != nil {
				t.Fatalf("put after the late answer: %v", err)
			}
			for i, r := range reps {
				var got bytes.Buffer
				if _, err := r.S.ReadTo(ctx, 1, key, 0, int64(len(data)), &got); err != nil || !bytes.Equal(got.Bytes(), data) {
					t.Errorf("replica %d lacks the acknowledged needle %d: %v", i, key, err)
				}
			}
		})
	}
}

// TestPutWithoutReplicaSetRefused: in a cluster a primary takes a needle
// only under a generation whose replica set meta told it; otherwise it
// cannot know whom to send the needle to, and refuses (errors.Stale: the
// writer goes to another volume) rather than keep the only copy.
func TestPutWithoutReplicaSetRefused(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir())
	cfg.Meta, cfg.Addr = &fakeMeta{}, "10.0.0.1:9000"
	s := openStore(t, cfg)
	if err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateVolume(ctx, 1, 1); err != nil { // created, but no set
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, 1, 1, []byte("x")); !errors.Is(errors.Stale, err) {
		t.Errorf("put with no replica set: %v, want Stale", err)
	}
	if err := s.SetReplicas(ctx, 1, 1, []string{cfg.Addr}); err != nil { // one replica: this server
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, 1, 1, []byte("x")); err != nil {
		t.Errorf("put to a volume of one replica: %v", err)
	}
	if err := s.SetReplicas(ctx, 1, 2, []string{cfg.Addr}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, 1, 1, []byte("x")); !errors.Is(errors.Stale, err) {
		t.Errorf("put at the generation before the set's: %v, want Stale", err)
	}
}
