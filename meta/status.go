package meta

import (
	"cmp"
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// ClusterStatus reports the data servers, every volume's replica health
// and the repairs running (`cairn admin status`).
func (s *Service) ClusterStatus(ctx context.Context, _ *metapb.Empty) (*metapb.ClusterStatusResponse, error) {
	now := time.Now()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	out := &metapb.ClusterStatusResponse{RepairsDone: s.cl.done, RepairBytesPerSec: uint64(max(s.cfg.RepairRate, 0)),
		RepairRounds: s.cl.rounds, Settled: s.settled(now)}
	counts := s.replicaCounts()
	for _, d := range s.servers {
		cs := &metapb.ClusterServer{
			Id: d.id, Addr: d.addr, Labels: d.labels, Alive: s.alive(d, now),
			LastHeartbeatNs: d.lastSeen.UnixNano(), Capacity: d.capacity, Free: d.free,
			Volumes: uint32(counts[d.id]), Draining: s.cl.draining[d.id],
			Suspect: now.Before(s.cl.suspect[d.addr]), Used: d.used, Disk: d.disk,
		}
		out.Servers = append(out.Servers, cs)
	}
	// Servers the volumes name that have not been heard since meta started.
	for id := range counts {
		if s.servers[id] == nil {
			out.Servers = append(out.Servers, &metapb.ClusterServer{Id: id, Volumes: uint32(counts[id]), Draining: s.cl.draining[id]})
		}
	}
	slices.SortFunc(out.Servers, func(a, b *metapb.ClusterServer) int { return cmp.Compare(a.Id, b.Id) })
	for _, v := range s.volumes {
		cv := &metapb.ClusterVolume{Volume: proto.Clone(v).(*metapb.Volume)}
		if st := s.vstats[v.Id]; st != nil {
			cv.Volume.Size, cv.Volume.Garbage = st.Size, st.Garbage
		}
		for _, id := range v.ServerIds {
			if !s.dead(id, now) {
				cv.Live++
			}
		}
		switch want := max(v.Replication, 1); {
		case s.cl.repairs[v.Id] != nil:
			cv.Health = "repairing"
		case cv.Live == 0:
			cv.Health = "lost"
		case cv.Live < want:
			cv.Health = "degraded"
		default:
			cv.Health = "ok"
		}
		s.ecStatus(cv, v, now)
		out.Volumes = append(out.Volumes, cv)
	}
	s.ecStatusTotals(out)
	slices.SortFunc(out.Volumes, func(a, b *metapb.ClusterVolume) int { return cmp.Compare(a.Volume.Id, b.Volume.Id) })
	for vid, j := range s.cl.repairs {
		r := &metapb.ClusterRepair{Volume: vid, Kind: j.kind, From: j.from.addr, To: j.to.addr,
			BytesTotal: j.total, StartedNs: j.started.UnixNano()}
		if st := j.to.vols[vid]; st != nil {
			r.BytesDone = min(st.Size, j.total)
		}
		out.Repairs = append(out.Repairs, r)
	}
	slices.SortFunc(out.Repairs, func(a, b *metapb.ClusterRepair) int { return cmp.Compare(a.Volume, b.Volume) })
	return out, nil
}

// ClusterDrain marks a data server (by id or address) draining: nothing
// new is placed on it and every replica it holds is copied elsewhere, after
// which it deletes its copies. Undo ends the drain.
func (s *Service) ClusterDrain(ctx context.Context, req *metapb.ClusterDrainRequest) (*metapb.Empty, error) {
	const op = errors.Op("meta.ClusterDrain")
	s.pmu.Lock()
	id := ""
	for _, d := range s.servers {
		if d.id == req.Server || d.addr == req.Server {
			id = d.id
		}
	}
	if id == "" {
		for known := range s.replicaCounts() {
			if known == req.Server {
				id = known
			}
		}
	}
	s.pmu.Unlock()
	if id == "" {
		return nil, errors.E(op, errors.NotExist, errors.Path(req.Server), "no such data server")
	}
	st := &metapb.ClusterServerState{ServerId: id, Draining: !req.Undo}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_ServerState{ServerState: st}}); err != nil {
		return nil, err
	}
	return &metapb.Empty{}, nil
}

// ClusterRebalance asks for volumes to move, throttled, until the bytes on
// the data servers are as even as whole volumes allow.
func (s *Service) ClusterRebalance(ctx context.Context, _ *metapb.Empty) (*metapb.Empty, error) {
	s.pmu.Lock()
	s.cl.balance = true
	s.pmu.Unlock()
	s.kickRepair()
	return &metapb.Empty{}, nil
}
