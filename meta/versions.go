package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// S3 versioning. The namespace's file at a path is an object's current
// version: the native API and mounts see it and need nothing else. The
// versions it replaced live beside the tree, one record per version:
//
//	sV/{ns} 0 {path} 0 {^order:8}  -> S3Version (attributes, extents)
//
// so one key's versions are adjacent and newest first, and keys sort as
// S3 sorts them ("a" before "a/b"). A record owns its needles like a file
// does (s3objects.go's reference counts): archiving acquires them before
// the overwrite releases the file's, deleting the record releases them,
// and restoring one to the tree hands them over unchanged. The garbage
// collector therefore never sees a needle a version still points into.
//
// A version id is its order in 16 hex digits, or "null" for S3's null
// version (Inode.s3_version 0): objects written before versioning was
// enabled or while it is suspended. Orders come from one counter
// (c/s3ver) that apply increments, so replicas agree on them.

const pS3Version = "sV/"

var keyVersionCounter = []byte("c/s3ver")

func versionPrefix(ns, p string) []byte {
	return []byte(pS3Version + ns + "\x00" + p + "\x00")
}

func versionKey(ns, p string, order uint64) []byte {
	return binary.BigEndian.AppendUint64(versionPrefix(ns, p), ^order)
}

// VersionID is the S3 version id of a version number (0: "null").
func VersionID(n uint64) string {
	if n == 0 {
		return "null"
	}
	return fmt.Sprintf("%016x", n)
}

// ParseVersionID is VersionID's inverse; null reports "null".
func ParseVersionID(s string) (n uint64, null bool, err error) {
	if s == "null" {
		return 0, true, nil
	}
	if len(s) != 16 {
		return 0, false, errors.E(errors.Invalid, "invalid version id")
	}
	for i := 0; i < len(s); i++ {
		// Only what VersionID prints: one spelling per version.
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, false, errors.E(errors.Invalid, "invalid version id")
		}
	}
	n, err = strconv.ParseUint(s, 16, 64)
	if err != nil || n == 0 {
		return 0, false, errors.E(errors.Invalid, "invalid version id")
	}
	return n, false, nil
}

func (t *txn) nextVersion() (uint64, error) {
	val, _, err := t.v.get(keyVersionCounter)
	if err != nil {
		return 0, err
	}
	n := u64(val) + 1
	return n, t.b.Set(keyVersionCounter, be64(n), nil)
}

func versioned(ns *metapb.Namespace) bool {
	return ns.S3Versioning != metapb.S3Versioning_S3_VERSIONING_OFF
}

// lockedErr refuses to remove (or, in place, replace) a version that an
// object lock protects at now; bypass lifts a GOVERNANCE retention.
func lockedErr(n *metapb.Inode, now int64, bypass bool) error {
	if n.S3LegalHold {
		return errors.E(errors.Permission, "the object version is under legal hold")
	}
	if r := n.S3Retention; r != nil && r.UntilNs > now {
		if r.Mode == "COMPLIANCE" || !bypass {
			return errors.E(errors.Permission, "the object version is locked by "+r.Mode+" retention")
		}
	}
	return nil
}

// archive keeps the current file n at p as a stored version before it is
// replaced or removed. A null current in a suspended bucket is not kept
// (the new null version replaces it), as S3 does.
func (t *txn) archive(ns *metapb.Namespace, p string, n *metapb.Inode) error {
	if !versioned(ns) {
		return nil
	}
	if n.S3Version == 0 && ns.S3Versioning == metapb.S3Versioning_S3_VERSIONING_SUSPENDED {
		return lockedErr(n, t.now, false)
	}
	exts, err := t.v.extents(n)
	if err != nil {
		return err
	}
	for _, nd := range distinctNeedles(exts) {
		if err := t.acquire(nd); err != nil {
			return err
		}
	}
	order := n.S3Version
	if order == 0 {
		if order, err = t.nextVersion(); err != nil {
			return err
		}
	}
	snap := proto.Clone(n).(*metapb.Inode)
	snap.Ino, snap.Seq = 0, 0
	return t.put(versionKey(ns.Name, p, order), &metapb.S3Version{
		Order: order, NullId: n.S3Version == 0, Inode: snap, Extents: exts,
	})
}

