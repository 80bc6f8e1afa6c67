package meta

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// membership is meta's view of the data servers beyond their heartbeats:
// what operators decided (drain, durable under s/), which servers writers
// reported failing, and the repairs running. Guarded by Service.pmu,
// except gcMu.
type membership struct {
	started  time.Time
	draining map[string]bool      // server id -> draining (mirrors s/)
	suspect  map[string]time.Time // data-plane address -> suspected until
	repairs  map[uint32]*repairJob
	done     uint64 // repairs finished since start
	rounds   uint64 // repair planning rounds since start (status: a test of "nothing moved" waits for some)
	balance  bool   // a rebalance was asked for (or a server joined)

	// gcMu keeps the garbage collector out while a repair makes its last
	// copy pass and switches the replica set, so that no delete reaches
	// the old set only, after the copy looked. An encode holds it too, so
	// a repair and an encode of one volume record one after the other,
	// each checking that the other has not recorded since it planned.
	gcMu sync.Mutex
	kick chan struct{}
}

func (c *membership) init() {
	c.started = time.Now()
	c.draining = map[string]bool{}
	c.suspect = map[string]time.Time{}
	c.repairs = map[uint32]*repairJob{}
	c.kick = make(chan struct{}, 1)
}

func serverKey(id string) []byte { return append([]byte{pServer, '/'}, id...) }

// loadCluster reads the durable server records.
func (s *Service) loadCluster(v *view) error {
	it, err := v.newIter([]byte{pServer, '/'}, []byte{pServer, '/' + 1})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		st := &metapb.ClusterServerState{}
		if err := proto.Unmarshal(it.Value(), st); err != nil {
			return errors.E(errors.Op("meta.Open"), errors.Corrupt, err)
		}
		s.cl.draining[st.ServerId] = st.Draining
	}
	return it.Error()
}

// serverState is the apply step of a ClusterServerState command.
func (t *txn) serverState(st *metapb.ClusterServerState) error {
	if st.ServerId == "" {
		return errors.E(errors.Invalid, "server id is required")
	}
	t.res.server = st
	if !st.Draining {
		return t.del(serverKey(st.ServerId))
	}
	return t.put(serverKey(st.ServerId), st)
}

// clusterApplied mirrors an applied command's cluster state in memory.
func (s *Service) clusterApplied(res *result) {
	if res.server == nil {
		return
	}
	s.pmu.Lock()
	s.cl.draining[res.server.ServerId] = res.server.Draining
	s.pmu.Unlock()
	s.kickRepair()
}

func (s *Service) kickRepair() {
	select {
	case s.cl.kick <- struct{}{}:
	default:
	}
}

// dead reports whether server id is gone: silent past DeadAfter, or never
// heard from although meta has been up that long (its volumes are known
// from the store; it did not come back after a restart). Called with pmu.
func (s *Service) dead(id string, now time.Time) bool {
	if d := s.servers[id]; d != nil {
		return !s.alive(d, now)
	}
	return s.settled(now)
}

// settled reports whether meta has been up longer than DeadAfter: a server
// heard from for the first time now is a new one, not one coming back
// after meta restarted, and a server never heard from is dead.
func (s *Service) settled(now time.Time) bool {
	return now.Sub(s.cl.started) > s.cfg.DeadAfter
}

// placeable reports whether new replicas may go to d. Called with pmu.
func (s *Service) placeable(d *dataServer, now time.Time) bool {
	return s.alive(d, now) && !s.cl.draining[d.id] && !now.Before(s.cl.suspect[d.addr]) && !diskFull(d)
}

// diskFull reports a server whose disk is full, as of its last heartbeat:
// a volume of it refused a write with ENOSPC, or it has no space left. A
// new volume there would refuse its first write; placement spread (a zone
// with one server) must not send it there.
func diskFull(d *dataServer) bool {
	return d.disk != nil && d.disk.NoSpaceVolumes > 0 || d.capacity > 0 && d.free == 0
}

// markSuspect keeps the servers at addrs out of placement for DeadAfter: a
// writer saw them fail, and a server that really died is silent for a
// while before meta may call it dead. Writes must not wait that long.
func (s *Service) markSuspect(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	until := time.Now().Add(s.cfg.DeadAfter)
	s.pmu.Lock()
	for _, a := range addrs {
		if a != "" && s.cl.suspect[a].Before(until) {
			s.cl.suspect[a] = until
			s.log.Warn("data server reported failing; placement avoids it", "addr", a)
		}
	}
	s.pmu.Unlock()
}

