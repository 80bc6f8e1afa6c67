package meta

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// txn is the state of one apply: the batch it writes, a view that reads
// through it, and what the command produced.
type txn struct {
	b   *pebble.Batch
	v   *view
	now int64
	res *result
	// plain turns off S3 versioning's hooks (versions.go) for the
	// changes a versioning command makes itself.
	plain bool
	// held and keepUnlinked: see Command.held (open.go).
	held         map[uint64]bool
	keepUnlinked bool
}

type needle struct {
	vol uint32
	key uint64
}

// applyCommand executes one command against batch b, an indexed batch over the
// current state. It is deterministic: it reads only b and cmd (the time is
// cmd.now_ns), so replicas applying the same commands reach the same state.
// On error the batch must be discarded; nothing was changed.
//
// rc, when not nil, serves point reads of keys the command has not written
// (and an iterator over the store the rest): apply runs under the apply
// mutex, so both hold the committed state and reading through them changes
// no answer. shared, when not nil, is what the earlier commands of the
// same batch wrote (applyShared), and then rc must be.
func applyCommand(db *pebble.DB, b *pebble.Batch, cmd *metapb.Command, rc *readCache, shared *sharedBatch) (*result, error) {
	v := &view{b: b}
	if rc != nil {
		if gen, ok := rc.snapshot(); ok {
			v.db, v.rc, v.gen = db, rc, gen
			if shared != nil {
				v.shared, v.n0, v.off = shared, b.Count(), len(b.Repr())
			}
		}
	}
	defer v.close()
	t := &txn{b: b, v: v, now: cmd.NowNs, res: &result{}, keepUnlinked: cmd.KeepUnlinked}
	if len(cmd.Held) > 0 {
		t.held = make(map[uint64]bool, len(cmd.Held))
		for _, ino := range cmd.Held {
			t.held[ino] = true
		}
	}
	var (
		err error
		op  errors.Op
		p   errors.Path
	)
	switch c := cmd.Op.(type) {
	case *metapb.Command_CreateNamespace:
		op, p = "meta.CreateNamespace", errors.Path(c.CreateNamespace.Name)
		err = t.createNamespace(c.CreateNamespace)
	case *metapb.Command_DeleteNamespace:
		op, p = "meta.DeleteNamespace", errors.Path(c.DeleteNamespace.Name)
		err = t.deleteNamespace(c.DeleteNamespace.Name)
	case *metapb.Command_SetVisibility:
		op, p = "meta.SetVisibility", errors.Path(c.SetVisibility.Name)
		err = t.setVisibility(c.SetVisibility)
	case *metapb.Command_Mkdir:
		op, p = "meta.Mkdir", fullPath(c.Mkdir.Ns, c.Mkdir.Path)
		err = t.mkdir(c.Mkdir)
	case *metapb.Command_Commit:
		op, p = "meta.Commit", fullPath(c.Commit.Ns, c.Commit.Path)
		err = t.commit(c.Commit)
	case *metapb.Command_CommitBatch:
		op = "meta.CommitBatch"
		err = t.commitBatch(c.CommitBatch)
	case *metapb.Command_Append:
		op, p = "meta.Append", fullPath(c.Append.Ns, c.Append.Path)
		err = t.append(c.Append)
	case *metapb.Command_Delete:
		op, p = "meta.Delete", fullPath(c.Delete.Ns, c.Delete.Path)
		err = t.delete(c.Delete)
	case *metapb.Command_Rename:
		op, p = "meta.Rename", fullPath(c.Rename.Ns, c.Rename.From)
		err = t.rename(c.Rename)
	case *metapb.Command_SetAttr:
		op, p = "meta.SetAttr", fullPath(c.SetAttr.Ns, c.SetAttr.Path)
		err = t.setAttr(c.SetAttr)
	case *metapb.Command_PutVolume:
		op = "meta.PutVolume"
		err = t.putVolume(c.PutVolume)
	case *metapb.Command_PutUser:
		op = "meta.PutUser"
		err = t.putUser(c.PutUser)
	case *metapb.Command_GarbageDone:
		op = "meta.GarbageDone"
		err = t.garbageDone(c.GarbageDone)
	case *metapb.Command_ServerState:
		op = "meta.ServerState"
		err = t.serverState(c.ServerState)
	case *metapb.Command_MountSymlink:
		op, p = "meta.Symlink", fullPath(c.MountSymlink.Ns, c.MountSymlink.Path)
		err = t.mountSymlink(c.MountSymlink)
	case *metapb.Command_MountLink:
		op, p = "meta.Link", fullPath(c.MountLink.Ns, c.MountLink.To)
		err = t.mountLink(c.MountLink)
	case *metapb.Command_MountXattr:
		op, p = "meta.SetXattr", fullPath(c.MountXattr.Ns, c.MountXattr.Path)
		err = t.mountXattr(c.MountXattr)
	case *metapb.Command_MountReserve:
		op = "meta.MountReserve"
		err = t.mountReserve(c.MountReserve)
	case *metapb.Command_MountAccess:
		op, p = "meta.MountAccess", errors.Path(c.MountAccess.Ns)
		err = t.mountAccess(c.MountAccess)
	case *metapb.Command_MountMknod:
		op, p = "meta.Mknod", fullPath(c.MountMknod.Ns, c.MountMknod.Path)
		err = t.mountMknod(c.MountMknod)
	case *metapb.Command_PutJoinToken:
		op = "meta.CreateJoinToken"
		err = t.putJoinToken(c.PutJoinToken)
	case *metapb.Command_UseJoinToken:
		op = "meta.Join"
		err = t.useJoinToken(c.UseJoinToken)
	case *metapb.Command_RevokeCert:
		op = "meta.RevokeCert"
		err = t.revokeCert(c.RevokeCert)
	case *metapb.Command_ReclaimOrphans:
		op = "meta.ReclaimOrphans"
		err = t.reclaimOrphans(c.ReclaimOrphans)
	case *metapb.Command_SecretsInit:
		op = "meta.SecretsInit"
		err = t.secretsInit(c.SecretsInit)
	case *metapb.Command_SecretsRotateCaps:
		op = "meta.RotateCapKeys"
		err = t.secretsRotateCaps(c.SecretsRotateCaps)
	case *metapb.Command_SetClusterId:
		op = "meta.SetClusterId"
		err = t.setClusterID(c.SetClusterId.Id)
	default:
		var known bool
		if op, p, known, err = t.applyS3(cmd); !known {
			op, p, known, err = t.applyVersions(cmd)
		}
		if !known {
			op, p, known, err = t.applyTier(cmd) // tier_apply.go
		}
		if !known {
			return nil, errors.E(errors.Op("meta.apply"), errors.Invalid, fmt.Sprintf("unknown command %T", cmd.Op))
		}
	}
	if err != nil {
		if p != "" && errors.PathOf(err) == "" {
			return nil, errors.E(op, p, err)
		}
		return nil, errors.E(op, err)
	}
	if err := t.numberEvents(); err != nil {
		return nil, err
	}
	return t.res, nil
}

