package meta

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"cairn"
	"cairn/ec"
	"cairn/errors"
	"cairn/proto/metapb"
)

// Erasure coding, driven by meta (tiers). A volume of an ec class is
// written replicated like any other; once it is sealed (full, read-only)
// ecLoop has the server holding its primary replica encode it into K+M
// shards on K+M distinct servers (spread over zones and racks as replicas
// are), and only after every shard is durable on its server records the
// shards in the volume (PutVolume: ec set, servers emptied). The old
// replicas are then not the volume's, and their servers drop them at
// their next heartbeat: copy, then switch. A crash before the record
// leaves the replicas in charge and the loop encodes again; shard files
// of the lost attempt are overwritten.
//
// The same loop rebuilds lost shards: a shard whose server is dead, or
// alive but no longer reporting it (a lost disk, a shard scrub found
// damaged), is rebuilt on a server holding no other shard of the volume
// from any K others. Volumes with the fewest surviving shards go first.

// ecState is meta's soft state of erasure coding; guarded by its mu.
type ecState struct {
	mu        sync.Mutex
	encoded   uint64 // volumes encoded since start
	rebuilt   uint64 // shards rebuilt since start
	compacted uint64 // volumes compacted since start
	running   string // the job in progress, for status
	job       *ecJob // the job in progress: its target's shard is not stale
	// changed is when meta last recorded a volume's shards: a server's
	// report older than that says nothing about a shard it just got.
	changed map[uint32]time.Time
	kick    chan struct{}
	m       ecMetrics
}

type ecMetrics struct {
	encoded, encodedBytes, rebuilt, rebuiltBytes, compacted, compactedBytes prometheus.Counter
}

// ecCompactRatio is the share of an encoded volume's data bytes deleted
// at which meta has it compacted (encoded again without them); at least
// ecCompactMin bytes, so that a small volume is not re-encoded for a few
// deletes.
const (
	ecCompactRatio = 0.3
	ecCompactMin   = 1 << 20
)

// ecCompacter is what a data server offers for compaction of an encoded
// volume (chunk/ec_compact.go).
type ecCompacter interface {
	CompactEC(ctx context.Context, vid uint32, gen uint64, to []string) (int64, error)
	SwitchEC(ctx context.Context, vid uint32, gen uint64) error
}

func ecCounter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "ec", Name: name, Help: help})
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if ex, ok := are.ExistingCollector.(prometheus.Counter); ok {
				return ex
			}
		}
	}
	return c
}

func (s *Service) ecStart() {
	s.ec.changed = map[uint32]time.Time{}
	s.ec.kick = make(chan struct{}, 1)
	reg := s.cfg.Registerer
	s.ec.m = ecMetrics{
		encoded:      ecCounter(reg, "volumes_encoded_total", "Sealed volumes erasure-coded into shards."),
		encodedBytes: ecCounter(reg, "encoded_bytes_total", "Bytes of volumes erasure-coded."),
		rebuilt:      ecCounter(reg, "shards_rebuilt_total", "Lost shards rebuilt."),
		rebuiltBytes: ecCounter(reg, "rebuilt_bytes_total", "Bytes of shard files rebuilt."),
		compacted:    ecCounter(reg, "volumes_compacted_total", "Erasure-coded volumes encoded again without their deleted needles."),
		compactedBytes: ecCounter(reg, "compacted_freed_bytes_total",
			"Bytes of encoded volumes given back by compaction."),
	}
	s.wg.Add(1)
	go s.ecLoop()
}

// ecJob is one encode (idx encodeJob), one compaction (idx compactJob)
// or one shard rebuild (idx the shard).
type ecJob struct {
	vol       *metapb.Volume
	class     Class
	idx       int
	surviving int
	to        []*dataServer // encode: K+M servers; rebuild: one; compaction: the one that compacts
}

const (
	encodeJob  = -1
	compactJob = -2
)

func (s *Service) ecLoop() {
	defer s.wg.Done()
	s.background(s.ec.kick, func(ctx context.Context) bool {
		j := s.nextEC(time.Now())
		if j == nil {
			return false
		}
		if err := s.runEC(s.dataCtx(ctx), j); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("erasure coding job failed; will retry", "volume", j.vol.Id, "shard", j.idx, "err", err)
			}
			return false
		}
		return true
	})
}