// stamp gives n, just written at p, its version: a new id when versioning
// is enabled, else null (replacing a stored null version), and the
// bucket's default retention. In a never-versioned bucket it does nothing.
//
// r may ask for the new version's lock explicitly.
func (t *txn) stamp(ns *metapb.Namespace, p string, n *metapb.Inode, r *metapb.CommitRequest) error {
	if (r.S3Retention != nil || r.S3LegalHold) && !ns.S3ObjectLock {
		return errors.E(errors.Invalid, "Bucket is missing Object Lock Configuration")
	}
	if !versioned(ns) {
		return nil
	}
	n.S3Retention, n.S3LegalHold = nil, r.S3LegalHold
	if d := ns.S3DefaultRetention; ns.S3ObjectLock && d != nil && d.Mode != "" {
		until := t.now + int64(d.Days)*86400e9 + int64(d.Years)*365*86400e9
		n.S3Retention = &metapb.S3Retention{Mode: d.Mode, UntilNs: until}
	}
	if lr := r.S3Retention; lr != nil {
		if err := validRetention(lr, false); err != nil {
			return err
		}
		if lr.UntilNs <= t.now {
			return errors.E(errors.Invalid, "the retain until date must be in the future")
		}
		n.S3Retention = &metapb.S3Retention{Mode: lr.Mode, UntilNs: lr.UntilNs}
	}
	if ns.S3Versioning == metapb.S3Versioning_S3_VERSIONING_ENABLED {
		var err error
		n.S3Version, err = t.nextVersion()
		return err
	}
	n.S3Version = 0
	return t.dropNull(ns.Name, p)
}

// dropNull deletes p's stored null version, if any.
func (t *txn) dropNull(ns, p string) error {
	rec, key, err := t.findVersion(ns, p, 0, true)
	if err != nil || rec == nil {
		return err
	}
	if err := lockedErr(rec.Inode, t.now, false); err != nil {
		return err
	}
	return t.dropRecord(key, rec)
}

func (t *txn) dropRecord(key []byte, rec *metapb.S3Version) error {
	if err := t.del(key); err != nil {
		return err
	}
	for _, nd := range distinctNeedles(rec.Extents) {
		if err := t.release(nd); err != nil {
			return err
		}
	}
	return nil
}

// findVersion returns p's stored version order (or its null version).
func (t *txn) findVersion(ns, p string, order uint64, null bool) (*metapb.S3Version, []byte, error) {
	return findVersion(t.v, ns, p, order, null)
}

func findVersion(v *view, ns, p string, order uint64, null bool) (*metapb.S3Version, []byte, error) {
	rec := &metapb.S3Version{}
	if !null {
		key := versionKey(ns, p, order)
		found, err := v.getProto(key, rec)
		if err != nil || !found {
			return nil, nil, err
		}
		return rec, key, nil
	}
	pre := versionPrefix(ns, p)
	it, err := v.newIter(pre, prefixEnd(pre))
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		r := &metapb.S3Version{}
		if err := proto.Unmarshal(it.Value(), r); err != nil {
			return nil, nil, errors.E(errors.Corrupt, err)
		}
		if r.NullId {
			return r, append([]byte(nil), it.Key()...), nil
		}
	}
	return nil, nil, it.Error()
}

// newest returns p's newest stored version, or nil.
func newest(v *view, ns, p string) (*metapb.S3Version, []byte, error) {
	pre := versionPrefix(ns, p)
	it, err := v.newIter(pre, prefixEnd(pre))
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	if !it.First() {
		return nil, nil, it.Error()
	}
	r := &metapb.S3Version{}
	if err := proto.Unmarshal(it.Value(), r); err != nil {
		return nil, nil, errors.E(errors.Corrupt, err)
	}
	return r, append([]byte(nil), it.Key()...), nil
}

// deleteMarker records that p was deleted in versioned ns.
func (t *txn) deleteMarker(ns *metapb.Namespace, p string) error {
	order, err := t.nextVersion()
	if err != nil {
		return err
	}
	null := ns.S3Versioning == metapb.S3Versioning_S3_VERSIONING_SUSPENDED
	if null {
		if err := t.dropNull(ns.Name, p); err != nil {
			return err
		}
	}
	rec := &metapb.S3Version{
		Order: order, NullId: null, DeleteMarker: true,
		Inode: &metapb.Inode{MtimeNs: t.now, CtimeNs: t.now},
	}
	if !null {
		rec.Inode.S3Version = order
	}
	if err := t.put(versionKey(ns.Name, p, order), rec); err != nil {
		return err
	}
	out := proto.Clone(rec).(*metapb.S3Version)
	out.Key, out.Current = p, true
	t.res.version = out
	return nil
}

