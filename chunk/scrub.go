package chunk

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

// scrubState is the scrub's progress and what reads and the scrub found,
// reported to meta with each heartbeat (DiskHealth).
type scrubState struct {
	needles  atomic.Uint64
	passes   atomic.Uint64
	lastPass atomic.Int64  // unix ns the last complete pass ended
	rate     atomic.Int64  // bytes/s of the pass running
	found    atomic.Uint64 // reads (the scrub's, anyone's) that found a needle corrupt

	repairMu sync.Mutex // held by RepairNeedle

	// Needles found corrupt by a read that are waiting for a repair:
	// queued once however many readers hit them.
	mu      sync.Mutex
	pending map[needleID]bool
	queue   chan needleID
}

type needleID struct {
	vol uint32
	key uint64
}

// scrubber verifies every needle of every volume at least once per
// Config.ScrubPeriod, continuously: each pass is paced to take 90% of the
// period (the bytes on disk over that time), never faster than ScrubRate,
// and the next starts when the period's 90% is up. A pace the cap cannot
// keep is logged: the data then outgrow what the period allows.
func (s *Store) scrubber(ctx context.Context) {
	var th throttle
	span := s.cfg.ScrubPeriod * 9 / 10
	for {
		start := time.Now()
		var bytes int64
		for _, st := range s.VolumeStats() {
			bytes += st.Size
		}
		rate := int64(float64(bytes) / span.Seconds())
		if rate > s.cfg.ScrubRate {
			s.log.Warn("the scrub cannot verify every needle within the scrub period at --scrub-rate",
				"bytes", bytes, "period", s.cfg.ScrubPeriod, "needs_bytes_per_sec", rate, "scrub_rate", s.cfg.ScrubRate)
			rate = s.cfg.ScrubRate
		}
		rate = max(rate, 64<<10) // a store that grows during the pass is not crawled through
		s.scrub.rate.Store(rate)
		checked, bad := s.scrubPass(ctx, &th, rate)
		if ctx.Err() != nil {
			return
		}
		s.scrub.passes.Add(1)
		s.scrub.lastPass.Store(time.Now().UnixNano())
		if bad > 0 || checked > 0 {
			s.log.Info("scrub pass done", "needles", checked, "corrupt", bad, "took", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(span))):
		}
	}
}

// scrubPass checks every needle once at rate and returns how many it
// checked and how many were corrupt.
func (s *Store) scrubPass(ctx context.Context, th *throttle, rate int64) (checked, bad int) {
	for _, st := range s.VolumeStats() {
		v, err := s.volume("chunk.scrub", st.ID)
		if err != nil {
			continue
		}
		for _, n := range v.Needles() {
			if th.wait(ctx, n.Size, rate) != nil {
				return checked, bad
			}
			_, err := v.ReadTo(n.Key, 0, n.Size, io.Discard)
			checked++
			s.scrub.needles.Add(1)
			if !errors.Is(errors.Corrupt, err) {
				continue
			}
			bad++ // counted by RepairNeedle's own look at it
			if rerr := s.RepairNeedle(ctx, st.ID, n.Key); rerr != nil {
				s.log.Error("could not repair a corrupt needle", "volume", st.ID, "key", n.Key, "err", rerr)
			}
		}
	}
	bad += s.scrubShards() // erasure-coded shards, cell by cell (ec.go)
	return checked, bad
}

// foundCorrupt counts and logs a corrupt needle.
func (s *Store) foundCorrupt(vid uint32, key uint64, err error) {
	s.corrupt.Inc()
	s.scrub.found.Add(1)
	s.log.Error("corrupt needle", "volume", vid, "key", key, "err", err)
}

// repairSoon queues the repair of a needle a read found corrupt: whoever
// read it (a client that asks for the repair itself, or anything reading
// this server directly), this server restores it from a replica.
func (s *Store) repairSoon(vid uint32, key uint64) {
	id := needleID{vid, key}
	s.scrub.mu.Lock()
	defer s.scrub.mu.Unlock()
	if s.scrub.pending[id] || s.scrub.queue == nil {
		return
	}
	select {
	case s.scrub.queue <- id:
		s.scrub.pending[id] = true
	default: // a full queue: the scrub finds the rest
	}
}

// repairer restores the needles repairSoon queued, one at a time.
func (s *Store) repairer(ctx context.Context) {
	for {
		var id needleID
		select {
		case <-ctx.Done():
			return
		case id = <-s.scrub.queue:
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := s.RepairNeedle(rctx, id.vol, id.key); err != nil {
			s.log.Error("could not repair a corrupt needle", "volume", id.vol, "key", id.key, "err", err)
		}
		cancel()
		s.scrub.mu.Lock()
		delete(s.scrub.pending, id)
		s.scrub.mu.Unlock()
	}
}

// DiskHealth is what heartbeats report of the disk: the scrub's progress,
// the damage found and repaired, the volumes a disk fault took out of the
// write path.
func (s *Store) DiskHealth() *metapb.DiskHealth {
	h := &metapb.DiskHealth{
		ScrubNeedles: s.scrub.needles.Load(), ScrubPasses: s.scrub.passes.Load(),
		ScrubLastPassNs: s.scrub.lastPass.Load(), ScrubBytesPerSec: uint64(s.scrub.rate.Load()),
		Corrupt: s.scrub.found.Load(), Repaired: s.repl.repaired.Load(),
	}
	for _, st := range s.VolumeStats() {
		if st.NoSpace {
			h.NoSpaceVolumes++
		}
		if st.Failed {
			h.FailedVolumes++
		}
	}
	return h
}