// background calls step every second and when kick fires, again at once
// while it reports more work done, until the service closes; on a member
// of a meta group only while it leads.
func (s *Service) background(kick <-chan struct{}, step func(ctx context.Context) bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-tick.C:
		case <-kick:
		}
		for ctx.Err() == nil && s.leading() && step(ctx) { // followers leave the work to the leader
		}
	}
}

// shardMissing reports whether shard i of v is lost: its server dead, or
// alive and reporting its shards (since the volume's shards last changed)
// without this one. Called with pmu.
func (s *Service) shardMissing(v *metapb.Volume, i int, now time.Time) bool {
	e := v.Ec
	if i >= len(e.ShardServerIds) || e.ShardServerIds[i] == "" {
		return true
	}
	id := e.ShardServerIds[i]
	if s.dead(id, now) {
		return true
	}
	d := s.servers[id]
	if d == nil {
		return false // not heard from yet since meta started: wait
	}
	s.ec.mu.Lock()
	changed := s.ec.changed[v.Id]
	s.ec.mu.Unlock()
	if !d.shardsAt.After(changed) || d.shardsAt.UnixNano() <= e.EncodedNs {
		return false
	}
	for _, st := range d.shards {
		if st.Volume == v.Id && int(st.Index) == i {
			return false
		}
	}
	return true
}