// setClusterID records id unless an id is recorded already.
func (t *txn) setClusterID(id string) error {
	if id == "" {
		return errors.E(errors.Invalid, "empty cluster id")
	}
	_, found, err := t.v.get(keyClusterID)
	if err != nil || found {
		return err
	}
	return t.b.Set(keyClusterID, []byte(id), nil)
}

// numberEvents gives the command's events their sequence numbers, which
// are part of the replicated state so that they survive a restart.
func (t *txn) numberEvents() error {
	if len(t.res.events) == 0 {
		return nil
	}
	val, _, err := t.v.get(keySeq)
	if err != nil {
		return err
	}
	seq := u64(val)
	for _, e := range t.res.events {
		seq++
		e.Seq = seq
	}
	return t.b.Set(keySeq, be64(seq), nil)
}

func (t *txn) event(ns, p string, namespace bool) {
	t.res.events = append(t.res.events, &metapb.Event{Ns: ns, Path: p, Namespace: namespace})
}

func (t *txn) put(key []byte, m proto.Message) error {
	val, err := proto.Marshal(m)
	if err != nil {
		return errors.E(errors.Invalid, err)
	}
	return t.b.Set(key, val, nil)
}

func (t *txn) del(key []byte) error { return t.b.Delete(key, nil) }

func (t *txn) nextIno() (uint64, error) {
	val, _, err := t.v.get(keyInoCounter)
	if err != nil {
		return 0, err
	}
	ino := u64(val) + 1
	return ino, t.b.Set(keyInoCounter, be64(ino), nil)
}

func (t *txn) newInode(typ metapb.FileType, mode, uid, gid uint32) (*metapb.Inode, error) {
	return t.newInodeAt(0, typ, mode, uid, gid)
}

// newInodeAt is newInode with the number a mount reserved (MountReserve)
// and answered its create or mkdir with; 0 takes the next one.
func (t *txn) newInodeAt(ino uint64, typ metapb.FileType, mode, uid, gid uint32) (*metapb.Inode, error) {
	return t.newInodeMode(ino, typ, mode, false, uid, gid)
}