// beforeDelete is delete's hook for a file of a versioned namespace: the
// file becomes a stored version and a delete marker the latest.
func (t *txn) beforeDelete(ns *metapb.Namespace, p string, ino uint64) error {
	if !versioned(ns) || t.plain {
		return nil
	}
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	if err := t.archive(ns, p, n); err != nil {
		return err
	}
	return t.deleteMarker(ns, p)
}

// revise is the hook for a change in place of the file n at p (an
// append, a truncation or extension): in a versioned namespace the content
// before the change stays as a stored version and n becomes a new version,
// as it would had the changed content been PUT. Call it before n changes.
// A file changed by inode after its name went (p "") has no key to keep.
func (t *txn) revise(ns *metapb.Namespace, p string, n *metapb.Inode) error {
	if !versioned(ns) || t.plain || p == "" {
		return nil
	}
	if err := t.archive(ns, p, n); err != nil {
		return err
	}
	return t.stamp(ns, p, n, &metapb.CommitRequest{})
}

// filesBelow calls fn with the path and inode of every file below
// directory ino, whose path is base. Its memory is the directories still
// to visit.
func (t *txn) filesBelow(ino uint64, base string, fn func(p string, ino uint64) error) error {
	type dir struct {
		ino uint64
		p   string
	}
	stack := []dir{{ino, base}}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		pre := direntPrefix(d.ino)
		it, err := t.v.newIter(pre, prefixEnd(pre))
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			_, name, isDir, ok := parseDirentKey(it.Key())
			if !ok {
				it.Close()
				return errors.E(errors.Corrupt, "bad directory entry key")
			}
			child, cp := u64(it.Value()), d.p+"/"+name
			if isDir {
				stack = append(stack, dir{child, cp})
				continue
			}
			if err := fn(cp, child); err != nil {
				it.Close()
				return err
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// beforeRename is rename's hook in a versioned namespace, called before
// the entries move: S3 has no rename, so a renamed file is what a copy to
// the new key and a delete of the old one leave. The old key keeps the
// file as a stored version under a delete marker; the replaced target,
// if any, is kept as a stored version; after the move the file is a new
// version of its new key (afterRename). A directory's files move so one
// by one.
func (t *txn) beforeRename(ns *metapb.Namespace, from, to string, ino uint64, isDir bool, old uint64, replaces bool) error {
	if !versioned(ns) || t.plain {
		return nil
	}
	if replaces {
		n, err := t.v.inode(old)
		if err != nil {
			return err
		}
		if err := t.archive(ns, to, n); err != nil {
			return err
		}
	}
	if !isDir {
		return t.beforeDelete(ns, from, ino)
	}
	return t.filesBelow(ino, from, func(p string, ino uint64) error {
		return t.beforeDelete(ns, p, ino)
	})
}

// afterRename stamps the moved file n (now at to), or every file below
// the moved directory, as a new version of its new key.
func (t *txn) afterRename(ns *metapb.Namespace, to string, n *metapb.Inode, isDir bool) error {
	if !versioned(ns) || t.plain {
		return nil
	}
	if !isDir {
		return t.stamp(ns, to, n, &metapb.CommitRequest{})
	}
	return t.filesBelow(n.Ino, to, func(p string, ino uint64) error {
		f, err := t.v.inode(ino)
		if err != nil {
			return err
		}
		if err := t.stamp(ns, p, f, &metapb.CommitRequest{}); err != nil {
			return err
		}
		return t.put(inodeKey(ino), f)
	})
}

// ---- commands -------------------------------------------------------------------

func (t *txn) setVersioning(r *metapb.S3VersioningRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	switch r.State {
	case metapb.S3Versioning_S3_VERSIONING_OFF:
	case metapb.S3Versioning_S3_VERSIONING_SUSPENDED:
		if ns.S3ObjectLock {
			return errors.E(errors.Precondition, "versioning cannot be suspended on a bucket with object lock")
		}
		ns.S3Versioning = r.State
	case metapb.S3Versioning_S3_VERSIONING_ENABLED:
		ns.S3Versioning = r.State
	default:
		return errors.E(errors.Invalid, "unknown versioning state")
	}
	if r.ObjectLock {
		if ns.S3Versioning != metapb.S3Versioning_S3_VERSIONING_ENABLED {
			return errors.E(errors.Precondition, "object lock needs versioning enabled")
		}
		ns.S3ObjectLock = true
	}
	if r.SetDefaultRetention {
		if !ns.S3ObjectLock {
			return errors.E(errors.Precondition, "the bucket has no object lock")
		}
		if d := r.DefaultRetention; d != nil {
			if err := validRetention(d, true); err != nil {
				return err
			}
		}
		ns.S3DefaultRetention = r.DefaultRetention
	}
	ns.Version++
	t.res.ns = ns
	t.event(r.Ns, "", true)
	return t.put(nsKey(r.Ns), ns)
}

func validRetention(r *metapb.S3Retention, dflt bool) error {
	if r.Mode != "GOVERNANCE" && r.Mode != "COMPLIANCE" {
		return errors.E(errors.Invalid, "retention mode must be GOVERNANCE or COMPLIANCE")
	}
	if dflt && (r.Days == 0) == (r.Years == 0) {
		return errors.E(errors.Invalid, "a default retention has Days or Years, one of them, positive")
	}
	if dflt && (r.Days > 36500 || r.Years > 100) {
		return errors.E(errors.Invalid, "default retention too long")
	}
	return nil
}

// target is a version that a command names: the current file (ino set)
// or a stored record (key set).
type target struct {
	ino   uint64
	inode *metapb.Inode
	rec   *metapb.S3Version
	key   []byte
}

// versionAt finds version id of ns/p: "" is the current file.
func versionAt(v *view, ns *metapb.Namespace, p, id string) (target, error) {
	var order uint64
	var null bool
	if id != "" {
		var err error
		if order, null, err = ParseVersionID(id); err != nil {
			return target{}, err
		}
	}
	ino, dir, err := v.walk(ns.RootIno, p)
	switch {
	case err == nil && !dir:
		n, err := v.inode(ino)
		if err != nil {
			return target{}, err
		}
		if id == "" || null && n.S3Version == 0 || !null && n.S3Version == order {
			return target{ino: ino, inode: n}, nil
		}
	case err == nil, errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err):
	default:
		return target{}, err
	}
	if id == "" {
		return target{}, errors.E(errors.NotExist, "no such object")
	}
	rec, key, err := findVersion(v, ns.Name, p, order, null)
	if err != nil {
		return target{}, err
	}
	if rec == nil {
		return target{}, errors.E(errors.NotExist, "no such version")
	}
	return target{inode: rec.Inode, rec: rec, key: key}, nil
}

// versionTarget reads the namespace and cleans the path a versioning
// request names.
func versionTarget(v *view, ns, p string) (*metapb.Namespace, string, error) {
	n, err := v.namespace(ns)
	if err != nil {
		return nil, "", err
	}
	clean, err := cleanVersionPath(p)
	return n, clean, err
}

func cleanVersionPath(p string) (string, error) {
	clean, _, err := pathname.Clean(p)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", errors.E(errors.IsDir, "the root is a directory")
	}
	return clean, nil
}