// nextEC plans the most urgent job: a rebuild of the volume with the
// fewest surviving shards, else an encode of a sealed volume.
func (s *Service) nextEC(now time.Time) *ecJob {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	var rebuilds []*ecJob
	for _, v := range s.volumes {
		if v.Ec == nil {
			continue
		}
		n := int(v.Ec.K + v.Ec.M)
		var missing []int
		for i := range n {
			if s.shardMissing(v, i, now) {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 || n-len(missing) < int(v.Ec.K) {
			continue // whole, or lost (status shows it)
		}
		cl, _ := s.class(v.StorageClass)
		rebuilds = append(rebuilds, &ecJob{vol: v, class: cl, idx: missing[0], surviving: n - len(missing)})
	}
	slices.SortFunc(rebuilds, func(a, b *ecJob) int {
		return cmp.Or(cmp.Compare(a.surviving, b.surviving), cmp.Compare(a.vol.Id, b.vol.Id))
	})
	for _, j := range rebuilds {
		// A server holding no other shard of the volume; the shard's own
		// server if it is alive (it lost the file).
		var others []string
		var with []*dataServer
		for i, id := range j.vol.Ec.ShardServerIds {
			if i != j.idx && id != "" {
				others = append(others, id)
				if d := s.servers[id]; d != nil {
					with = append(with, d)
				}
			}
		}
		to := s.choose(1, s.classCandidates(j.class, s.placementCandidates(now, others)), with)
		if len(to) == 1 {
			j.to = to
			return j
		}
	}
	for _, v := range s.volumes {
		if v.Ec != nil || !v.ReadOnly || len(v.Servers) == 0 || v.StorageClass == "" {
			continue
		}
		cl, err := s.class(v.StorageClass)
		if err != nil || !cl.EC() {
			continue
		}
		if d := s.servers[v.ServerIds[0]]; d == nil || !s.alive(d, now) {
			continue // the primary encodes; wait for it (or its repair)
		}
		if s.cl.repairs[v.Id] != nil {
			continue
		}
		to := s.choose(cl.K+cl.M, s.classCandidates(cl, s.placementCandidates(now, nil)), nil)
		if len(to) < cl.K+cl.M {
			continue // too few servers: the volume stays replicated
		}
		return &ecJob{vol: proto.Clone(v).(*metapb.Volume), class: cl, idx: encodeJob, to: to}
	}
	return s.nextCompaction(now)
}

// nextCompaction is a compaction of an encoded volume with all its shards
// confirmed by their servers and at least ecCompactRatio of its data
// deleted, by the server holding its first shard. Called with pmu.
func (s *Service) nextCompaction(now time.Time) *ecJob {
	for _, v := range s.volumes {
		if v.Ec == nil {
			continue
		}
		whole := true
		for i := range v.Ec.ShardServerIds {
			if !s.shardConfirmed(v, i, now) {
				whole = false
				break
			}
		}
		if !whole {
			continue
		}
		d := s.servers[v.Ec.ShardServerIds[0]]
		var dead, live uint64
		for _, st := range d.shards {
			if st.Volume == v.Id {
				dead, live = st.DeadBytes, st.LiveBytes
				break
			}
		}
		if dead < ecCompactMin || float64(dead) < ecCompactRatio*float64(dead+live) {
			continue
		}
		return &ecJob{vol: proto.Clone(v).(*metapb.Volume), idx: compactJob, to: []*dataServer{d}}
	}
	return nil
}

func (s *Service) runEC(ctx context.Context, j *ecJob) error {
	s.ec.mu.Lock()
	s.ec.job = j
	s.ec.mu.Unlock()
	defer func() {
		s.ec.mu.Lock()
		s.ec.job = nil
		s.ec.mu.Unlock()
	}()
	switch j.idx {
	case encodeJob:
		return s.encode(ctx, j)
	case compactJob:
		return s.compactEC(ctx, j)
	}
	return s.rebuildShard(ctx, j)
}

// compactEC has a shard server encode the volume's live needles again
// into a staged generation on the same servers, records the volume at
// that generation (its new size), and then has every shard server switch
// to the staged set; one that misses the call switches at its next
// heartbeat, whose answer names the volume at the new generation.
func (s *Service) compactEC(ctx context.Context, j *ecJob) error {
	const op = errors.Op("meta.compactEC")
	v := j.vol
	src, ok := s.cfg.Chunks(j.to[0].addr).(ecCompacter)
	if !ok {
		return errors.E(op, errors.Invalid, "the data plane cannot compact erasure-coded volumes")
	}
	gen := v.Generation + 1
	s.setRunning(fmt.Sprintf("compact volume %d (generation %d) on %s", v.Id, gen, j.to[0].addr))
	defer s.setRunning("")
	start := time.Now()
	// Deletes wait, as for an encode: one that reached the shards after
	// the live set was taken would be lost to the new one.
	s.cl.gcMu.Lock()
	defer s.cl.gcMu.Unlock()
	size, err := src.CompactEC(ctx, v.Id, gen, v.Ec.ShardServers)
	if err != nil {
		return errors.E(op, errors.Path(j.to[0].addr), err)
	}
	s.pmu.Lock()
	cur := s.volumes[v.Id]
	s.pmu.Unlock()
	if cur == nil || cur.Ec == nil || cur.Generation != v.Generation || !slices.Equal(cur.Ec.ShardServerIds, v.Ec.ShardServerIds) {
		// A shard moved meanwhile: the staged set is not where the
		// volume's shards are. The next attempt starts over.
		return errors.E(op, errors.Stale, fmt.Sprintf("volume %d changed while it was compacted", v.Id))
	}
	next := proto.Clone(cur).(*metapb.Volume)
	next.Generation = gen
	next.Ec.Size = uint64(size)
	next.Ec.EncodedNs = time.Now().UnixNano()
	before := int64(v.Ec.Size)
	if err := s.recordShards(next, &s.ec.compacted, s.ec.m.compacted, s.ec.m.compactedBytes, max(0, before-size)); err != nil {
		return err
	}
	for _, addr := range next.Ec.ShardServers {
		if sw, ok := s.cfg.Chunks(addr).(ecCompacter); ok {
			if err := sw.SwitchEC(ctx, v.Id, gen); err != nil {
				s.log.Warn("shard server did not switch to the compacted volume yet; its heartbeat will", "volume", v.Id, "server", addr, "err", err)
			}
		}
	}
	s.log.Info("erasure-coded volume compacted", "volume", v.Id, "generation", gen, "bytes_before", before, "bytes_after", size, "took", time.Since(start))
	return nil
}

// encode has the volume's primary encode it, then records the shards.
func (s *Service) encode(ctx context.Context, j *ecJob) error {
	const op = errors.Op("meta.encode")
	v := j.vol
	src, ok := s.cfg.Chunks(v.Servers[0]).(cairn.Shards)
	if !ok {
		return errors.E(op, errors.Invalid, "the data plane cannot erasure-code")
	}
	addrs := make([]string, len(j.to))
	ids := make([]string, len(j.to))
	for i, d := range j.to {
		addrs[i], ids[i] = d.addr, d.id
	}
	s.setRunning(fmt.Sprintf("encode volume %d (%d+%d) from %s", v.Id, j.class.K, j.class.M, v.Servers[0]))
	defer s.setRunning("")
	start := time.Now()
	// Deletes wait: one that reached the replicas after the index was
	// taken would be lost to the shards (garbage kept, never wrong data).
	s.cl.gcMu.Lock()
	defer s.cl.gcMu.Unlock()
	size, err := src.EncodeVolume(ctx, v.Id, v.Generation, j.class.K, j.class.M, s.cfg.ECCell, addrs)
	if err != nil {
		return errors.E(op, errors.Path(v.Servers[0]), err)
	}
	s.pmu.Lock()
	cur := s.volumes[v.Id]
	s.pmu.Unlock()
	if cur == nil || cur.Ec != nil || cur.Generation != v.Generation {
		// The repair loop moved a replica since this was planned: the
		// record below would be made from a stale one. gcMu, held, keeps
		// it from moving again until the record; the next plan starts
		// from the volume as it is now.
		return errors.E(op, errors.Stale, errors.Path(fmt.Sprint(v.Id)), "volume changed while it was encoded")
	}
	next := proto.Clone(cur).(*metapb.Volume)
	next.Generation++
	next.ReadOnly = true
	next.Servers, next.ServerIds = nil, nil
	next.Size, next.Garbage = 0, 0
	next.Ec = &metapb.EcVolume{K: uint32(j.class.K), M: uint32(j.class.M), Cell: uint64(s.cfg.ECCell), Size: uint64(size),
		ShardServers: addrs, ShardServerIds: ids, EncodedNs: time.Now().UnixNano()}
	if err := s.recordShards(next, &s.ec.encoded, s.ec.m.encoded, s.ec.m.encodedBytes, size); err != nil {
		return err
	}
	s.log.Info("volume erasure-coded; its replicas will be dropped", "volume", v.Id, "class", j.class.Name,
		"bytes", size, "took", time.Since(start), "shards", addrs)
	return nil
}

// rebuildShard has the chosen server rebuild the lost shard, then records it.
func (s *Service) rebuildShard(ctx context.Context, j *ecJob) error {
	const op = errors.Op("meta.rebuildShard")
	v := j.vol
	to := j.to[0]
	dst, ok := s.cfg.Chunks(to.addr).(cairn.Shards)
	if !ok {
		return errors.E(op, errors.Invalid, "the data plane cannot erasure-code")
	}
	now := time.Now()
	servers := make([]string, len(v.Ec.ShardServers))
	s.pmu.Lock()
	for i, addr := range v.Ec.ShardServers {
		if i != j.idx && !s.shardMissing(v, i, now) {
			servers[i] = addr
		}
	}
	s.pmu.Unlock()
	l := ec.Layout{K: int(v.Ec.K), M: int(v.Ec.M), Cell: int64(v.Ec.Cell), Size: int64(v.Ec.Size)}
	s.setRunning(fmt.Sprintf("rebuild shard %d of volume %d on %s", j.idx, v.Id, to.addr))
	defer s.setRunning("")
	start := time.Now()
	if err := dst.RebuildShard(ctx, v.Id, j.idx, l, servers); err != nil {
		return errors.E(op, errors.Path(to.addr), err)
	}
	s.pmu.Lock()
	next := proto.Clone(s.volumes[v.Id]).(*metapb.Volume)
	s.pmu.Unlock()
	next.Ec.ShardServers[j.idx], next.Ec.ShardServerIds[j.idx] = to.addr, to.id
	if err := s.recordShards(next, &s.ec.rebuilt, s.ec.m.rebuilt, s.ec.m.rebuiltBytes, l.FileSize()); err != nil {
		return err
	}
	s.log.Info("shard rebuilt", "volume", v.Id, "shard", j.idx, "on", to.addr, "surviving_before", j.surviving, "took", time.Since(start))
	return nil
}

// recordShards records a volume whose shards changed and counts the job.
func (s *Service) recordShards(next *metapb.Volume, count *uint64, jobs, bytes prometheus.Counter, n int64) error {
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutVolume{PutVolume: next}}); err != nil {
		return err
	}
	s.ec.mu.Lock()
	*count++
	s.ec.changed[next.Id] = time.Now()
	s.ec.mu.Unlock()
	jobs.Inc()
	bytes.Add(float64(n))
	return nil
}

