package meta

import (
	"encoding/binary"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// The replicated half of automatic tiering (tier.go): the commands the
// mover proposes, applied like every other command.
//
//	t/p/{ns}                                   metapb.TierPolicy ("" the global one)
//	t/g/{due ns:8}{volume:4}{needle key:8}     a moved file's old needle, garbage once due

const (
	pTierPolicy = "t/p/"
	pTierGrace  = "t/g/"
)

func tierPolicyKey(ns string) []byte { return []byte(pTierPolicy + ns) }

func tierGraceKey(due int64, nd needle) []byte {
	k := binary.BigEndian.AppendUint64([]byte(pTierGrace), uint64(due))
	k = binary.BigEndian.AppendUint32(k, nd.vol)
	return binary.BigEndian.AppendUint64(k, nd.key)
}

func parseTierGraceKey(k []byte) (due int64, nd needle, ok bool) {
	if len(k) != len(pTierGrace)+20 || string(k[:len(pTierGrace)]) != pTierGrace {
		return 0, needle{}, false
	}
	k = k[len(pTierGrace):]
	return int64(binary.BigEndian.Uint64(k)), needle{binary.BigEndian.Uint32(k[8:]), binary.BigEndian.Uint64(k[12:])}, true
}

func (t *txn) applyTier(cmd *metapb.Command) (op errors.Op, p errors.Path, known bool, err error) {
	known = true
	switch c := cmd.Op.(type) {
	case *metapb.Command_TierMove:
		op, p = "meta.TierMove", fullPath(c.TierMove.Ns, c.TierMove.Path)
		err = t.tierMove(c.TierMove)
	case *metapb.Command_TierAccess:
		op = "meta.TierAccess"
		err = t.tierAccess(c.TierAccess)
	case *metapb.Command_PutTierPolicy:
		op, p = "meta.TierSetPolicy", errors.Path(c.PutTierPolicy.Ns)
		err = t.putTierPolicy(c.PutTierPolicy)
	case *metapb.Command_TierRelease:
		op = "meta.TierRelease"
		err = t.tierRelease(c.TierRelease)
	case *metapb.Command_TierIntent:
		op = "meta.TierIntent"
		err = t.tierIntent(c.TierIntent)
	case *metapb.Command_TierReleaseIntents:
		op = "meta.TierReleaseIntents"
		err = t.tierReleaseIntents(c.TierReleaseIntents)
	default:
		known = false
	}
	return op, p, known, err
}

// tierMove switches the file to the copies in m.To when it is exactly as
// it was copied: same inode and version, the same extents, every old
// needle its own (no S3 version, copy or packed neighbour shares it).
// Then the old needles wait out the grace period (readers that looked the
// file up before the switch still read them) and the file answers with
// res.inode. Otherwise the copies are garbage at once and res.inode is
// nil: a changed file is not an error, the move is simply void.
func (t *txn) tierMove(m *metapb.TierMoveCommand) error {
	ok, n, err := false, (*metapb.Inode)(nil), error(nil)
	if !m.Abort {
		ok, n, err = t.tierUnchanged(m)
	}
	if ok && m.Ino != 0 {
		// The copies must still be the intent's (tier_intent.go): a
		// released intent's copies are the collector's already.
		ok, err = t.tierIntentCovers(m.Ino, m.To)
	}
	if err != nil {
		return err
	}
	if !ok {
		for _, nd := range distinctNeedles(m.To) {
			if err := t.b.Set(garbageKey(nd.vol, nd.key), nil, nil); err != nil {
				return err
			}
		}
		t.res.garbage = len(m.To) > 0
		return t.tierEndIntent(m.Ino, nil)
	}
	if err := t.tierEndIntent(m.Ino, needlesOf(m.To)); err != nil {
		return err
	}
	// The old needles are not released here: they wait out the grace
	// period below, then go to the collector.
	if err := t.replaceExtents(n, m.To, needlesOf(m.From)); err != nil {
		return err
	}
	due := t.now + m.GraceNs
	for _, nd := range distinctNeedles(m.From) {
		if err := t.b.Set(tierGraceKey(due, nd), nil, nil); err != nil {
			return err
		}
	}
	n.StorageClass = m.StorageClass
	// The S3 class a PUT named (gateway/s3/class.go) no longer holds.
	delete(n.Headers, "X-Amz-Storage-Class")
	n.Version++ // the extents changed: caches of them go
	t.res.inode = n
	t.event(m.Ns, m.Path, false)
	return t.put(inodeKey(n.Ino), n)
}

// commitClass is the storage class a commit leaves file old (nil: a new
// file) in: the class the request names, "" when that is the namespace's
// own. A commit that names none puts its new data in the namespace's
// class; only when it keeps needles of the old content (a mount's partial
// rewrite) does the file keep its class.
func (t *txn) commitClass(ns *metapb.Namespace, old *metapb.Inode, r *metapb.CommitRequest, exts []*metapb.Extent) (string, error) {
	if r.StorageClass != "" {
		if r.StorageClass == className(ns, "") {
			return "", nil
		}
		return r.StorageClass, nil
	}
	if old == nil || old.StorageClass == "" {
		return "", nil
	}
	cur, err := t.v.extents(old)
	if err != nil {
		return "", err
	}
	keep := needlesOf(exts)
	for _, nd := range distinctNeedles(cur) {
		if keep[nd] {
			return old.StorageClass, nil
		}
	}
	return "", nil
}

// effectiveClass is the class file n of namespace ns is stored in.
func (t *txn) effectiveClass(ns string, n *metapb.Inode) (string, error) {
	rec, err := t.v.namespace(ns)
	if err != nil {
		return "", err
	}
	return className(rec, n.StorageClass), nil
}

// tierUnchanged reports whether the file of m is as the mover copied it.
func (t *txn) tierUnchanged(m *metapb.TierMoveCommand) (bool, *metapb.Inode, error) {
	n := &metapb.Inode{}
	found, err := t.v.getProto(inodeKey(m.Ino), n)
	if err != nil || !found || n.Version != m.Version || n.Type != metapb.FileType_REGULAR {
		return false, nil, err
	}
	cur, err := t.v.extents(n)
	if err != nil {
		return false, nil, err
	}
	if len(cur) != len(m.From) {
		return false, nil, nil
	}
	for i, e := range cur {
		if !proto.Equal(e, m.From[i]) {
			return false, nil, nil
		}
	}
	for _, nd := range distinctNeedles(cur) {
		if shared, err := t.v.has(refKey(nd)); err != nil || shared {
			return false, nil, err
		}
	}
	return true, n, nil
}

// tierAccess moves the atime of files read (as meta saw them resolved) to
// now, for those whose atime is older than the grain: at most one write
// per file and grain, however often it is read. No version, no event:
// nothing a cache holds changes that a reader needs.
func (t *txn) tierAccess(a *metapb.TierAccessCommand) error {
	for _, ino := range a.Inos {
		n := &metapb.Inode{}
		found, err := t.v.getProto(inodeKey(ino), n)
		if err != nil {
			return err
		}
		if !found || n.Type != metapb.FileType_REGULAR || max(n.AtimeNs, n.MtimeNs) > t.now-a.GrainNs {
			continue
		}
		n.AtimeNs = t.now
		if err := t.put(inodeKey(ino), n); err != nil {
			return err
		}
	}
	return nil
}

// putTierPolicy stores a policy; one without rules or promotion removes it.
func (t *txn) putTierPolicy(p *metapb.TierPolicy) error {
	if len(p.Rules) == 0 && p.PromoteTo == "" && p.Rate == 0 {
		return t.del(tierPolicyKey(p.Ns))
	}
	return t.put(tierPolicyKey(p.Ns), p)
}

// tierRelease queues the needles of grace records as garbage.
func (t *txn) tierRelease(r *metapb.TierReleaseCommand) error {
	for _, k := range r.Keys {
		_, nd, ok := parseTierGraceKey(k)
		if !ok {
			return errors.E(errors.Invalid, "not a tier grace key")
		}
		if found, err := t.v.has(k); err != nil || !found {
			if err != nil {
				return err
			}
			continue // released before
		}
		if err := t.del(k); err != nil {
			return err
		}
		if err := t.b.Set(garbageKey(nd.vol, nd.key), nil, nil); err != nil {
			return err
		}
		t.res.garbage = true
	}
	return nil
}

// validClass checks a class a request names for a file ("": the
// namespace's).
func (s *Service) validClass(op errors.Op, class string) error {
	if class == "" {
		return nil
	}
	if _, err := s.class(class); err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	return nil
}
