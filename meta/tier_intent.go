package meta

import (
	"context"
	"encoding/binary"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Move intents: what makes a move that meta crashed in the middle of
// reclaimable. Before the mover writes the next copy it has recorded every
// copy written so far in the file's intent (t/i/{ino}, one TierIntent):
// after each needle it writes, it proposes TierIntentCommand naming it.
// The move's switch, or its abort, removes the intent in the same batch
// (copies the switch did not take become garbage). An intent that nothing
// removes was left by a mover that died: the leader, once a second, turns
// the copies of every intent not updated for tierIntentGrace and not its
// own move in progress into garbage (TierReleaseIntentsCommand).
//
// A switch takes its copies only while the intent still names them all:
// a mover that lost the lead and got it back, after another leader had
// released its intent, finds its copies gone to the collector and voids
// its move instead of pointing the file at them.
//
// What a crash can still cost is the needle written between the data
// server's acknowledgement and the commit of the intent that names it:
// at most one per move in flight, one extent's bytes.
//
//	t/i/{ino:8}   metapb.TierIntent

const pTierIntent = "t/i/"

func tierIntentKey(ino uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(pTierIntent), ino)
}

// tierIntentGrace is how long an intent must have gone without a new copy
// before the leader releases it: longer than a mover takes to copy one
// extent, so that a deposed leader's mover that is still copying finds
// its intent gone only when it would have failed anyway.
func (s *Service) tierIntentGrace() time.Duration {
	return max(2*s.cfg.TierInterval, time.Second)
}

// tierNoteCopy records copy e of the move of file ino in its intent.
func (s *Service) tierNoteCopy(ino uint64, e *metapb.Extent) error {
	_, err := s.propose(&metapb.Command{Op: &metapb.Command_TierIntent{TierIntent: &metapb.TierIntentCommand{
		Ino: ino, To: []*metapb.Extent{{Volume: e.Volume, Key: e.Key}}}}})
	return err
}

// releaseIntents releases the intents not updated since now-grace that no
// move of this meta has in progress.
func (s *Service) releaseIntents(now time.Time) error {
	before := now.Add(-s.tierIntentGrace()).UnixNano()
	v, err := s.readView()
	if err != nil {
		return err
	}
	it, err := v.newIter([]byte(pTierIntent), prefixEnd([]byte(pTierIntent)))
	if err != nil {
		v.close()
		return err
	}
	var inos []uint64
	s.tier.mu.Lock()
	for it.First(); it.Valid() && len(inos) < gcBatch; it.Next() {
		in := &metapb.TierIntent{}
		if err := proto.Unmarshal(it.Value(), in); err != nil {
			continue
		}
		if _, mine := s.tier.moving[in.Ino]; mine || in.UpdatedNs >= before {
			continue
		}
		inos = append(inos, in.Ino)
	}
	s.tier.mu.Unlock()
	err = it.Error()
	it.Close()
	v.close()
	if err != nil || len(inos) == 0 {
		return err
	}
	_, err = s.propose(&metapb.Command{Op: &metapb.Command_TierReleaseIntents{
		TierReleaseIntents: &metapb.TierReleaseIntentsCommand{Inos: inos, BeforeNs: before}}})
	if err == nil {
		s.tier.mu.Lock()
		s.tier.leftovers += uint64(len(inos))
		s.tier.mu.Unlock()
		s.tier.m.leftovers.Add(float64(len(inos)))
		s.log.Info("tiering: released the copies of moves left unfinished", "files", len(inos))
	}
	return err
}

// tierIntents counts the open intents.
func (s *Service) tierIntents() (uint64, error) {
	v, err := s.readView()
	if err != nil {
		return 0, err
	}
	defer v.close()
	it, err := v.newIter([]byte(pTierIntent), prefixEnd([]byte(pTierIntent)))
	if err != nil {
		return 0, err
	}
	defer it.Close()
	var n uint64
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n, it.Error()
}

// TierNoteReads records reads a client served from its own cache (the
// gateway's hot cache, the client library's metadata cache, a mount):
// they count for tiering as a Resolve does (noteRead).
func (s *Service) TierNoteReads(ctx context.Context, req *metapb.TierReadsRequest) (*metapb.Empty, error) {
	if len(req.Inos) > maxBatch {
		return nil, errors.E(errors.Op("meta.TierNoteReads"), errors.TooLarge, "more than 10000 files")
	}
	if s.tier.reads == nil {
		return &metapb.Empty{}, nil
	}
	s.tier.mu.Lock()
	s.tier.cachedReads += uint64(len(req.Inos))
	for _, ino := range req.Inos {
		if len(s.tier.reads) >= maxTierReads {
			break
		}
		s.tier.reads[ino] = struct{}{}
	}
	s.tier.mu.Unlock()
	s.tier.m.cachedReads.Add(float64(len(req.Inos)))
	return &metapb.Empty{}, nil
}

// The replicated half.

// tierIntent adds copies to a file's intent.
func (t *txn) tierIntent(c *metapb.TierIntentCommand) error {
	in := &metapb.TierIntent{}
	if _, err := t.v.getProto(tierIntentKey(c.Ino), in); err != nil {
		return err
	}
	in.Ino = c.Ino
	for _, e := range c.To {
		in.To = append(in.To, &metapb.Extent{Volume: e.Volume, Key: e.Key})
	}
	in.UpdatedNs = t.now
	return t.put(tierIntentKey(c.Ino), in)
}

// tierIntentCovers reports whether file ino's intent names every needle
// of exts (a switch may take them: nobody released them).
func (t *txn) tierIntentCovers(ino uint64, exts []*metapb.Extent) (bool, error) {
	in := &metapb.TierIntent{}
	found, err := t.v.getProto(tierIntentKey(ino), in)
	if err != nil || !found {
		return false, err
	}
	have := needlesOf(in.To)
	for _, nd := range distinctNeedles(exts) {
		if !have[nd] {
			return false, nil
		}
	}
	return true, nil
}

// tierEndIntent removes file ino's intent; its needles that keep are not
// in become garbage.
func (t *txn) tierEndIntent(ino uint64, keep map[needle]bool) error {
	in := &metapb.TierIntent{}
	found, err := t.v.getProto(tierIntentKey(ino), in)
	if err != nil || !found {
		return err
	}
	for _, nd := range distinctNeedles(in.To) {
		if keep[nd] {
			continue
		}
		if err := t.b.Set(garbageKey(nd.vol, nd.key), nil, nil); err != nil {
			return err
		}
		t.res.garbage = true
	}
	return t.del(tierIntentKey(ino))
}

// tierReleaseIntents ends the intents of r.Inos not updated since
// r.BeforeNs; their copies become garbage.
func (t *txn) tierReleaseIntents(r *metapb.TierReleaseIntentsCommand) error {
	for _, ino := range r.Inos {
		in := &metapb.TierIntent{}
		found, err := t.v.getProto(tierIntentKey(ino), in)
		if err != nil {
			return err
		}
		if !found || in.UpdatedNs >= r.BeforeNs {
			continue // ended, or a move added a copy since
		}
		if err := t.tierEndIntent(ino, nil); err != nil {
			return err
		}
	}
	return nil
}
