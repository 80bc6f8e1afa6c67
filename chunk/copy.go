package chunk

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"cairn/errors"
	"cairn/volume"
)

// Needles lists the live needles of volume vid, in key order.
func (s *Store) Needles(ctx context.Context, vid uint32) ([]volume.NeedleInfo, error) {
	const op errors.Op = "chunk.Needles"
	if err := s.serving(op); err != nil {
		return nil, err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		return nil, err
	}
	return v.Needles(), nil
}

// CopyFrom makes this server's copy of vid equal to the one at from; see
// cairn.Replicas. A copy here at an older generation is a leftover of an
// earlier placement and is replaced, not merged: it may hold needles the
// source deleted long ago.
func (s *Store) CopyFrom(ctx context.Context, vid uint32, gen uint64, from string, rate int64) (err error) {
	const op errors.Op = "chunk.CopyFrom"
	done := s.ops.Start("copy")
	defer func() { done(err) }()
	src := s.peer(from)
	want, err := src.Needles(ctx, vid)
	if err != nil {
		return errors.E(op, errors.Path(from), err)
	}
	if v, err := s.volume(op, vid); err == nil && v.Gen() < gen {
		if err := s.dropVolume(vid); err != nil {
			return errors.E(op, err)
		}
	}
	if err := s.CreateVolume(ctx, vid, gen); err != nil {
		return errors.E(op, err)
	}
	v, err := s.volume(op, vid)
	if err != nil {
		return err
	}
	have := map[uint64]int64{}
	for _, n := range v.Needles() {
		have[n.Key] = n.Size
	}
	var buf bytes.Buffer
	copied := 0
	for _, n := range want {
		if size, ok := have[n.Key]; ok && size == n.Size {
			delete(have, n.Key)
			continue
		}
		delete(have, n.Key)
		if err := s.repl.throttle.wait(ctx, n.Size, rate); err != nil {
			return errors.E(op, errors.Canceled, err)
		}
		buf.Reset()
		if _, err := src.ReadTo(ctx, vid, n.Key, 0, n.Size, &buf); err != nil {
			if errors.Is(errors.NotExist, err) {
				continue // deleted on the source since it listed it
			}
			return errors.E(op, errors.Path(from), err)
		}
		if err := v.Restore(gen, n.Key, buf.Bytes()); err != nil {
			return errors.E(op, err)
		}
		copied++
	}
	// What is left was deleted on the source after an earlier pass.
	for key := range have {
		if err := v.Delete(gen, key); err != nil && !errors.Is(errors.ReadOnly, err) {
			return errors.E(op, err)
		}
	}
	if copied > 0 || len(have) > 0 {
		s.log.Info("volume copied", "volume", vid, "gen", gen, "from", from, "needles", copied, "deleted", len(have))
	}
	return nil
}

// RepairNeedle replaces this server's copy of a needle (found corrupt by a
// reader or the scrub) with a verified copy from another replica.
func (s *Store) RepairNeedle(ctx context.Context, vid uint32, key uint64) (err error) {
	const op errors.Op = "chunk.RepairNeedle"
	done := s.ops.Start("repair")
	defer func() { done(err) }()
	v, err := s.volume(op, vid)
	if err != nil {
		return err
	}
	// One repair at a time: a needle found by the scrub and by a reader at
	// once is restored once, the second finding it intact.
	s.scrub.repairMu.Lock()
	defer s.scrub.repairMu.Unlock()
	s.repl.mu.Lock()
	set := s.repl.sets[vid]
	s.repl.mu.Unlock()
	path := errors.Path(fmt.Sprintf("%d/%d", vid, key))
	// A reader on this host checks blocks itself (local.go) and reports
	// what it found: look before rewriting, and count the damage here.
	if size, err := v.Size(key); err == nil {
		if _, err := s.ReadTo(ctx, vid, key, 0, size, io.Discard); err == nil {
			return nil // intact: nothing to repair
		}
	}
	if set.gen != v.Gen() {
		return errors.E(op, errors.Unavailable, path, "no current replica set to repair from")
	}
	var buf bytes.Buffer
	lastErr := errors.E(op, errors.Unavailable, path, "no other replica")
	for _, addr := range set.addrs {
		if addr == s.cfg.Addr {
			continue
		}
		peer := s.peer(addr)
		size, err := peer.Size(ctx, vid, key)
		if err == nil {
			buf.Reset()
			_, err = peer.ReadTo(ctx, vid, key, 0, size, &buf)
		}
		if err != nil {
			lastErr = errors.E(op, path, errors.Path(addr), err)
			continue
		}
		if err := v.Restore(v.Gen(), key, buf.Bytes()); err != nil {
			return errors.E(op, path, err)
		}
		s.repl.repaired.Add(1)
		s.log.Warn("corrupt needle restored from a replica", "volume", vid, "key", key, "from", addr)
		return nil
	}
	return lastErr
}
