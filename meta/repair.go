package meta

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn"
	"cairn/errors"
	"cairn/proto/metapb"
)

// repairJob moves one replica of a volume: a new copy on to, made from
// from, replacing the replicas in drop (dead, draining, or the one a
// rebalance moves away).
type repairJob struct {
	kind    string // re-replicate, drain, rebalance
	vol     *metapb.Volume
	from    *dataServer
	to      *dataServer
	drop    []string // server ids leaving the set
	live    int      // replicas on live servers when planned
	started time.Time
	total   uint64 // bytes of the source copy
}

// repairLoop re-replicates, drains and rebalances, one volume at a time:
// every second, at once when a server joins or dies or an operator asks.
func (s *Service) repairLoop() {
	defer s.wg.Done()
	s.background(s.cl.kick, func(ctx context.Context) bool {
		j := s.nextRepair(time.Now())
		if j == nil {
			return false
		}
		if err := s.repair(ctx, j); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("repair failed; will retry", "volume", j.vol.Id, "kind", j.kind, "from", j.from.addr, "to", j.to.addr, "err", err)
			}
			return false // re-plan on the next tick: the failure may have been a death
		}
		return true
	})
}

// nextRepair plans the most urgent move: the volume with the fewest live
// replicas first; then volumes on draining servers; then, if asked, one
// rebalancing move. Nil: nothing to do (or nothing possible now).
func (s *Service) nextRepair(now time.Time) *repairJob {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.cl.rounds++
	var jobs []*repairJob
	for _, v := range s.volumes {
		want := int(max(v.Replication, 1))
		var live, gone, leaving []string
		for _, id := range v.ServerIds {
			switch {
			case s.dead(id, now):
				gone = append(gone, id)
			case s.cl.draining[id]:
				leaving = append(leaving, id)
				live = append(live, id)
			default:
				live = append(live, id)
			}
		}
		if len(live) == 0 {
			continue // lost: nothing to copy from (status shows it)
		}
		staying := len(live) - len(leaving)
		switch {
		case len(gone) > 0 || staying < want && len(leaving) == 0:
			jobs = append(jobs, &repairJob{kind: "re-replicate", vol: v, drop: gone, live: len(live)})
		case len(leaving) > 0:
			jobs = append(jobs, &repairJob{kind: "drain", vol: v, drop: leaving[:1], live: len(live)})
		}
	}
	slices.SortFunc(jobs, func(a, b *repairJob) int {
		return cmp.Or(cmp.Compare(a.live, b.live), cmp.Compare(a.vol.Id, b.vol.Id))
	})
	for _, j := range jobs {
		if s.plan(j, now) {
			return j
		}
	}
	if s.cl.balance {
		if j := s.planRebalance(now); j != nil {
			return j
		}
		s.cl.balance = false
	}
	return nil
}

// plan picks the source and the target of j. Called with pmu.
func (s *Service) plan(j *repairJob, now time.Time) bool {
	var staying []*dataServer
	for _, id := range j.vol.ServerIds {
		d := s.servers[id]
		if d == nil || s.dead(id, now) {
			continue
		}
		if j.from == nil || s.cl.draining[j.from.id] && !s.cl.draining[id] {
			j.from = d // prefer a source that is not itself leaving
		}
		if !slices.Contains(j.drop, id) {
			staying = append(staying, d)
		}
	}
	if j.from == nil {
		return false
	}
	to := s.choose(1, s.placementCandidates(now, j.vol.ServerIds), staying)
	if len(to) == 0 {
		return false
	}
	j.to = to[0]
	if st := j.from.vols[j.vol.Id]; st != nil {
		j.total = st.Size
	}
	return true
}

// planRebalance plans one move that narrows the gap between a server
// holding more bytes and one holding fewer: from the fullest server down
// and the emptiest up, the largest volume on the first and not on the
// second whose move leaves the first no emptier than the second, and that
// does not put two replicas closer together (zone, then rack) than they
// were. The bytes a server holds are those of the volumes placed on it
// (sizes as their replicas report them), so a move just committed counts
// at once, before the servers' next heartbeats. Called with pmu.
func (s *Service) planRebalance(now time.Time) *repairJob {
	var ds []*dataServer
	for _, d := range s.servers {
		if s.alive(d, now) && !s.cl.draining[d.id] {
			ds = append(ds, d)
		}
	}
	if len(ds) < 2 {
		return nil
	}
	size := func(v *metapb.Volume) uint64 {
		if st := s.vstats[v.Id]; st != nil {
			return st.Size
		}
		return 0
	}
	placed := map[string]uint64{}
	for _, v := range s.volumes {
		for _, id := range v.ServerIds {
			placed[id] += size(v)
		}
	}
	slices.SortFunc(ds, func(a, b *dataServer) int {
		return cmp.Or(cmp.Compare(placed[a.id], placed[b.id]), cmp.Compare(a.id, b.id))
	})
	for h := len(ds) - 1; h > 0; h-- {
		hi := ds[h]
		for _, lo := range ds[:h] {
			if !s.placeable(lo, now) || placed[lo.id] >= placed[hi.id] {
				continue
			}
			gap := placed[hi.id] - placed[lo.id]
			var best *metapb.Volume
			var bestSize uint64
			for _, v := range s.volumes {
				sz := size(v)
				if !slices.Contains(v.ServerIds, hi.id) || slices.Contains(v.ServerIds, lo.id) || s.cl.repairs[v.Id] != nil {
					continue
				}
				// Moving sz bytes narrows the gap only if sz < gap; at most
				// half of it keeps hi above lo. Empty volumes are not worth
				// a move.
				if sz == 0 || 2*sz > gap || sz <= bestSize {
					continue
				}
				var others []*dataServer
				for _, id := range v.ServerIds {
					if d := s.servers[id]; d != nil && id != hi.id {
						others = append(others, d)
					}
				}
				if a, b := spread(lo, others), spread(hi, others); cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) > 0 {
					continue
				}
				best, bestSize = v, sz
			}
			if best != nil {
				return &repairJob{kind: "rebalance", vol: best, from: hi, to: lo, drop: []string{hi.id}, total: bestSize}
			}
		}
	}
	return nil
}

