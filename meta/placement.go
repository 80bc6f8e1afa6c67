package meta

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn"
	"cairn/errors"
	"cairn/proto/metapb"
)

// dataServer is what meta knows of a data server: soft state from its
// heartbeats, never persisted.
type dataServer struct {
	id, addr       string
	labels         map[string]string
	capacity, free uint64
	used           uint64 // bytes in its volumes
	lastSeen       time.Time
	vols           map[uint32]*metapb.VolumeStat // as last reported
	disk           *metapb.DiskHealth            // as last reported
	shards         []*metapb.ShardStat           // as last reported (ec.go)
	shardsAt       time.Time                     // when shards was reported
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
	now := time.Now()
	s.pmu.Lock()
	d := s.servers[req.ServerId]
	back := d == nil || !s.alive(d, now)
	if d == nil {
		d = &dataServer{id: req.ServerId}
		s.servers[req.ServerId] = d
		s.log.Info("data server joined", "id", req.ServerId, "addr", req.Addr, "labels", req.Labels)
		if s.cfg.RebalanceOnJoin && s.settled(now) {
			s.cl.balance = true // never false here: that would cancel a rebalance asked for
		}
	} else if back {
		s.log.Info("data server is back", "id", req.ServerId, "addr", req.Addr)
	}
	d.addr, d.labels, d.capacity, d.free, d.lastSeen = req.Addr, req.Labels, req.Capacity, req.Free, now
	d.disk = req.Disk
	d.shards, d.shardsAt = req.Shards, now
	d.vols, d.used = map[uint32]*metapb.VolumeStat{}, 0
	for _, st := range req.Volumes {
		d.vols[st.Id] = st
		d.used += st.Size
		vol := s.volumes[st.Id]
		if vol == nil || !slices.Contains(vol.ServerIds, req.ServerId) {
			continue // a copy being made, or a stale one: not the volume's figures
		}
		s.vstats[st.Id] = st
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
	if back {
		// Deletes that waited for it can go through now; repairs re-plan.
		select {
		case s.gcKick <- struct{}{}:
		default:
		}
		s.kickRepair()
	}
	if g := s.group; g != nil {
		// A lease is a promise that no member moves the server's volumes
		// before it ends. A leader cut off from the group (frozen, or
		// partitioned, not yet aware that another member leads) could
		// still answer, and its lease would outlast the DeadAfter the new
		// leader gives the server from its takeover (raft.go). So the
		// answer waits until a majority confirms, after the heartbeat came
		// in, that this member still leads: the server counts the lease
		// from before it sent the heartbeat, so no later leader can have
		// taken over before the lease began. Raft shares one round among
		// the heartbeats waiting at once.
		if err := g.r.VerifyLeader().Error(); err != nil {
			return nil, errors.E(op, g.notLeader())
		}
	}
	keys := s.capKeys()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	resp := s.heartbeatAnswer(req.ServerId, req.Volumes)
	resp.CapKeys = keys
	resp.Revoked = s.revokedList()
	return resp, nil
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
	ns, err := s.GetNamespace(ctx, &metapb.NamespaceRequest{Name: req.Ns})
	if err != nil {
		return nil, errors.E(op, err)
	}
	cl, err := s.class(cmp.Or(req.StorageClass, ns.StorageClass))
	if err != nil {
		return nil, errors.E(op, errors.Path(req.Ns), err)
	}
	rf := max(ns.Replication, 1)
	if cl.Replication > 0 {
		rf = cl.Replication
	}
	s.markSuspect(req.Suspect)
	if err := s.markReadOnly(req.Full); err != nil {
		return nil, err
	}
	if v := s.pickWritable(rf, cl, false); v != nil {
		return &metapb.AssignResponse{Volume: v, WriteCap: s.writeCap(req.Ns, v.Id)}, nil
	}
	// One creation at a time: concurrent Assigns that all found nothing
	// writable wait here and then take the volume the first one made.
	s.assignMu.Lock()
	defer s.assignMu.Unlock()
	if v := s.pickWritable(rf, cl, false); v != nil {
		return &metapb.AssignResponse{Volume: v, WriteCap: s.writeCap(req.Ns, v.Id)}, nil
	}
	// Too few servers above suspicion for a new volume: a writable one
	// on servers that were reported slow but answer heartbeats since
	// does better than a new volume on them, and better than a refusal.
	if s.placeableCount(cl) < int(rf) {
		if v := s.pickWritable(rf, cl, true); v != nil {
			return &metapb.AssignResponse{Volume: v, WriteCap: s.writeCap(req.Ns, v.Id)}, nil
		}
	}
	v, err := s.createVolume(ctx, rf, cl)
	if err != nil {
		return nil, errors.E(op, errors.Path(req.Ns), err)
	}
	return &metapb.AssignResponse{Volume: v, WriteCap: s.writeCap(req.Ns, v.Id)}, nil
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

// pickWritable picks a writable volume with rf replicas, all of them on
// servers placement may use (alive, not suspect, not draining); with
// slow, also on servers suspect but heard from since (slowButAlive).
func (s *Service) pickWritable(rf uint32, cl Class, slow bool) *metapb.Volume {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	now := time.Now()
	var cands []*metapb.Volume
	for _, v := range s.volumes {
		if v.ReadOnly || len(v.ServerIds) == 0 || max(v.Replication, 1) != rf || v.StorageClass != volumeClass(cl.Name) {
			continue
		}
		if st := s.vstats[v.Id]; st != nil && (st.ReadOnly || st.Size >= s.cfg.MaxVolumeSize) {
			continue
		}
		ok := true
		for _, id := range v.ServerIds {
			d := s.servers[id]
			ok = ok && d != nil && (s.placeable(d, now) || slow && s.slowButAlive(d, now)) && mediaOK(cl, d)
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

// createVolume makes a volume with rf replicas on servers chosen by
// choose, and records it. Servers reported slow (slowButAlive) fill the
// places the others cannot. Called with assignMu held, so ids are not raced
// for. A server that fails to create its copy is suspected and another is
// chosen; the copies already made are reused on the next attempt (same id,
// the next generation).
func (s *Service) createVolume(ctx context.Context, rf uint32, cl Class) (*metapb.Volume, error) {
	ctx = s.dataCtx(ctx) // meta signs its calls to the data servers
	if s.cfg.Chunks == nil {
		return nil, errors.E(errors.Unavailable, "no data plane configured")
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
	if s.creating.id != id {
		s.creating.id, s.creating.gen = id, 0
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s.pmu.Lock()
		now := time.Now()
		chosen := s.choose(int(rf), s.classCandidates(cl, s.placementCandidates(now, nil)), nil)
		if len(chosen) < int(rf) {
			chosen = append(chosen, s.choose(int(rf)-len(chosen), s.classCandidates(cl, s.slowCandidates(now)), chosen)...)
		}
		s.pmu.Unlock()
		if len(chosen) < int(rf) {
			return nil, errors.E(errors.Unavailable, fmt.Sprintf("%d replicas wanted, %d data servers can take them", rf, len(chosen)))
		}
		// Each attempt at this id, in this call or an earlier one that
		// failed, takes a generation above the last: a call that timed
		// out here may still reach its server later (a handler stalled
		// under load), and at the same generation it replaced the set a
		// later attempt gave that server. As the primary of the volume
		// recorded, the server then forwarded needles to the failed
		// attempt's replicas instead of the recorded ones, and a needle
		// acknowledged so was on one recorded replica only
		// (TestLateCreateKeepsReplicaSet). A data server refuses a set
		// below its copy's generation (Stale).
		s.creating.gen++
		gen := s.creating.gen
		vol := &metapb.Volume{Id: id, Generation: gen, Replication: rf, StorageClass: volumeClass(cl.Name)}
		for _, d := range chosen {
			vol.Servers = append(vol.Servers, d.addr)
			vol.ServerIds = append(vol.ServerIds, d.id)
		}
		var failed []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, d := range chosen {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				var err error
				// Every server learns the set, even of one replica: in a
				// cluster a primary takes needles only under a set meta
				// gave it (chunk.Store.peers).
				if r, ok := s.cfg.Chunks(d.addr).(cairn.Replicas); ok {
					err = r.SetReplicas(cctx, id, gen, vol.Servers)
				} else {
					err = s.cfg.Chunks(d.addr).CreateVolume(cctx, id, gen)
				}
				if err != nil {
					mu.Lock()
					failed = append(failed, d.addr)
					lastErr = errors.E(errors.Path(d.addr), err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(failed) > 0 {
			s.markSuspect(failed)
			continue
		}
		if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: vol}}); err != nil {
			return nil, err
		}
		s.log.Info("volume created", "volume", id, "servers", vol.Servers)
		return proto.Clone(vol).(*metapb.Volume), nil
	}
	return nil, lastErr
}

// slowButAlive reports whether d is kept out of placement only by a
// writer's report of it failing, and has sent a heartbeat since: a busy
// server (a forward to it timed out under load), not a dead one, which is
// silent after the report. Placement takes such servers when the others
// are too few for a volume's replicas, rather than refuse every write
// until the suspicion lapses: every replica still fsyncs before a write is
// acknowledged, so a slow one costs latency, never durability. Called with
// pmu.
func (s *Service) slowButAlive(d *dataServer, now time.Time) bool {
	until := s.cl.suspect[d.addr]
	if !now.Before(until) {
		return false // not suspect: placeable decides
	}
	reported := until.Add(-s.cfg.DeadAfter) // markSuspect's time of the last report
	return d.lastSeen.After(reported) && s.alive(d, now) && !s.cl.draining[d.id] && !diskFull(d)
}

// slowCandidates are the servers slowButAlive, in id order. Called with pmu.
func (s *Service) slowCandidates(now time.Time) []*dataServer {
	var out []*dataServer
	for _, d := range s.servers {
		if s.slowButAlive(d, now) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *dataServer) int { return cmp.Compare(a.id, b.id) })
	return out
}

// placeableCount is how many servers of class cl's media placement may use.
func (s *Service) placeableCount(cl Class) int {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return len(s.classCandidates(cl, s.placementCandidates(time.Now(), nil)))
}