// deleteVersion removes one version for good. Removing the latest makes
// the newest remaining one current, as S3 does: a stored version goes
// back into the tree (a delete marker stays the latest, in the store).
func (t *txn) deleteVersion(r *metapb.S3VersionRequest) error {
	ns, p, err := versionTarget(t.v, r.Ns, r.Path)
	if err != nil {
		return err
	}
	if r.VersionId == "" {
		return errors.E(errors.Invalid, "a version id is required")
	}
	tg, err := versionAt(t.v, ns, p, r.VersionId)
	if err != nil {
		return err
	}
	if err := lockedErr(tg.inode, t.now, r.BypassGovernance); err != nil {
		return err
	}
	out := &metapb.S3Version{Key: p, Inode: tg.inode, NullId: tg.inode.S3Version == 0}
	t.res.version = out
	if tg.rec != nil {
		out.DeleteMarker, out.NullId = tg.rec.DeleteMarker, tg.rec.NullId
		latest, _, err := newest(t.v, r.Ns, p)
		if err != nil {
			return err
		}
		wasLatest := latest.Order == tg.rec.Order
		if err := t.dropRecord(tg.key, tg.rec); err != nil {
			return err
		}
		if !wasLatest {
			return nil
		}
		if _, _, err := t.v.walk(ns.RootIno, p); err == nil {
			return nil // a file is current (a directory of that name cannot be: S3 keys)
		}
		return t.promote(ns, p)
	}
	// The current file goes; the newest stored version takes its place.
	t.plain = true
	defer func() { t.plain = false }()
	if err := t.delete(&metapb.DeleteRequest{Ns: r.Ns, Path: p}); err != nil {
		return err
	}
	return t.promote(ns, p)
}

