package meta

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// TierSetPolicy sets a namespace's tiering policy, or with ns "" the
// global one; a policy with no rule, promotion or rate removes it. The
// mover scans with it at once.
func (s *Service) TierSetPolicy(ctx context.Context, p *metapb.TierPolicy) (*metapb.TierPolicy, error) {
	const op = errors.Op("meta.TierSetPolicy")
	if p.Ns != "" {
		if _, err := s.GetNamespace(ctx, &metapb.NamespaceRequest{Name: p.Ns}); err != nil {
			return nil, errors.E(op, err)
		}
	}
	if err := s.validTierPolicy(p); err != nil {
		return nil, errors.E(op, errors.Path(p.Ns), err)
	}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutTierPolicy{PutTierPolicy: p}}); err != nil {
		return nil, err
	}
	s.tier.mu.Lock()
	s.tier.lastScan = time.Time{}
	s.tier.mu.Unlock()
	select {
	case s.tier.kick <- struct{}{}:
	default:
	}
	return p, nil
}

// validTierPolicy checks a policy's classes and bounds.
func (s *Service) validTierPolicy(p *metapb.TierPolicy) error {
	const op = errors.Op("meta.TierSetPolicy")
	if p.Ns != "" && p.Rate != 0 {
		return errors.E(errors.Invalid, "the move rate is set on the global policy only")
	}
	if len(p.Rules) > 64 {
		return errors.E(errors.Invalid, "at most 64 rules")
	}
	for i, r := range p.Rules {
		if r.To == "" {
			return errors.Errorf(op, errors.Invalid, "rule %d: no target class", i+1)
		}
		if _, err := s.class(r.To); err != nil {
			return errors.Errorf(op, errors.Invalid, "rule %d: %v", i+1, err)
		}
		if r.UnreadNs < 0 {
			return errors.Errorf(op, errors.Invalid, "rule %d: negative unread time", i+1)
		}
		if r.MaxSize > 0 && r.MaxSize < r.MinSize {
			return errors.Errorf(op, errors.Invalid, "rule %d: max size below min size", i+1)
		}
		if strings.HasPrefix(r.Prefix, "/") {
			return errors.Errorf(op, errors.Invalid, "rule %d: prefix %q: paths inside a namespace have no leading '/'", i+1, r.Prefix)
		}
	}
	if p.PromoteTo != "" {
		if _, err := s.class(p.PromoteTo); err != nil {
			return errors.Errorf(op, errors.Invalid, "promotion: %v", err)
		}
		if p.PromoteReadNs <= 0 {
			return errors.E(errors.Invalid, "promotion needs a read window (promote_read_ns > 0)")
		}
	} else if p.PromoteReadNs != 0 {
		return errors.E(errors.Invalid, "a read window without a promotion class")
	}
	return nil
}

// TierGetPolicy answers ns's policy (not the global one it may follow),
// or with ns "" every policy, the global one first.
func (s *Service) TierGetPolicy(ctx context.Context, req *metapb.TierPolicyRequest) (*metapb.TierPolicyList, error) {
	pols, err := s.tierPolicies(req.Ns)
	if err != nil {
		return nil, err
	}
	out := &metapb.TierPolicyList{}
	for _, k := range slices.Sorted(maps.Keys(pols)) {
		if req.Ns == "" || k == req.Ns {
			out.Policies = append(out.Policies, pols[k])
		}
	}
	return out, nil
}

// tierPolicies reads the stored policies by namespace ("" global); with
// ns set, only that namespace's and the global one.
func (s *Service) tierPolicies(ns string) (map[string]*metapb.TierPolicy, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	out := map[string]*metapb.TierPolicy{}
	lo, hi := []byte(pTierPolicy), prefixEnd([]byte(pTierPolicy))
	it, err := v.newIter(lo, hi)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[len(pTierPolicy):])
		if ns != "" && name != ns && name != "" {
			continue
		}
		p := &metapb.TierPolicy{}
		if err := proto.Unmarshal(it.Value(), p); err != nil {
			return nil, errors.E(errors.Op("meta.tierPolicies"), errors.Corrupt, err)
		}
		out[name] = p
	}
	return out, it.Error()
}

// TierStatus reports bytes per class as of the last scan, the moves in
// progress and done, and the policies.
func (s *Service) TierStatus(ctx context.Context, _ *metapb.Empty) (*metapb.TierStatusResponse, error) {
	pols, err := s.TierGetPolicy(ctx, &metapb.TierPolicyRequest{})
	if err != nil {
		return nil, err
	}
	out := &metapb.TierStatusResponse{Policies: pols.Policies, IntervalNs: int64(s.cfg.TierInterval)}
	if out.Intents, err = s.tierIntents(); err != nil {
		return nil, err
	}
	s.tier.mu.Lock()
	defer s.tier.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(s.tier.scan.classes)) {
		out.Classes = append(out.Classes, proto.Clone(s.tier.scan.classes[k]).(*metapb.TierClassBytes))
	}
	if !s.tier.scan.at.IsZero() {
		out.ScannedNs = s.tier.scan.at.UnixNano()
	}
	out.Due = uint64(len(s.tier.scan.moves))
	for _, k := range slices.Sorted(maps.Keys(s.tier.moving)) {
		out.Moving = append(out.Moving, s.tier.moving[k])
	}
	out.Moved, out.MovedBytes, out.Stale, out.Failed = s.tier.moved, s.tier.bytes, s.tier.stale, s.tier.failed
	out.UnfinishedReleased, out.CachedReads = s.tier.leftovers, s.tier.cachedReads
	return out, nil
}
