package meta

import (
	"context"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"cairn"
	"cairn/errors"
	"cairn/proto/metapb"
)

const gcBatch = 1000

// gcLoop deletes queued garbage needles on the data servers, then drops
// them from the queue. A failure backs off exponentially (to a minute) and
// retries; the queue is durable, so nothing is lost across restarts.
func (s *Service) gcLoop() {
	defer s.wg.Done()
	backoff := time.Duration(0)
	tick := time.NewTicker(s.cfg.GCInterval)
	defer tick.Stop()
	for {
		if backoff > 0 {
			select {
			case <-s.closing:
				return
			case <-time.After(backoff):
			}
		} else {
			select {
			case <-s.closing:
				return
			case <-s.gcKick:
			case <-tick.C:
			}
		}
		if !s.leading() {
			continue // a group's followers leave collection to the leader
		}
		s.gcp.mu.Lock()
		s.gcp.started++
		s.gcp.mu.Unlock()
		more, err := s.collect()
		s.gcp.finish(err == nil && !more)
		switch {
		case err != nil:
			backoff = min(max(2*backoff, 100*time.Millisecond), time.Minute)
			s.log.Warn("garbage collection failed; retrying", "err", err, "in", backoff)
		case more:
			backoff = 0
			select { // come straight back for the rest
			case s.gcKick <- struct{}{}:
			default:
			}
		default:
			backoff = 0
		}
	}
}

// gcPasses counts the collector's passes, so that a caller can wait for a
// pass that began after it (WaitCollected) instead of for a while.
type gcPasses struct {
	mu       sync.Mutex
	started  uint64        // passes begun
	finished uint64        // passes ended; passes run one at a time
	empty    bool          // the last pass ended with the queue empty
	done     chan struct{} // closed when a pass ends, then replaced
}

func (g *gcPasses) finish(empty bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.finished++
	g.empty = empty
	if g.done != nil {
		close(g.done)
		g.done = nil
	}
}

// WaitCollected returns once a garbage collection pass that began after the
// call has ended with the queue empty: every needle queued before the call
// (a deleted file's, say) is then gone from the data servers it could reach.
// Tests wait on it rather than sleeping; a dead server keeps it waiting
// until ctx ends.
func (s *Service) WaitCollected(ctx context.Context) error {
	s.gcp.mu.Lock()
	after := s.gcp.started
	s.gcp.mu.Unlock()
	for {
		s.gcp.mu.Lock()
		if s.gcp.finished > after && s.gcp.empty {
			s.gcp.mu.Unlock()
			return nil
		}
		if s.gcp.done == nil {
			s.gcp.done = make(chan struct{})
		}
		done := s.gcp.done
		s.gcp.mu.Unlock()
		select {
		case s.gcKick <- struct{}{}:
		default:
		}
		select {
		case <-done:
		case <-ctx.Done():
			return errors.E(errors.Op("meta.WaitCollected"), errors.Canceled, ctx.Err())
		}
	}
}

// collect deletes up to gcBatch queued needles. It reports whether more
// remain. Needles that were deleted are dropped from the queue even when
// others failed, so a dead server does not hold back the rest.
func (s *Service) collect() (more bool, err error) {
	if s.cfg.Chunks == nil {
		return false, nil
	}
	v, err := s.readView()
	if err != nil {
		return false, err
	}
	it, err := v.newIter([]byte{pGarbage, '/'}, []byte{pGarbage, '/' + 1})
	if err != nil {
		v.close()
		return false, err
	}
	var todo []needle
	for it.First(); it.Valid() && len(todo) < gcBatch; it.Next() {
		if vol, key, ok := parseGarbageKey(it.Key()); ok {
			todo = append(todo, needle{vol, key})
		}
	}
	more = it.Valid()
	it.Close()
	v.close()
	if len(todo) == 0 {
		return false, nil
	}
	// Only durable garbage is deleted. A lone meta's batch is visible
	// (to the view above) once applied, before its log sync is done
	// (proposeWait): a commit whose sync a crash cut short is not in the
	// store after the restart, so the needles it released still belong to
	// the file as it was. Syncing the log now covers every batch the view
	// saw (the log is written in order). A group's commands are in the
	// synced Raft log before they apply, and its store writes no log.
	if s.group == nil {
		if err := s.db.LogData(nil, pebble.Sync); err != nil {
			return false, errors.E(errors.Op("meta.gc"), diskKind(err), err)
		}
	}

	ctx, cancel := context.WithTimeout(s.dataCtx(context.Background()), time.Minute)
	defer cancel()
	go func() { // Close must not wait a minute for a dead server
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	clients := map[string]cairn.Chunks{}
	failed := map[string]bool{} // a server that failed once is skipped for the rest of the batch
	done := &metapb.GarbageDone{}
	var firstErr error
	for _, nd := range todo {
		// Per needle, no repair switches the volume's replica set between
		// reading it and deleting on it (see repair).
		s.cl.gcMu.Lock()
		s.pmu.Lock()
		vol := s.volumes[nd.vol]
		s.pmu.Unlock()
		ok := true
		if vol != nil {
			for _, addr := range gcTargets(vol) {
				if failed[addr] {
					ok = false
					continue
				}
				c := clients[addr]
				if c == nil {
					c = s.cfg.Chunks(addr)
					clients[addr] = c
				}
				// A server cut off would hold the collector (and repairs
				// waiting on gcMu) for as long as the call may last.
				dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
				err := c.Delete(dctx, nd.vol, vol.Generation, nd.key)
				dcancel()
				if err != nil && !errors.Is(errors.NotExist, err) {
					ok = false
					failed[addr] = true
					if firstErr == nil {
						firstErr = errors.E(errors.Op("meta.gc"), errors.Path(addr), err)
					}
				}
			}
		} // an unknown volume holds nothing to delete
		s.cl.gcMu.Unlock()
		if ok {
			done.Needles = append(done.Needles, &metapb.Needle{Volume: nd.vol, Key: nd.key})
		}
	}
	if len(done.Needles) > 0 {
		if _, err := s.propose(&metapb.Command{Op: &metapb.Command_GarbageDone{GarbageDone: done}}); err != nil {
			return false, err
		}
	}
	return more, firstErr
}
