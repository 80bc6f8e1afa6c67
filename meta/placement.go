package meta

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// dataServer is what meta knows of a data server: soft state from its
// heartbeats, never persisted.
type dataServer struct {
	id, addr       string
	labels         map[string]string
	capacity, free uint64
	lastSeen       time.Time
}

func (s *Service) alive(d *dataServer, now time.Time) bool {
	return d != nil && now.Sub(d.lastSeen) <= s.cfg.DeadAfter
}

func (s *Service) liveServers() []*dataServer {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	now := time.Now()
	var out []*dataServer
	for _, d := range s.servers {
		if s.alive(d, now) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Heartbeat records a data server as alive with its volumes' sizes. A
// volume reported full, or read-only, is made read-only in the store so
// that Assign stops handing it out; a volume whose server moved to a new
// address gets the new address.
func (s *Service) Heartbeat(ctx context.Context, req *metapb.HeartbeatRequest) (*metapb.HeartbeatResponse, error) {
	const op = errors.Op("meta.Heartbeat")
	if req.ServerId == "" || req.Addr == "" {
		return nil, errors.E(op, errors.Invalid, "server_id and addr are required")
	}
	var changed []*metapb.Volume
	s.pmu.Lock()
	d := s.servers[req.ServerId]
	if d == nil {
		d = &dataServer{id: req.ServerId}
		s.servers[req.ServerId] = d
		s.log.Info("data server joined", "id", req.ServerId, "addr", req.Addr)
	}
	d.addr, d.labels, d.capacity, d.free, d.lastSeen = req.Addr, req.Labels, req.Capacity, req.Free, time.Now()
	for _, st := range req.Volumes {
		s.vstats[st.Id] = st
		vol := s.volumes[st.Id]
		if vol == nil {
			continue
		}
		var c *metapb.Volume
		if !vol.ReadOnly && (st.ReadOnly || st.Size >= s.cfg.MaxVolumeSize) {
			c = proto.Clone(vol).(*metapb.Volume)
			c.ReadOnly = true
		}
		if i := slices.Index(vol.ServerIds, req.ServerId); i >= 0 && i < len(vol.Servers) && vol.Servers[i] != req.Addr {
			if c == nil {
				c = proto.Clone(vol).(*metapb.Volume)
			}
			c.Servers[i] = req.Addr
		}
		if c != nil {
			changed = append(changed, c)
		}
	}
	s.pmu.Unlock()
	for _, c := range changed {
		c.Size, c.Garbage = 0, 0 // live figures stay soft state
		if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: c}}); err != nil {
			return nil, err
		}
	}
	return &metapb.HeartbeatResponse{MaxVolumeSize: s.cfg.MaxVolumeSize}, nil
}

// Volumes returns the volume -> servers map (all volumes if ids is empty),
// with the sizes last reported.
func (s *Service) Volumes(ctx context.Context, req *metapb.VolumesRequest) (*metapb.VolumesResponse, error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	out := &metapb.VolumesResponse{}
	add := func(v *metapb.Volume) {
		c := proto.Clone(v).(*metapb.Volume)
		if st := s.vstats[v.Id]; st != nil {
			c.Size, c.Garbage = st.Size, st.Garbage
		}
		out.Volumes = append(out.Volumes, c)
	}
	if len(req.Ids) == 0 {
		for _, v := range s.volumes {
			add(v)
		}
		sort.Slice(out.Volumes, func(i, j int) bool { return out.Volumes[i].Id < out.Volumes[j].Id })
		return out, nil
	}
	for _, id := range req.Ids {
		if v := s.volumes[id]; v != nil {
			add(v)
		}
	}
	return out, nil
}

// Assign returns a writable volume for a new file of namespace ns. Volumes
// the client reports in full are made read-only first. When no volume is
// writable, a new one is created on the live server with the most free
// space. Writers are spread at random over the writable volumes, so that
// concurrent writers do not queue on one volume file.
func (s *Service) Assign(ctx context.Context, req *metapb.AssignRequest) (*metapb.AssignResponse, error) {
	const op = errors.Op("meta.Assign")
	if _, err := s.GetNamespace(ctx, &metapb.NamespaceRequest{Name: req.Ns}); err != nil {
		return nil, errors.E(op, err)
	}
	if err := s.markReadOnly(req.Full); err != nil {
		return nil, err
	}
	if v := s.pickWritable(); v != nil {
		return &metapb.AssignResponse{Volume: v}, nil
	}
	// One creation at a time: concurrent Assigns that all found nothing
	// writable wait here and then take the volume the first one made.
	s.assignMu.Lock()
	defer s.assignMu.Unlock()
	if v := s.pickWritable(); v != nil {
		return &metapb.AssignResponse{Volume: v}, nil
	}
	v, err := s.createVolume(ctx)
	if err != nil {
		return nil, errors.E(op, errors.Path(req.Ns), err)
	}
	return &metapb.AssignResponse{Volume: v}, nil
}

func (s *Service) markReadOnly(ids []uint32) error {
	for _, id := range ids {
		s.pmu.Lock()
		v := s.volumes[id]
		var c *metapb.Volume
		if v != nil && !v.ReadOnly {
			c = proto.Clone(v).(*metapb.Volume)
			c.ReadOnly = true
		}
		s.pmu.Unlock()
		if c != nil {
			if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: c}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Service) pickWritable() *metapb.Volume {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	now := time.Now()
	var cands []*metapb.Volume
	for _, v := range s.volumes {
		if v.ReadOnly || len(v.ServerIds) == 0 {
			continue
		}
		if st := s.vstats[v.Id]; st != nil && (st.ReadOnly || st.Size >= s.cfg.MaxVolumeSize) {
			continue
		}
		ok := true
		for _, id := range v.ServerIds {
			ok = ok && s.alive(s.servers[id], now)
		}
		if ok {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	c := proto.Clone(cands[rand.IntN(len(cands))]).(*metapb.Volume)
	if st := s.vstats[c.Id]; st != nil {
		c.Size, c.Garbage = st.Size, st.Garbage
	}
	return c
}

// createVolume makes a volume on the live server with the most free space
// and records it. Called with assignMu held, so ids are not raced for.
// Only one replica is placed for now; Volume.servers keeps the list shape.
func (s *Service) createVolume(ctx context.Context) (*metapb.Volume, error) {
	if s.cfg.Chunks == nil {
		return nil, errors.E(errors.Unavailable, "no data plane configured")
	}
	live := s.liveServers()
	if len(live) == 0 {
		return nil, errors.E(errors.Unavailable, "no live data servers")
	}
	best := live[0]
	for _, d := range live[1:] {
		if d.free > best.free {
			best = d
		}
	}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	val, _, err := v.get(keyVolCounter)
	v.close()
	if err != nil {
		return nil, err
	}
	id := uint32(u64(val)) + 1
	const gen = 1
	if err := s.cfg.Chunks(best.addr).CreateVolume(ctx, id, gen); err != nil {
		return nil, errors.E(errors.Path(best.addr), err)
	}
	vol := &metapb.Volume{Id: id, Generation: gen, Servers: []string{best.addr}, ServerIds: []string{best.id}}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: vol}}); err != nil {
		return nil, err
	}
	s.log.Info("volume created", "volume", id, "server", best.addr)
	return proto.Clone(vol).(*metapb.Volume), nil
}