// repair carries out j: the volume turns read-only (writes go elsewhere),
// the target copies it from the source, then, with the garbage collector
// held off, seals the source, copies again what changed and the new
// replica set is recorded
// at the next generation. Survivors learn the generation now, or from
// their next heartbeat; a dropped replica deletes its copy when meta
// answers its heartbeat.
func (s *Service) repair(ctx context.Context, j *repairJob) error {
	ctx = s.dataCtx(ctx) // meta signs its calls to the data servers
	const op = errors.Op("meta.repair")
	vid := j.vol.Id
	if !j.vol.ReadOnly {
		if err := s.markReadOnly([]uint32{vid}); err != nil {
			return err
		}
	}
	target, ok := s.cfg.Chunks(j.to.addr).(cairn.Replicas)
	if !ok {
		return errors.E(op, errors.Invalid, "the data plane cannot copy volumes")
	}
	j.started = time.Now()
	s.pmu.Lock()
	s.cl.repairs[vid] = j
	s.pmu.Unlock()
	defer func() {
		s.pmu.Lock()
		delete(s.cl.repairs, vid)
		s.pmu.Unlock()
	}()
	gen := j.vol.Generation + 1
	s.log.Info("repair started", "kind", j.kind, "volume", vid, "from", j.from.addr, "to", j.to.addr, "bytes", j.total)
	rate := max(s.cfg.RepairRate, 0)
	if err := target.CopyFrom(ctx, vid, gen, j.from.addr, rate); err != nil {
		return errors.E(op, errors.Path(j.to.addr), err)
	}
	s.cl.gcMu.Lock()
	defer s.cl.gcMu.Unlock()
	// Fence the old set before the final pass. Meta's read-only mark
	// reaches the data servers only with their next heartbeat answers, and
	// a writer that was assigned the volume before it goes on writing to
	// the old set meanwhile: every replica of it, the one being dropped
	// too (declared dead under load while alive), acknowledges. A needle
	// acknowledged after the final pass listed the source was then missing
	// from the new copy: one repair left it on the survivors alone, and a
	// second repair copying from the new replica lost it (TestTiering,
	// issue 20). Every acknowledged write is on the source, and a sealed
	// source refuses new ones (the writer goes to another volume), so the
	// pass below copies every needle the old set ever acknowledged
	// (TestRepairFencesOldSet).
	if src, ok := s.cfg.Chunks(j.from.addr).(cairn.Replicas); !ok {
		return errors.E(op, errors.Invalid, "the data plane cannot seal volumes")
	} else if err := src.Seal(ctx, vid, j.vol.Generation); err != nil {
		return errors.E(op, errors.Path(j.from.addr), err)
	}
	if err := target.CopyFrom(ctx, vid, gen, j.from.addr, rate); err != nil {
		return errors.E(op, errors.Path(j.to.addr), err)
	}
	s.pmu.Lock()
	cur := s.volumes[vid]
	s.pmu.Unlock()
	if cur == nil || cur.Ec != nil || cur.Generation != j.vol.Generation {
		// Recorded anew meanwhile (the ec loop, which runs beside this
		// one, encoded it): a record made from the plan would undo that,
		// putting the copy just made (of a replica about to be dropped)
		// in place of the shards. An encode holds gcMu until it has
		// recorded, so this check holds until the record below.
		return errors.E(op, errors.Stale, errors.Path(fmt.Sprint(vid)), "volume changed while it was repaired")
	}
	// The record as it stands (its class, among the rest), with the new
	// replica set.
	next := proto.Clone(cur).(*metapb.Volume)
	next.Generation, next.ReadOnly = gen, true
	next.Servers, next.ServerIds = nil, nil
	next.Size, next.Garbage = 0, 0
	for i, id := range cur.ServerIds {
		if !slices.Contains(j.drop, id) {
			next.ServerIds = append(next.ServerIds, id)
			next.Servers = append(next.Servers, cur.Servers[i])
		}
	}
	next.ServerIds = append(next.ServerIds, j.to.id)
	next.Servers = append(next.Servers, j.to.addr)
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: next}}); err != nil {
		return err
	}
	for _, addr := range next.Servers {
		if r, ok := s.cfg.Chunks(addr).(cairn.Replicas); ok {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := r.SetReplicas(cctx, vid, gen, next.Servers); err != nil {
				s.log.Warn("replica will learn the new generation from its heartbeat", "volume", vid, "server", addr, "err", err)
			}
			cancel()
		}
	}
	s.pmu.Lock()
	s.cl.done++
	s.pmu.Unlock()
	select { // deletes that failed on the old set go to the new one now
	case s.gcKick <- struct{}{}:
	default:
	}
	s.log.Info("repair done", "kind", j.kind, "volume", vid, "servers", next.Servers, "gen", gen, "took", time.Since(j.started))
	return nil
}