// replicaCounts returns how many volumes each server holds. Called with pmu.
func (s *Service) replicaCounts() map[string]int {
	n := map[string]int{}
	for _, v := range s.volumes {
		for _, id := range v.ServerIds {
			n[id]++
		}
	}
	return n
}

// choose picks n servers from cands for new replicas next to the servers
// in with: each pick prefers a zone, then a rack, that holds fewer of the
// volume's replicas, then the server with fewer volumes, then more free
// space. Fewer than n come back if cands run out. Called with pmu.
func (s *Service) choose(n int, cands, with []*dataServer) []*dataServer {
	counts := s.replicaCounts()
	placed := slices.Clone(with)
	left := slices.Clone(cands)
	var out []*dataServer
	for len(out) < n && len(left) > 0 {
		best := slices.MinFunc(left, func(a, b *dataServer) int {
			sa, sb := spread(a, placed), spread(b, placed)
			return cmp.Or(cmp.Compare(sa[0], sb[0]), cmp.Compare(sa[1], sb[1]), moreFree(a.free, b.free),
				cmp.Compare(counts[a.id], counts[b.id]), cmp.Compare(b.free, a.free), cmp.Compare(a.id, b.id))
		})
		out = append(out, best)
		placed = append(placed, best)
		counts[best.id]++
		left = slices.DeleteFunc(left, func(d *dataServer) bool { return d == best })
	}
	return out
}

// spread counts the replicas in placed that share d's zone, and those
// that share its rack (in the same zone): lower is better spread.
func spread(d *dataServer, placed []*dataServer) [2]int {
	z, r := 0, 0
	for _, p := range placed {
		if zone := d.labels["zone"]; zone != "" && zone == p.labels["zone"] {
			z++
		}
		if rack := d.labels["rack"]; rack != "" && rack == p.labels["rack"] && d.labels["zone"] == p.labels["zone"] {
			r++
		}
	}
	return [2]int{z, r}
}

// moreFree orders by free space when it differs by more than a tenth:
// closer than that (servers sharing a disk, or equal disks) the volume
// count decides, so that replicas spread rather than pile on whichever
// reported a few bytes more.
func moreFree(a, b uint64) int {
	hi, lo := max(a, b), min(a, b)
	if hi-lo <= hi/10 {
		return 0
	}
	return cmp.Compare(b, a)
}

// placementCandidates are the servers new replicas may go to, minus those
// in exclude (ids). Called with pmu.
func (s *Service) placementCandidates(now time.Time, exclude []string) []*dataServer {
	var out []*dataServer
	for _, d := range s.servers {
		if s.placeable(d, now) && !slices.Contains(exclude, d.id) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *dataServer) int { return cmp.Compare(a.id, b.id) })
	return out
}

// heartbeatAnswer is what a data server learns from its heartbeat: its
// volumes with their replica sets, the stale copies it must drop, and its
// lease. Called with pmu.
func (s *Service) heartbeatAnswer(id string, reported []*metapb.VolumeStat) *metapb.HeartbeatResponse {
	resp := &metapb.HeartbeatResponse{
		MaxVolumeSize: s.cfg.MaxVolumeSize,
		// DeadAfter less a tenth, counted by the server from when it sent
		// the heartbeat, and by meta from when it took it (or, on a new
		// leader, from its takeover: raft.go): the server stops serving
		// before meta may call it dead and hand its volumes to others. The
		// tenth covers clock rates and a call that passed the lease check
		// at its last moment; the rest is what a data server rides out a
		// meta failover on (chunk: leaseRenewals).
		LeaseNs: int64(s.cfg.DeadAfter) * 9 / 10,
	}
	for _, v := range s.volumes {
		if slices.Contains(v.ServerIds, id) {
			resp.Volumes = append(resp.Volumes, v)
		}
	}
	resp.EcVolumes = s.ecVolumesOf(id)
	resp.EcDrop = s.ecStaleShards(id, time.Now())
	for _, st := range reported {
		v := s.volumes[st.Id]
		if v == nil || slices.Contains(v.ServerIds, id) {
			continue // unknown to meta (being created): never guess
		}
		if j := s.cl.repairs[st.Id]; j != nil && j.to.id == id {
			continue // the copy in progress
		}
		resp.Drop = append(resp.Drop, st.Id)
	}
	return resp
}