func (s *Service) setRunning(what string) {
	s.ec.mu.Lock()
	s.ec.running = what
	s.ec.mu.Unlock()
}

// ecStatus fills in an ec volume's line of ClusterStatus: per shard ok,
// missing (its server dead or without it) or rebuilding. Called with pmu.
func (s *Service) ecStatus(cv *metapb.ClusterVolume, v *metapb.Volume, now time.Time) {
	if v.Ec == nil {
		return
	}
	n := int(v.Ec.K + v.Ec.M)
	live := 0
	cv.ShardHealth = make([]string, n)
	for i := range n {
		if s.shardMissing(v, i, now) {
			cv.ShardHealth[i] = "missing"
			continue
		}
		cv.ShardHealth[i] = "ok"
		live++
	}
	cv.Live = uint32(live)
	switch {
	case live == n:
		cv.Health = "ok"
	case live >= int(v.Ec.K):
		cv.Health = "degraded"
	default:
		cv.Health = "lost"
	}
}

// ecStatusTotals fills in the cluster-wide erasure-coding figures.
func (s *Service) ecStatusTotals(out *metapb.ClusterStatusResponse) {
	out.Classes = s.classList()
	s.ec.mu.Lock()
	out.EcEncoded, out.EcRebuilt = s.ec.encoded, s.ec.rebuilt
	s.ec.mu.Unlock()
}