// promote makes p's newest stored version current, if it is not a
// delete marker: the record's needles pass to the file unchanged.
func (t *txn) promote(ns *metapb.Namespace, p string) error {
	rec, key, err := newest(t.v, ns.Name, p)
	if err != nil || rec == nil || rec.DeleteMarker {
		return err
	}
	if err := t.del(key); err != nil {
		return err
	}
	in := rec.Inode
	plain := t.plain
	t.plain = true
	err = t.commitKeep(&metapb.CommitRequest{
		Ns: ns.Name, Path: p, Size: in.Size, Extents: rec.Extents, Etag: in.Etag,
		ContentType: in.ContentType, UserMeta: in.UserMeta, Headers: in.Headers, Tags: in.Tags,
		Mode: in.Mode, Uid: in.Uid, Gid: in.Gid, Parents: true, PartSizes: in.PartSizes, MtimeNs: in.MtimeNs,
	}, true)
	t.plain = plain
	if err != nil {
		return err
	}
	n := t.res.inode
	n.S3Version, n.S3Retention, n.S3LegalHold = in.S3Version, in.S3Retention, in.S3LegalHold
	return t.put(inodeKey(n.Ino), n)
}

// s3Delete is S3's DeleteObject without a version id: in a versioned
// bucket it leaves a delete marker even where no file is.
func (t *txn) s3Delete(r *metapb.S3VersionRequest) error {
	ns, p, err := versionTarget(t.v, r.Ns, r.Path)
	if err != nil {
		return err
	}
	err = t.delete(&metapb.DeleteRequest{Ns: r.Ns, Path: p})
	switch {
	case err == nil:
		return nil
	case versioned(ns) && (errors.Is(errors.NotExist, err) || errors.Is(errors.NotDir, err)):
		return t.deleteMarker(ns, p)
	}
	return err
}

// setLock sets a version's retention or legal hold. COMPLIANCE retention
// is never shortened nor removed; GOVERNANCE only with bypass.
func (t *txn) setLock(r *metapb.S3LockRequest) error {
	ns, p, err := versionTarget(t.v, r.Ns, r.Path)
	if err != nil {
		return err
	}
	if !ns.S3ObjectLock {
		return errors.E(errors.Invalid, "Bucket is missing Object Lock Configuration")
	}
	tg, err := versionAt(t.v, ns, p, r.VersionId)
	if err != nil {
		return err
	}
	if tg.rec != nil && tg.rec.DeleteMarker {
		return errors.E(errors.Invalid, "a delete marker cannot be locked")
	}
	n := tg.inode
	if r.SetRetention {
		if nr := r.Retention; nr != nil {
			if err := validRetention(nr, false); err != nil {
				return err
			}
			if nr.UntilNs <= t.now {
				return errors.E(errors.Invalid, "the retain until date must be in the future")
			}
		}
		if old := n.S3Retention; old != nil && old.UntilNs > t.now {
			nr := r.Retention
			weaker := nr == nil || nr.UntilNs < old.UntilNs || nr.Mode != old.Mode && old.Mode == "COMPLIANCE"
			if weaker && (old.Mode == "COMPLIANCE" || !r.BypassGovernance) {
				return errors.E(errors.Permission, "the object version is locked by "+old.Mode+" retention")
			}
		}
		n.S3Retention = r.Retention
	}
	if r.SetLegalHold {
		n.S3LegalHold = r.LegalHold
	}
	if tg.rec != nil {
		tg.rec.Inode = n
		if err := t.put(tg.key, tg.rec); err != nil {
			return err
		}
		t.res.version = &metapb.S3Version{Key: p, Order: tg.rec.Order, NullId: tg.rec.NullId, Inode: n}
		return nil
	}
	t.touch(n, false)
	t.event(r.Ns, p, false)
	t.res.inode = n
	t.res.version = &metapb.S3Version{Key: p, NullId: n.S3Version == 0, Order: n.S3Version, Inode: n, Current: true}
	return t.put(inodeKey(tg.ino), n)
}

// hasVersions reports whether ns holds stored versions (a bucket with
// any is not empty).
func (t *txn) hasVersions(ns string) (bool, error) {
	pre := []byte(pS3Version + ns + "\x00")
	it, err := t.v.newIter(pre, prefixEnd(pre))
	if err != nil {
		return false, err
	}
	defer it.Close()
	return it.First(), it.Error()
}

