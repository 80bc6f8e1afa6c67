package chunk

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cairn"
	"cairn/errors"
	"cairn/proto/metapb"
)

var _ cairn.Replicas = (*Store)(nil)

// replication is a data server's part of the cluster: the replica set of
// each volume (from meta), the lease that lets it serve, and the copies
// it runs.
type replication struct {
	mu   sync.Mutex
	sets map[uint32]replicaSet

	// leaseUntil is the unix ns until which the server may serve. With a
	// meta configured it is renewed by each heartbeat answer; a server cut
	// off from meta stops serving before meta declares it dead and
	// replaces its copies, so a stale copy is never read or written.
	leaseUntil atomic.Int64
	leaseLen   atomic.Int64  // ns, as meta last granted (0: none yet, or no leases); sets heartbeatPeriod
	ready      chan struct{} // closed at the first lease
	readyOnce  sync.Once

	throttle throttle
	repaired atomic.Uint64 // needles restored from a peer
}

// replicaSet is one volume's replicas at one generation, primary first.
type replicaSet struct {
	gen   uint64
	addrs []string
}

func (r *replication) init(gated bool) {
	r.sets = map[uint32]replicaSet{}
	r.ready = make(chan struct{})
	if !gated {
		r.leaseUntil.Store(math.MaxInt64)
		r.readyOnce.Do(func() { close(r.ready) })
	}
}

// serving refuses every data-plane call while the server holds no lease.
func (s *Store) serving(op errors.Op) error {
	if time.Now().UnixNano() > s.repl.leaseUntil.Load() {
		return errors.E(op, errors.Unavailable, "data server has no lease from meta (starting, or cut off)")
	}
	return nil
}

// Ready is closed once the server may serve: at once without a meta, else
// at the first heartbeat meta answered.
func (s *Store) Ready() <-chan struct{} { return s.repl.ready }

// peers returns the replicas a primary forwards a needle of vid to. A
// standalone server (no meta) that was never given a set has none. In a
// cluster a needle is taken only under the generation of the set meta
// gave: without it the server cannot know whom to forward to, and a needle
// kept here alone would be acknowledged yet lost with this copy (errors.
// Stale sends the writer to another volume). A write to a server that is
// not the volume's primary is refused: only the primary assigns keys.
func (s *Store) peers(op errors.Op, vid uint32, gen uint64) ([]string, error) {
	s.repl.mu.Lock()
	set, ok := s.repl.sets[vid]
	s.repl.mu.Unlock()
	switch {
	case !ok && s.cfg.Meta == nil:
		return nil, nil // standalone: the volume's own generation check decides
	case !ok:
		return nil, errors.E(op, errors.Stale, volPath(vid), "no replica set from meta for this volume")
	case set.gen != gen:
		return nil, errors.E(op, errors.Stale, volPath(vid), fmt.Sprintf("generation %d, the replica set is at %d", gen, set.gen))
	case len(set.addrs) == 0:
		return nil, nil
	}
	if set.addrs[0] != s.cfg.Addr {
		return nil, errors.E(op, errors.Stale, volPath(vid), fmt.Sprintf("not the primary of the volume (%s is)", set.addrs[0]))
	}
	return set.addrs[1:], nil
}

// replicaTimeout bounds one forward of n bytes: long enough for a loaded
// disk's fdatasync, short enough that a replica that stopped answering
// turns into a retry on another volume within about two seconds.
func (s *Store) replicaTimeout(n int) time.Duration {
	return s.cfg.ReplicaTimeout + time.Duration(n)*time.Second/(16<<20)
}

// putReplicated appends data locally and, once the key is known, sends it
// to every replica in parallel with the local fdatasync. It returns the
// key only when every copy is durable. A replica that fails turns the
// volume read-only here (meta learns it from the heartbeat and the writer
// from the error, and writes move to another volume); the error names the
// replica so that the writer can tell meta.
func (s *Store) putReplicated(ctx context.Context, op errors.Op, vid uint32, gen uint64, data []byte, peers []string) (uint64, error) {
	v, err := s.volume(op, vid)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(peers))
	key, err := v.AppendStarted(gen, data, func(key uint64) {
		for i, addr := range peers {
			wg.Go(func() {
				fctx, cancel := context.WithTimeout(ctx, s.replicaTimeout(len(data)))
				defer cancel()
				errs[i] = s.peer(addr).PutKey(fctx, vid, gen, key, data)
			})
		}
	})
	wg.Wait() // data is the caller's (pooled) buffer: no forward may outlive the call
	if err != nil {
		return 0, err
	}
	for i, ferr := range errs {
		if ferr == nil {
			continue
		}
		if errors.Is(errors.Stale, ferr) {
			// The replica is at a newer generation: this copy is the stale one.
			return 0, errors.E(op, errors.Stale, volPath(vid), ferr)
		}
		if errors.Is(errors.ReadOnly, ferr) {
			// Meta turned the volume read-only (full, or being moved) and
			// the replica heard first. Not a failing server: naming it
			// would have the writer report it suspect and keep it out of
			// placement, which a cluster of RF servers cannot afford.
			if rerr := v.SetReadOnly(true); rerr != nil {
				s.log.Error("could not mark volume read-only", "volume", vid, "err", rerr)
			}
			return 0, errors.E(op, errors.ReadOnly, volPath(vid), ferr)
		}
		if rerr := v.SetReadOnly(true); rerr != nil {
			s.log.Error("could not mark volume read-only after a replica failed", "volume", vid, "err", rerr)
		}
		s.log.Warn("replica failed; volume now read-only", "volume", vid, "replica", peers[i], "err", ferr)
		return 0, errors.E(op, errors.Unavailable, errors.Path(peers[i]), fmt.Errorf("replica %s: %w", peers[i], ferr))
	}
	return key, nil
}