// ecVolumesOf is the ec volumes with a shard on server id, for its
// heartbeat answer. Called with pmu.
func (s *Service) ecVolumesOf(id string) []*metapb.Volume {
	var out []*metapb.Volume
	for _, v := range s.volumes {
		if v.Ec != nil && slices.Contains(v.Ec.ShardServerIds, id) {
			out = append(out, v)
		}
	}
	return out
}

// gcTargets is where a needle of vol is deleted: its replicas, or every
// server holding a shard (each keeps the needle index).
func gcTargets(vol *metapb.Volume) []string {
	if vol.Ec == nil {
		return vol.Servers
	}
	var out []string
	for _, a := range vol.Ec.ShardServers {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// shardConfirmed reports whether shard i of v is on the server meta
// records for it by that server's own word: alive, and listing the shard
// in a report made after the volume's shards last changed. Called with
// pmu.
func (s *Service) shardConfirmed(v *metapb.Volume, i int, now time.Time) bool {
	e := v.Ec
	if i >= len(e.ShardServerIds) || e.ShardServerIds[i] == "" {
		return false
	}
	d := s.servers[e.ShardServerIds[i]]
	if d == nil || s.dead(d.id, now) {
		return false
	}
	s.ec.mu.Lock()
	changed := s.ec.changed[v.Id]
	s.ec.mu.Unlock()
	if !d.shardsAt.After(changed) || d.shardsAt.UnixNano() <= e.EncodedNs {
		return false
	}
	for _, st := range d.shards {
		if st.Volume == v.Id && int(st.Index) == i {
			return true
		}
	}
	return false
}

// ecStaleShards are the shards server id reported that meta records on
// another server which has confirmed it holds them: copies left behind
// when a shard was rebuilt elsewhere while id was away (dead, cut off,
// or the shard reported missing). Shards of volumes meta does not record
// as encoded are left alone (an encode in flight, or a volume meta does
// not know), and so is the shard a rebuild in progress is making on id.
// Called with pmu.
func (s *Service) ecStaleShards(id string, now time.Time) []*metapb.ShardStat {
	d := s.servers[id]
	if d == nil {
		return nil
	}
	s.ec.mu.Lock()
	job := s.ec.job
	s.ec.mu.Unlock()
	var out []*metapb.ShardStat
	for _, st := range d.shards {
		v := s.volumes[st.Volume]
		i := int(st.Index)
		if v == nil || v.Ec == nil || i >= len(v.Ec.ShardServerIds) {
			continue
		}
		if holder := v.Ec.ShardServerIds[i]; holder == "" || holder == id {
			continue
		}
		if job != nil && job.idx == i && job.vol.Id == v.Id && len(job.to) == 1 && job.to[0].id == id {
			continue
		}
		if !s.shardConfirmed(v, i, now) {
			continue // the only copy may be this one: keep it until the new one is known
		}
		out = append(out, &metapb.ShardStat{Volume: st.Volume, Index: st.Index})
	}
	return out
}