// applyVersions executes the versioning commands; known is false for any
// other command.
func (t *txn) applyVersions(cmd *metapb.Command) (op errors.Op, p errors.Path, known bool, err error) {
	known = true
	switch c := cmd.Op.(type) {
	case *metapb.Command_S3SetVersioning:
		op, p = "meta.S3SetVersioning", errors.Path(c.S3SetVersioning.Ns)
		err = t.setVersioning(c.S3SetVersioning)
	case *metapb.Command_S3DeleteVersion:
		op, p = "meta.S3DeleteVersion", fullPath(c.S3DeleteVersion.Ns, c.S3DeleteVersion.Path)
		err = t.deleteVersion(c.S3DeleteVersion)
	case *metapb.Command_S3Delete:
		op, p = "meta.S3Delete", fullPath(c.S3Delete.Ns, c.S3Delete.Path)
		err = t.s3Delete(c.S3Delete)
	case *metapb.Command_S3SetLock:
		op, p = "meta.S3SetLock", fullPath(c.S3SetLock.Ns, c.S3SetLock.Path)
		err = t.setLock(c.S3SetLock)
	default:
		known = false
	}
	return op, p, known, err
}

// ---- RPCs ---------------------------------------------------------------------------

func (s *Service) S3SetVersioning(ctx context.Context, req *metapb.S3VersioningRequest) (*metapb.Namespace, error) {
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_S3SetVersioning{S3SetVersioning: req}}))
	if err != nil {
		return nil, err
	}
	return res.ns, nil
}

// mayBypass reports whether the caller may bypass GOVERNANCE retention in
// ns: its owner or root (S3's s3:BypassGovernanceRetention, which only the
// owner has here). A call without a caller is this process's own.
func (s *Service) mayBypass(ctx context.Context, ns string) error {
	c, ok := CallerOf(ctx)
	if !ok {
		return nil
	}
	if lvl, _ := s.accessTo(c, ns); lvl < accessOwner {
		return errors.E(errors.Op("meta.S3BypassGovernance"), errors.Permission, errors.Path(ns), c.String()+" may not bypass governance retention")
	}
	return nil
}

func (s *Service) S3DeleteVersion(ctx context.Context, req *metapb.S3VersionRequest) (*metapb.S3Version, error) {
	if req.BypassGovernance {
		if err := s.mayBypass(ctx, req.Ns); err != nil {
			return nil, err
		}
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_S3DeleteVersion{S3DeleteVersion: req}}))
	if err != nil {
		return nil, err
	}
	return versionAnswer(res), nil
}

func (s *Service) S3Delete(ctx context.Context, req *metapb.S3VersionRequest) (*metapb.S3Version, error) {
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_S3Delete{S3Delete: req}}))
	if err != nil {
		return nil, err
	}
	return versionAnswer(res), nil
}

func (s *Service) S3SetLock(ctx context.Context, req *metapb.S3LockRequest) (*metapb.S3Version, error) {
	if req.BypassGovernance {
		if err := s.mayBypass(ctx, req.Ns); err != nil {
			return nil, err
		}
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_S3SetLock{S3SetLock: req}}))
	if err != nil {
		return nil, err
	}
	return versionAnswer(res), nil
}

func versionAnswer(res *result) *metapb.S3Version {
	if res.version != nil {
		return res.version
	}
	return &metapb.S3Version{} // a delete in a bucket never versioned
}

// S3GetVersion returns a version with its extents: the current file for
// an empty id (or the latest delete marker, when no file is current).
func (s *Service) S3GetVersion(ctx context.Context, req *metapb.S3VersionRequest) (*metapb.S3Version, error) {
	op := errors.Op("meta.S3GetVersion")
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	ns, p, err := versionTarget(v, req.Ns, req.Path)
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, req.Path), err)
	}
	tg, err := versionAt(v, ns, p, req.VersionId)
	if errors.Is(errors.NotExist, err) && req.VersionId == "" {
		// No file: the latest may be a delete marker (S3 says so).
		rec, _, rerr := newest(v, req.Ns, p)
		if rerr == nil && rec != nil && rec.DeleteMarker {
			rec.Key, rec.Current, rec.Extents = p, true, nil
			return rec, nil
		}
	}
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, p), err)
	}
	if tg.rec != nil {
		tg.rec.Key = p
		if latest, _, err := newest(v, req.Ns, p); err == nil && latest.Order == tg.rec.Order {
			if _, _, werr := v.walk(ns.RootIno, p); werr != nil {
				tg.rec.Current = true // the latest is this delete marker
			}
		}
		return tg.rec, nil
	}
	exts, err := v.extents(tg.inode)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return &metapb.S3Version{Key: p, Order: tg.inode.S3Version, NullId: tg.inode.S3Version == 0, Inode: tg.inode, Extents: exts, Current: true}, nil
}