// newInodeMode is newInodeAt where exact takes mode as given, 0 included
// (a mount's open(O_CREAT, 0) makes a file of mode 0, not 0644).
func (t *txn) newInodeMode(ino uint64, typ metapb.FileType, mode uint32, exact bool, uid, gid uint32) (*metapb.Inode, error) {
	var err error
	if ino == 0 {
		ino, err = t.nextIno()
	} else {
		err = t.reserved(ino)
	}
	if err != nil {
		return nil, err
	}
	n := &metapb.Inode{
		Ino: ino, Type: typ, Mode: mode, Uid: uid, Gid: gid,
		MtimeNs: t.now, CtimeNs: t.now, Nlink: 1, Version: 1,
	}
	if typ == metapb.FileType_REGULAR {
		n.ExtentGen = 1 // extents.go: new files start in the generation layout
	}
	if typ == metapb.FileType_DIRECTORY {
		n.Nlink = 2
		if n.Mode == 0 && !exact {
			n.Mode = 0o755
		}
	} else if n.Mode == 0 && !exact {
		n.Mode = 0o644
	}
	return n, nil
}

// touch records a change of an inode: a new version and ctime.
func (t *txn) touch(n *metapb.Inode, content bool) {
	n.Version++
	n.CtimeNs = t.now
	if content {
		n.MtimeNs = t.now
	}
}

// touchDir records that entries of directory ino changed, so that caches
// of its listing are invalidated by version like any other inode.
func (t *txn) touchDir(ino uint64) error { return t.touchDirLinks(ino, 0) }

// touchDirLinks is touchDir for a change that also adds (delta 1) or
// removes (-1) a subdirectory: a directory's nlink is 2 plus its
// subdirectories (their ".." entries), as on a local file system.
func (t *txn) touchDirLinks(ino uint64, delta int) error {
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	t.touch(n, true)
	n.Nlink = uint32(max(int(max(n.Nlink, 2))+delta, 2))
	return t.put(inodeKey(ino), n)
}

// dirDelta is the change of a parent's nlink when an entry of that kind
// comes (1) or goes (-1).
func dirDelta(dir bool, sign int) int {
	if dir {
		return sign
	}
	return 0
}

// syntheticETag names content that no hash covers (after an append or a
// truncate): unique per inode version, so HTTP validators still work.
func syntheticETag(n *metapb.Inode) string {
	return fmt.Sprintf("%x-%d", n.Ino, n.Version)
}

func (t *txn) createNamespace(r *metapb.CreateNamespaceRequest) error {
	if err := pathname.ValidNamespace(r.Name); err != nil {
		return err
	}
	if ok, err := t.v.has(nsKey(r.Name)); err != nil {
		return err
	} else if ok {
		return errors.E(errors.Exist, "namespace exists")
	}
	root, err := t.newInode(metapb.FileType_DIRECTORY, 0o755, 0, 0)
	if err != nil {
		return err
	}
	ns := &metapb.Namespace{
		Name: r.Name, Owner: r.Owner, Visibility: r.Visibility, CreatedNs: t.now,
		Replication: r.Replication, Version: 1, RootIno: root.Ino, StorageClass: r.StorageClass,
	}
	if err := t.put(inodeKey(root.Ino), root); err != nil {
		return err
	}
	if err := t.put(nsKey(r.Name), ns); err != nil {
		return err
	}
	t.res.ns = ns
	t.event(r.Name, "", true)
	return nil
}

func (t *txn) deleteNamespace(name string) error {
	ns, err := t.v.namespace(name)
	if err != nil {
		return err
	}
	if empty, err := t.emptyDir(ns.RootIno); err != nil {
		return err
	} else if !empty {
		return errors.E(errors.NotEmpty, "namespace is not empty")
	}
	if has, err := t.hasVersions(name); err != nil || has {
		if err == nil {
			err = errors.E(errors.NotEmpty, "namespace holds object versions")
		}
		return err
	}
	if err := t.del(inodeKey(ns.RootIno)); err != nil {
		return err
	}
	if err := t.del(s3BucketKey(name)); err != nil { // S3 CORS and tags go with it
		return err
	}
	t.event(name, "", true)
	return t.del(nsKey(name))
}

func (t *txn) setVisibility(r *metapb.SetVisibilityRequest) error {
	ns, err := t.v.namespace(r.Name)
	if err != nil {
		return err
	}
	ns.Visibility = r.Visibility
	ns.Version++
	t.res.ns = ns
	t.event(r.Name, "", true)
	return t.put(nsKey(r.Name), ns)
}