// SetReplicas creates volume vid if missing, moves it to generation gen,
// and records its replica set; see cairn.Replicas.
func (s *Store) SetReplicas(ctx context.Context, vid uint32, gen uint64, addrs []string) error {
	const op errors.Op = "chunk.SetReplicas"
	if err := s.CreateVolume(ctx, vid, gen); err != nil {
		return errors.E(op, err)
	}
	s.repl.mu.Lock()
	s.repl.sets[vid] = replicaSet{gen: gen, addrs: slices.Clone(addrs)}
	s.repl.mu.Unlock()
	return nil
}

// Seal seals this server's copy of vid at generation gen (volume.Seal);
// see cairn.Replicas.
func (s *Store) Seal(ctx context.Context, vid uint32, gen uint64) (err error) {
	const op errors.Op = "chunk.Seal"
	done := s.ops.Start("seal")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		return err
	}
	if v.Gen() != gen {
		return errors.Errorf(op, errors.Stale, "volume %d is at generation %d, not %d", vid, v.Gen(), gen)
	}
	if err := v.Seal(); err != nil {
		return errors.E(op, err)
	}
	return nil
}

// heartbeatAnswer applies what meta said: the lease (counted from when the
// heartbeat was sent, so it ends before meta's own deadline), the replica
// sets, generations and read-only marks of the volumes placed here, the
// stale copies to drop, and the cluster's volume size limit.
func (s *Store) heartbeatAnswer(sent time.Time, resp *metapb.HeartbeatResponse) {
	s.setMaxVolumeSize(int64(resp.MaxVolumeSize))
	s.setCapKeys(resp.CapKeys)
	s.setRevoked(resp.Revoked)
	s.ecHeartbeat(resp.EcVolumes)
	s.ecDropShards(resp.EcDrop)
	sets := map[uint32]replicaSet{}
	for _, v := range resp.Volumes {
		sets[v.Id] = replicaSet{gen: v.Generation, addrs: slices.Clone(v.Servers)}
		local, err := s.volume("chunk.heartbeat", v.Id)
		if err != nil {
			continue
		}
		if local.Gen() < v.Generation {
			// Meta moved the volume on while this server was away; its copy
			// is complete (a write it missed was never acknowledged), so it
			// catches up by taking the new generation.
			if err := local.SetGen(v.Generation); err != nil {
				s.log.Error("could not take a volume's new generation", "volume", v.Id, "err", err)
			}
		}
		if v.ReadOnly && !local.Stats().ReadOnly {
			local.SetReadOnly(true)
		}
	}
	s.repl.mu.Lock()
	for vid, set := range s.repl.sets {
		// Meta calls SetReplicas before its heartbeat answers carry the set
		// (a new volume is recorded once every server has it; a repair
		// records the next generation, then tells the servers), so this
		// answer may have been computed before a set this server already
		// holds: it lacks the volume, or has it at an older generation.
		// Forgetting the set would have the primary keep new needles to
		// itself. Meta moves a volume to other servers only at a higher
		// generation, so the newer set stands (a creation meta retried on
		// other servers is told by SetReplicas again, at the next one); a
		// copy meta drops loses its set with it.
		if cur, ok := sets[vid]; ok && cur.gen >= set.gen || slices.Contains(resp.Drop, vid) {
			continue
		}
		if _, err := s.volume("chunk.heartbeat", vid); err == nil {
			sets[vid] = set
		}
	}
	s.repl.sets = sets
	s.repl.mu.Unlock()
	for _, vid := range resp.Drop {
		if err := s.dropVolume(vid); err != nil {
			s.log.Error("could not drop a stale volume", "volume", vid, "err", err)
		}
	}
	s.repl.leaseLen.Store(resp.LeaseNs)
	if resp.LeaseNs > 0 {
		s.repl.leaseUntil.Store(sent.UnixNano() + resp.LeaseNs)
	} else {
		s.repl.leaseUntil.Store(math.MaxInt64) // a meta without leases
	}
	s.repl.readyOnce.Do(func() { close(s.repl.ready) })
}

// dropVolume deletes a stale copy: meta placed the volume elsewhere while
// this server was away, so what it holds may lack deletes and must never
// be served. Its space is reclaimed at once.
func (s *Store) dropVolume(vid uint32) error {
	s.mu.Lock()
	v, ok := s.vols[vid]
	if ok {
		delete(s.vols, vid)
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	s.log.Info("dropping stale volume copy", "volume", vid, "gen", v.Gen())
	return v.Remove()
}

// throttle spaces out copy traffic to a rate, across every copy the
// server runs.
type throttle struct {
	mu   sync.Mutex
	next time.Time
}

func (t *throttle) wait(ctx context.Context, n, rate int64) error {
	if rate <= 0 {
		return nil
	}
	t.mu.Lock()
	now := time.Now()
	if t.next.Before(now) {
		t.next = now
	}
	d := t.next.Sub(now)
	t.next = t.next.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	t.mu.Unlock()
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