// S3ListVersions lists stored versions in key order, each key's newest
// first, grouping keys by delimiter into common prefixes. With with_files
// it lists the namespace's files too, each before its key's stored
// versions: a ListObjectVersions page in one scan. Without, the caller
// lists the tree beside (and end may bound the keys).
func (s *Service) S3ListVersions(ctx context.Context, req *metapb.S3ListVersionsRequest) (*metapb.S3VersionList, error) {
	limit := int(req.Limit)
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	ns, err := v.namespace(req.Ns)
	if err != nil {
		return nil, errors.E(errors.Op("meta.S3ListVersions"), err)
	}
	l := &versionLister{v: v, ns: ns, req: req, limit: limit, out: &metapb.S3VersionList{}}
	if err := l.run(); err != nil {
		return nil, errors.E(errors.Op("meta.S3ListVersions"), fullPath(req.Ns, req.Prefix), err)
	}
	return l.out, nil
}

// versionLister is one page of S3ListVersions: the stored versions'
// iterator (it, on the next record while valid), and with files the
// tree's walk, whose every entry first lists the records before it.
type versionLister struct {
	v      *view
	ns     *metapb.Namespace
	req    *metapb.S3ListVersionsRequest
	limit  int
	out    *metapb.S3VersionList
	base   []byte // the namespace's record keys' prefix
	it     *pebble.Iterator
	valid  bool
	lastCP string // the last common prefix listed: its group is skipped
	// lastKey is the key whose latest version is listed (a file, or its
	// newest record), so that its next records are not marked current.
	lastKey string
}

func (l *versionLister) run() error {
	req := l.req
	if strings.HasPrefix(req.Prefix, "/") {
		return nil // no key starts with '/'
	}
	l.base = []byte(pS3Version + req.Ns + "\x00")
	lower := append(append([]byte(nil), l.base...), req.Prefix...)
	upper := prefixEnd(lower)
	if req.End != "" && !req.WithFiles {
		if e := append(append([]byte(nil), l.base...), req.End...); string(e) < string(upper) {
			upper = e
		}
	}
	from := lower
	if req.KeyMarker != "" {
		// After every version of the marker key; with a version marker,
		// after that version (a marker naming the current file, or no
		// stored version, starts at the key's first stored one).
		mk := prefixEnd(versionPrefix(req.Ns, req.KeyMarker))
		if req.Delimiter != "" && strings.HasSuffix(req.KeyMarker, req.Delimiter) {
			// A common prefix: after its whole group.
			mk = prefixEnd(append(append([]byte(nil), l.base...), req.KeyMarker...))
			l.lastCP = req.KeyMarker
		}
		if req.VersionIdMarker != "" {
			mk = versionPrefix(req.Ns, req.KeyMarker)
			if order, null, err := ParseVersionID(req.VersionIdMarker); err == nil {
				if rec, key, _ := findVersion(l.v, req.Ns, req.KeyMarker, order, null); rec != nil {
					mk = append(key, 0)
				}
			}
			l.lastKey = req.KeyMarker // its first versions were listed before
		}
		if string(mk) > string(from) {
			from = mk
		}
	}
	if string(from) < string(upper) {
		it, err := l.v.newIter(from, upper)
		if err != nil {
			return err
		}
		defer it.Close()
		l.it, l.valid = it, it.First()
	}
	if req.WithFiles {
		more, err := l.files()
		if err != nil || !more {
			return err
		}
	}
	_, err := l.records("", true)
	return err
}