func (t *txn) emptyDir(ino uint64) (bool, error) {
	p := direntPrefix(ino)
	it, err := t.v.newIter(p, prefixEnd(p))
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

// parentDir finds (or, with create, makes) the directory that holds the
// last component of p, and returns it with that component's name.
func (t *txn) parentDir(ns *metapb.Namespace, p string, create bool, uid, gid uint32) (uint64, string, error) {
	dir, name := pathname.Parent(p)
	cur, done := ns.RootIno, ""
	for dir != "" {
		comp, rest, _ := cutSlash(dir)
		done = pathname.Join(done, comp)
		child, isDir, found, err := t.v.lookupAs(cur, comp, true)
		switch {
		case err != nil:
			return 0, "", err
		case found && !isDir:
			return 0, "", errors.E(errors.NotDir, errors.Path(ns.Name+"/"+done), "a path component is a file")
		case found:
			cur = child
		case !create:
			return 0, "", errors.E(errors.NotExist, errors.Path(ns.Name+"/"+done), "parent directory does not exist")
		default:
			n, err := t.newInode(metapb.FileType_DIRECTORY, 0o755, uid, gid)
			if err != nil {
				return 0, "", err
			}
			if err := t.link(cur, comp, true, n); err != nil {
				return 0, "", err
			}
			t.event(ns.Name, done, false)
			cur = n.Ino
		}
		dir = rest
	}
	return cur, name, nil
}

// link writes inode n and its entry name in directory parent.
func (t *txn) link(parent uint64, name string, dir bool, n *metapb.Inode) error {
	if err := t.put(inodeKey(n.Ino), n); err != nil {
		return err
	}
	if err := t.b.Set(direntKey(parent, name, dir), be64(n.Ino), nil); err != nil {
		return err
	}
	return t.touchDirLinks(parent, dirDelta(dir, 1))
}

func (t *txn) mkdir(r *metapb.MkdirRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	if p == "" {
		if !r.Parents {
			return errors.E(errors.Exist, "the root directory exists")
		}
		t.res.inode, err = t.v.inode(ns.RootIno)
		return err
	}
	parent, name, err := t.parentDir(ns, p, r.Parents, r.Uid, r.Gid)
	if err != nil {
		return err
	}
	ino, isDir, found, err := t.v.lookup(parent, name)
	if err != nil {
		return err
	}
	if found {
		// A mount's mkdir names the inode number it reserved: finding
		// that number here means an earlier attempt of it applied.
		if isDir && (r.Parents || r.Ino != 0 && r.Ino == ino) {
			t.res.inode, err = t.v.inode(ino)
			return err
		}
		return errors.E(errors.Exist, "file exists")
	}
	n, err := t.newInodeMode(r.Ino, metapb.FileType_DIRECTORY, r.Mode, r.ModeExact, r.Uid, r.Gid)
	if err != nil {
		return err
	}
	if err := t.link(parent, name, true, n); err != nil {
		return err
	}
	t.res.inode = n
	t.event(r.Ns, p, false)
	return nil
}

// sparse checks that extents, sorted by offset, are disjoint and lie in
// [0, size), and returns them sorted. A gap is a hole: it costs no space
// and reads as zeros (a mount's sparse file).
func sparse(exts []*metapb.Extent, size uint64) ([]*metapb.Extent, error) {
	exts = append([]*metapb.Extent(nil), exts...)
	sort.Slice(exts, func(i, j int) bool { return exts[i].Offset < exts[j].Offset })
	var at uint64
	for _, e := range exts {
		switch {
		case e.Length == 0:
			return nil, errors.E(errors.Invalid, "extent of length 0")
		case e.Offset < at:
			return nil, errors.E(errors.Invalid, fmt.Sprintf("extents overlap at offset %d", e.Offset))
		case e.Offset+e.Length < e.Offset:
			return nil, errors.E(errors.Invalid, "extent overflows")
		}
		at = e.Offset + e.Length
	}
	if at > size {
		return nil, errors.E(errors.Invalid, fmt.Sprintf("extents cover %d bytes, size is %d", at, size))
	}
	return exts, nil
}

// tile checks that extents, sorted by offset, cover [0, size) exactly, and
// returns them sorted.
func tile(exts []*metapb.Extent, size uint64, needSize bool) ([]*metapb.Extent, uint64, error) {
	exts = append([]*metapb.Extent(nil), exts...)
	sort.Slice(exts, func(i, j int) bool { return exts[i].Offset < exts[j].Offset })
	var at uint64
	for _, e := range exts {
		if e.Length == 0 {
			return nil, 0, errors.E(errors.Invalid, "extent of length 0")
		}
		if e.Offset != at {
			return nil, 0, errors.E(errors.Invalid, fmt.Sprintf("extents leave a gap or overlap at offset %d", at))
		}
		if e.Offset+e.Length < e.Offset {
			return nil, 0, errors.E(errors.Invalid, "extent overflows")
		}
		at += e.Length
	}
	if needSize && at != size {
		return nil, 0, errors.E(errors.Invalid, fmt.Sprintf("extents cover %d bytes, size is %d", at, size))
	}
	return exts, at, nil
}

func (t *txn) removeFile(ino uint64) error {
	// A dangling entry's inode is gone: what extents it may have left are
	// in the first layout (gen 0), as before generations.
	n := &metapb.Inode{Ino: ino}
	if _, err := t.v.getProto(inodeKey(ino), n); err != nil {
		return err
	}
	if err := t.replaceExtents(n, nil, nil); err != nil {
		return err
	}
	return t.del(inodeKey(ino))
}

// removeTree deletes everything below directory ino (not ino itself). Its
// memory is the directories still to visit, never a whole listing.
func (t *txn) removeTree(ino uint64) error {
	stack := []uint64{ino}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		p := direntPrefix(d)
		it, err := t.v.newIter(p, prefixEnd(p))
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			_, _, isDir, ok := parseDirentKey(it.Key())
			if !ok {
				it.Close()
				return errors.E(errors.Corrupt, "bad directory entry key")
			}
			child := u64(it.Value())
			if err := t.del(it.Key()); err != nil {
				it.Close()
				return err
			}
			if isDir {
				stack = append(stack, child)
				err = t.del(inodeKey(child))
			} else {
				_, err = t.unlinkFile(child)
			}
			if err != nil {
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

func (t *txn) commit(r *metapb.CommitRequest) error { return t.commitKeep(r, true) }

// commitKeep is commit; keep says that needles the old and the new extent
// lists share stay with the file (a rewrite by the same writer). Without
// it the old content is released in full: the new extents' needles were
// acquired separately (S3 copy, multipart parts).
func (t *txn) commitKeep(r *metapb.CommitRequest, keepShared bool) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	if r.OpenIno != 0 && !r.IfNoneMatch && r.Ino == 0 && !t.names(ns, p, r.OpenIno) {
		return t.commitOpen(r)
	}
	if p == "" {
		return errors.E(errors.IsDir, "the root is a directory")
	}
	exts, err := sparse(r.Extents, r.Size)
	if err != nil {
		return err
	}
	parent, name, err := t.parentDir(ns, p, r.Parents, r.Uid, r.Gid)
	if err != nil {
		return err
	}
	ino, isDir, found, err := t.v.lookup(parent, name)
	if err != nil {
		return err
	}
	mtime := r.MtimeNs
	if mtime == 0 {
		mtime = t.now
	}
	var n *metapb.Inode
	cls, err := t.commitClass(ns, nil, r, exts)
	if err != nil {
		return err
	}
	switch {
	case found && isDir:
		return errors.E(errors.IsDir, "a directory of that name exists")
	case found:
		// A mount's create names the inode number it reserved: finding
		// that number here means an earlier attempt of this very commit
		// applied (its answer was lost), and this one replaces it.
		if r.IfNoneMatch && (r.Ino == 0 || r.Ino != ino) {
			return errors.E(errors.Precondition, "file exists")
		}
		if n, err = t.v.inode(ino); err != nil {
			return err
		}
		if r.IfMatch != "" && r.IfMatch != n.Etag {
			return errors.E(errors.Precondition, "etag does not match")
		}
		if cls, err = t.commitClass(ns, n, r, exts); err != nil { // tier_apply.go
			return err
		}
		// The replacement keeps the inode (open handles and caches
		// keyed by ino stay valid) and swaps the extents in this batch.
		if !t.plain {
			if err := t.archive(ns, p, n); err != nil {
				return err
			}
		}
		var keep map[needle]bool
		if keepShared {
			keep = needlesOf(exts)
		}
		if err := t.replaceExtents(n, exts, keep); err != nil {
			return err
		}
		t.touch(n, true)
		if r.Mode != 0 || r.ModeExact {
			n.Mode = r.Mode
		}
		n.Uid, n.Gid = r.Uid, r.Gid
	default:
		if r.IfMatch != "" {
			return errors.E(errors.Precondition, "file does not exist")
		}
		if n, err = t.newInodeMode(r.Ino, metapb.FileType_REGULAR, r.Mode, r.ModeExact, r.Uid, r.Gid); err != nil {
			return err
		}
		if err := t.b.Set(direntKey(parent, name, false), be64(n.Ino), nil); err != nil {
			return err
		}
		if err := t.touchDir(parent); err != nil {
			return err
		}
	}
	n.Size, n.Etag, n.ContentType, n.UserMeta, n.MtimeNs = r.Size, r.Etag, r.ContentType, r.UserMeta, mtime
	if r.AtimeNs != 0 {
		n.AtimeNs = r.AtimeNs
	}
	if r.CtimeNs != 0 && r.Ino != 0 {
		// A mount's create answered behind: the ctime it showed, not
		// the time its commit landed (which moved ctime under stat).
		n.CtimeNs = r.CtimeNs
	}
	n.Headers, n.Tags, n.PartSizes = r.Headers, r.Tags, r.PartSizes
	n.StorageClass = cls
	if !t.plain {
		if err := t.stamp(ns, p, n, r); err != nil {
			return err
		}
	}
	if !found {
		if err := t.replaceExtents(n, exts, nil); err != nil {
			return err
		}
	}
	t.res.inode = n
	t.event(r.Ns, p, false)
	return t.put(inodeKey(n.Ino), n)
}

// commitBatch applies commits in order in this one batch. A needle that an
// earlier commit of the batch took gains an owner for each later commit
// that points into it (see s3objects.go), so deleting one packed file
// leaves the others' data alone.
func (t *txn) commitBatch(r *metapb.CommitBatchRequest) error {
	owned := map[needle]bool{}
	for _, c := range r.Commits {
		mine := map[needle]bool{}
		for _, e := range c.Extents {
			nd := needle{e.Volume, e.Key}
			if mine[nd] {
				continue
			}
			mine[nd] = true
			if owned[nd] {
				if err := t.acquire(nd); err != nil {
					return err
				}
			}
		}
		if err := t.commit(c); err != nil {
			if errors.PathOf(err) == "" {
				err = errors.E(fullPath(c.Ns, c.Path), err)
			}
			return err
		}
		t.res.inodes = append(t.res.inodes, t.res.inode)
		t.res.seqs = append(t.res.seqs, t.res.events[len(t.res.events)-1])
		for nd := range mine {
			owned[nd] = true
		}
	}
	t.res.inode = nil
	return nil
}

func (t *txn) append(r *metapb.AppendRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	if p == "" && r.OpenIno == 0 {
		return errors.E(errors.IsDir, "the root is a directory")
	}
	exts, total, err := tile(r.Extents, 0, false)
	if err != nil {
		return err
	}
	if r.OpenIno != 0 && !r.Create && !t.names(ns, p, r.OpenIno) {
		return t.appendOpen(r, exts, total) // open.go
	}
	parent, name, err := t.parentDir(ns, p, r.Parents, 0, 0)
	if err != nil {
		return err
	}
	ino, isDir, found, err := t.v.lookup(parent, name)
	if err != nil {
		return err
	}
	var n *metapb.Inode
	switch {
	case found && isDir:
		return errors.E(errors.IsDir, "a directory of that name exists")
	case found:
		if n, err = t.v.inode(ino); err != nil {
			return err
		}
		if err := t.revise(ns, p, n); err != nil {
			return err
		}
		t.touch(n, true)
	case !r.Create:
		return errors.E(errors.NotExist, "no such file")
	default:
		if n, err = t.newInode(metapb.FileType_REGULAR, 0, 0, 0); err != nil {
			return err
		}
		n.ContentType = r.ContentType
		if !t.plain {
			if err := t.stamp(ns, p, n, &metapb.CommitRequest{}); err != nil {
				return err
			}
		}
		if err := t.b.Set(direntKey(parent, name, false), be64(n.Ino), nil); err != nil {
			return err
		}
		if err := t.touchDir(parent); err != nil {
			return err
		}
	}
	if err := t.appendExtents(n, n.Size, exts); err != nil {
		return err
	}
	n.Size += total
	n.Etag = syntheticETag(n)
	t.res.inode = n
	t.event(r.Ns, p, false)
	return t.put(inodeKey(n.Ino), n)
}

func (t *txn) delete(r *metapb.DeleteRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	if p == "" {
		return errors.E(errors.Invalid, "cannot delete the root directory (delete the namespace)")
	}
	parent, name, err := t.parentDir(ns, p, false, 0, 0)
	if err != nil {
		return err
	}
	ino, isDir, found, err := t.v.lookup(parent, name)
	if err != nil {
		return err
	}
	if !found {
		return errors.E(errors.NotExist, "no such file or directory")
	}
	if isDir {
		empty, err := t.emptyDir(ino)
		if err != nil {
			return err
		}
		if !empty && !r.Recursive {
			return errors.E(errors.NotEmpty, "directory not empty")
		}
		if !empty {
			// In a versioned namespace each file below is deleted as S3
			// deletes a key: it stays as a stored version.
			if versioned(ns) && !t.plain {
				if err := t.filesBelow(ino, p, func(fp string, fino uint64) error {
					return t.beforeDelete(ns, fp, fino)
				}); err != nil {
					return err
				}
			}
			if err := t.removeTree(ino); err != nil {
				return err
			}
		}
		if err := t.del(inodeKey(ino)); err != nil {
			return err
		}
	} else {
		if r.IfMatch != "" {
			n, err := t.v.inode(ino)
			if err != nil {
				return err
			}
			if n.Etag != r.IfMatch {
				return errors.E(errors.Precondition, "etag does not match")
			}
		}
		if err := t.beforeDelete(ns, p, ino); err != nil {
			return err
		}
		if _, err := t.unlinkFile(ino); err != nil {
			return err
		}
	}
	if err := t.del(direntKey(parent, name, isDir)); err != nil {
		return err
	}
	t.event(r.Ns, p, false)
	return t.touchDirLinks(parent, dirDelta(isDir, -1))
}

func (t *txn) rename(r *metapb.RenameRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	from, _, err := pathname.Clean(r.From)
	if err != nil {
		return err
	}
	to, _, err := pathname.Clean(r.To)
	if err != nil {
		return err
	}
	if from == "" || to == "" {
		return errors.E(errors.Invalid, "cannot rename the root directory")
	}
	fromParent, fromName, err := t.parentDir(ns, from, false, 0, 0)
	if err != nil {
		return err
	}
	ino, isDir, found, err := t.v.lookup(fromParent, fromName)
	if err != nil {
		return err
	}
	if !found {
		return errors.E(errors.NotExist, "no such file or directory")
	}
	if from == to {
		t.res.inode, err = t.v.inode(ino)
		return err
	}
	if isDir && strings.HasPrefix(to, from+"/") {
		return errors.E(errors.Invalid, errors.Path(ns.Name+"/"+to), "cannot move a directory into itself")
	}
	toParent, toName, err := t.parentDir(ns, to, r.Parents, 0, 0)
	if err != nil {
		return err
	}
	old, oldDir, exists, err := t.v.lookup(toParent, toName)
	if err != nil {
		return err
	}
	if !exists || !r.NoReplace && oldDir == isDir {
		// (What else exists, the switch below refuses.)
		if err := t.beforeRename(ns, from, to, ino, isDir, old, exists && !oldDir); err != nil {
			return err
		}
	}
	if exists {
		switch {
		case r.NoReplace:
			return errors.E(errors.Exist, errors.Path(ns.Name+"/"+to), "target exists")
		case oldDir && !isDir:
			return errors.E(errors.IsDir, errors.Path(ns.Name+"/"+to), "target is a directory")
		case !oldDir && isDir:
			return errors.E(errors.NotDir, errors.Path(ns.Name+"/"+to), "target is a file")
		case oldDir:
			empty, err := t.emptyDir(old)
			if err != nil {
				return err
			}
			if !empty {
				return errors.E(errors.NotEmpty, errors.Path(ns.Name+"/"+to), "target directory not empty")
			}
			err = t.del(inodeKey(old))
			if err != nil {
				return err
			}
		default:
			if _, err := t.unlinkFile(old); err != nil {
				return err
			}
		}
		if err := t.del(direntKey(toParent, toName, oldDir)); err != nil {
			return err
		}
	}
	if err := t.del(direntKey(fromParent, fromName, isDir)); err != nil {
		return err
	}
	if err := t.b.Set(direntKey(toParent, toName, isDir), be64(ino), nil); err != nil {
		return err
	}
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	t.touch(n, false)
	if err := t.afterRename(ns, to, n, isDir); err != nil {
		return err
	}
	if err := t.put(inodeKey(ino), n); err != nil {
		return err
	}
	// A directory moving between parents moves its ".." link; one
	// replacing another leaves the target parent's count as it was.
	fromDelta, toDelta := 0, 0
	if toParent != fromParent {
		fromDelta, toDelta = dirDelta(isDir, -1), dirDelta(isDir && !(exists && oldDir), 1)
	} else if exists && oldDir {
		fromDelta = -1
	}
	if err := t.touchDirLinks(fromParent, fromDelta); err != nil {
		return err
	}
	if toParent != fromParent {
		if err := t.touchDirLinks(toParent, toDelta); err != nil {
			return err
		}
	}
	t.res.inode = n
	t.event(r.Ns, from, false)
	t.event(r.Ns, to, false)
	return nil
}

func (t *txn) setAttr(r *metapb.SetAttrRequest) error {
	ns, err := t.v.namespace(r.Ns)
	if err != nil {
		return err
	}
	p, _, err := pathname.Clean(r.Path)
	if err != nil {
		return err
	}
	ino, isDir, err := t.v.walk(ns.RootIno, p)
	if r.OpenIno != 0 && (err != nil || ino != r.OpenIno) {
		// An open file whose name went (open.go): changed by inode.
		ino, isDir, err, p = r.OpenIno, false, nil, ""
	}
	if err != nil {
		return err
	}
	n, err := t.v.inode(ino)
	if err != nil {
		return err
	}
	if r.Access {
		// An access (relatime): atime alone, and no event, so that no
		// cache of the file is dropped for it.
		if r.AtimeNs != nil {
			n.AtimeNs = *r.AtimeNs
		}
		t.res.inode = n
		return t.put(inodeKey(ino), n)
	}
	if r.Size != nil && *r.Size != n.Size && !isDir {
		// A new content: the old one stays as a version (versions.go).
		if err := t.revise(ns, p, n); err != nil {
			return err
		}
	}
	t.touch(n, false)
	if r.AtimeNs != nil {
		n.AtimeNs = *r.AtimeNs
	}
	if r.Mode != nil {
		n.Mode = *r.Mode
	}
	if r.Uid != nil {
		n.Uid = *r.Uid
	}
	if r.Gid != nil {
		n.Gid = *r.Gid
	}
	if r.ContentType != nil {
		n.ContentType = *r.ContentType
	}
	if r.Size != nil && *r.Size != n.Size {
		if isDir {
			return errors.E(errors.IsDir, "cannot truncate a directory")
		}
		if err := t.truncate(n, *r.Size); err != nil {
			return err
		}
		n.Size = *r.Size
		n.MtimeNs = t.now
		n.Etag = syntheticETag(n)
	}
	if r.MtimeNs != nil {
		n.MtimeNs = *r.MtimeNs
	}
	t.res.inode = n
	if p == "" && r.OpenIno == ino {
		t.inodeEvent(r.Ns, ino)
	} else {
		t.event(r.Ns, p, false)
	}
	return t.put(inodeKey(ino), n)
}

// truncate cuts n's extents to size. Growing needs nothing: the range past
// the last extent is a hole, read as zeros. The extent that straddles the
// new end is shortened; its needle, and every needle an extent below the
// end still uses (a needle may back several extents: a mount overwrites in
// the middle), stay.
func (t *txn) truncate(n *metapb.Inode, size uint64) error {
	if size >= n.Size {
		return nil
	}
	exts, err := t.v.extents(n)
	if err != nil {
		return err
	}
	kept := cutExtents(exts, size)
	return t.replaceExtents(n, kept, needlesOf(kept))
}

func (t *txn) putVolume(v *metapb.Volume) error {
	if v.Id == 0 {
		return errors.E(errors.Invalid, "volume id 0")
	}
	if err := t.put(volumeKey(v.Id), v); err != nil {
		return err
	}
	val, _, err := t.v.get(keyVolCounter)
	if err != nil {
		return err
	}
	if uint64(v.Id) > u64(val) {
		if err := t.b.Set(keyVolCounter, be64(uint64(v.Id)), nil); err != nil {
			return err
		}
	}
	t.res.volume = v
	return nil
}

func (t *txn) putUser(u *metapb.User) error {
	if u.AccessKey == "" || len(u.Salt) == 0 || len(u.Hash) == 0 {
		return errors.E(errors.Invalid, "incomplete user record")
	}
	u.CreatedNs = t.now
	if u.Root {
		old, found, err := t.v.get(keyRoot)
		if err != nil {
			return err
		}
		if found && string(old) != u.AccessKey {
			if err := t.del(userKey(string(old))); err != nil {
				return err
			}
		}
		if err := t.b.Set(keyRoot, []byte(u.AccessKey), nil); err != nil {
			return err
		}
	}
	return t.put(userKey(u.AccessKey), u)
}

func (t *txn) garbageDone(g *metapb.GarbageDone) error {
	for _, nd := range g.Needles {
		if err := t.del(garbageKey(nd.Volume, nd.Key)); err != nil {
			return err
		}
	}
	return nil
}