// files walks the tree's entries of the listing in key order, each after
// the records that sort before it; more is false once the page is full.
func (l *versionLister) files() (more bool, err error) {
	req := l.req
	dirPart, namePrefix, ok := splitListPrefix(req.Prefix)
	if !ok {
		return true, nil // a prefix no path has: only records (none) to list
	}
	delimited := req.Delimiter == "/"
	last, ok := listAfter(delimited, req.Prefix, req.KeyMarker)
	if !ok {
		return true, nil // every key of the prefix is before the marker
	}
	more = true
	err = walkTree(l.v, l.ns, dirPart, namePrefix, delimited, last, func(name string, dir bool, ino uint64) (bool, error) {
		if more, err = l.records(name, false); err != nil || !more {
			return false, err
		}
		if cp := l.commonPrefix(name); cp != "" {
			if cp != l.lastCP {
				more = l.add(&metapb.S3Version{Key: cp, CommonPrefix: true})
				l.lastCP = cp
			}
			return more, nil
		}
		if more = len(l.out.Versions) < l.limit; !more {
			l.out.More = true
			return false, nil
		}
		n, err := l.v.inode(ino)
		if err != nil {
			return false, err
		}
		l.lastKey = name
		l.add(&metapb.S3Version{Key: name, File: true, Dir: dir, Current: true, Inode: n, Order: n.S3Version, NullId: n.S3Version == 0})
		return true, nil
	})
	return more, err
}

// records lists the stored versions (and their common prefixes) whose
// keys sort before key, or all of them; more is false once the page is
// full.
func (l *versionLister) records(key string, all bool) (more bool, err error) {
	for l.valid {
		k := l.it.Key()[len(l.base):]
		z := bytes.IndexByte(k, 0)
		if z < 0 {
			return false, errors.E(errors.Corrupt, "bad version key")
		}
		if !all && string(k[:z]) >= key {
			return true, nil // a key's file comes before its records
		}
		rk := string(k[:z])
		if cp := l.commonPrefix(rk); cp != "" {
			if cp != l.lastCP {
				if !l.add(&metapb.S3Version{Key: cp, CommonPrefix: true}) {
					return false, nil
				}
				l.lastCP = cp
			}
			// Skip the whole group.
			l.valid = l.it.SeekGE(prefixEnd(append(append([]byte(nil), l.base...), cp...)))
			continue
		}
		if len(l.out.Versions) == l.limit {
			l.out.More = true
			return false, nil
		}
		r := &metapb.S3Version{}
		if err := proto.Unmarshal(l.it.Value(), r); err != nil {
			return false, errors.E(errors.Corrupt, err)
		}
		r.Key, r.Extents = rk, nil
		if rk != l.lastKey {
			// The key's newest stored version is its latest when no file
			// is current: with files, none was listed for the key;
			// without, the caller may judge itself or meta walks to it.
			l.lastKey = rk
			r.Current = true
			if !l.req.WithFiles && !l.req.NewestAsCurrent {
				_, dir, werr := l.v.walk(l.ns.RootIno, rk)
				r.Current = werr != nil || dir // a directory is no current version
			}
		}
		l.out.Versions = append(l.out.Versions, r)
		l.valid = l.it.Next()
	}
	if l.it != nil {
		return true, l.it.Error()
	}
	return true, nil
}

// commonPrefix is the common prefix key falls in, or "".
func (l *versionLister) commonPrefix(key string) string {
	d, p := l.req.Delimiter, l.req.Prefix
	if d == "" {
		return ""
	}
	if i := strings.Index(key[len(p):], d); i >= 0 {
		return key[:len(p)+i+len(d)]
	}
	return ""
}

// add appends x unless the page is full (then it says there is more).
func (l *versionLister) add(x *metapb.S3Version) bool {
	if len(l.out.Versions) == l.limit {
		l.out.More = true
		return false
	}
	l.out.Versions = append(l.out.Versions, x)
	return true
}

// copySource is an S3 copy's source: the file, or the version it names.
func (t *txn) copySource(r *metapb.S3CopyRequest) (*metapb.Inode, []*metapb.Extent, error) {
	if r.SrcVersionId == "" {
		src, _, err := t.fileAt(r.SrcNs, r.SrcPath)
		if err != nil {
			return nil, nil, err
		}
		exts, err := t.v.extents(src)
		return src, exts, err
	}
	ns, p, err := versionTarget(t.v, r.SrcNs, r.SrcPath)
	if err != nil {
		return nil, nil, err
	}
	tg, err := versionAt(t.v, ns, p, r.SrcVersionId)
	if err != nil {
		return nil, nil, err
	}
	if tg.rec == nil {
		exts, err := t.v.extents(tg.inode)
		return tg.inode, exts, err
	}
	if tg.rec.DeleteMarker {
		return nil, nil, errors.E(errors.Invalid, "the source version is a delete marker")
	}
	return tg.inode, tg.rec.Extents, nil
}
