package meta

import (
	"context"
	"encoding/binary"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/metadata"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Open files are inodes. A mount tells meta on its session stream when it
// opens a file (its first descriptor) and closes it (its last); a file
// unlinked (or renamed over) while some session may hold it open loses its
// name but not its inode and extents: apply keeps it as an orphan (key
// o/<ino>, nlink 0) instead of removing it. Its data goes when no session
// holds it any more: after the unlinking call's invalidation wait (every
// other session has seen the unlink, so any open it made before is known
// here), at a close, at the end of a session (a lease after its stream
// broke, as locks), and a lease after meta starts (the sessions of before
// the restart had their lease to come back). While it holds a file open, a
// session may resolve, commit and set attributes of it by inode number
// when its path names another file or none (ResolveRequest.ino,
// CommitRequest.open_ino, SetAttrRequest.open_ino).

const pOrphan = 'o'

func orphanKey(ino uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pOrphan, '/'}, ino)
}

// openTable is the in-memory record of which session holds which inode
// open, and of the orphans that wait for their holders.
type openTable struct {
	mu        sync.Mutex
	bySession map[string]map[uint64]bool
	holders   map[uint64]int
	// orphans: unlinked files kept for holders, each with the sequence of
	// the unlink's events until every session acknowledged them (then 0:
	// an open of it not known by now never comes).
	orphans map[uint64]uint64
	// reclaiming serializes reclaims (one ReclaimOrphans at a time).
	reclaiming sync.Mutex
}

func (s *Service) openFiles() *openTable {
	t := &s.opens
	t.mu.Lock()
	if t.bySession == nil {
		t.bySession = map[string]map[uint64]bool{}
		t.holders = map[uint64]int{}
		t.orphans = map[uint64]uint64{}
	}
	t.mu.Unlock()
	return t
}

// hold records that session holds ino open.
func (t *openTable) hold(session string, ino uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.bySession[session]
	if m == nil {
		m = map[uint64]bool{}
		t.bySession[session] = m
	}
	if !m[ino] {
		m[ino] = true
		t.holders[ino]++
	}
}

// release records that session closed ino; it reports whether ino is an
// orphan nobody holds now.
func (t *openTable) release(session string, ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.bySession[session]
	if !m[ino] {
		return false
	}
	delete(m, ino)
	if len(m) == 0 {
		delete(t.bySession, session)
	}
	if t.holders[ino]--; t.holders[ino] <= 0 {
		delete(t.holders, ino)
		seq, ok := t.orphans[ino]
		return ok && seq == 0
	}
	return false
}

// holds reports whether session holds ino open.
func (t *openTable) holds(session string, ino uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySession[session][ino]
}

// held lists every inode some session holds open, sorted.
func (t *openTable) held() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint64, 0, len(t.holders))
	for ino := range t.holders {
		out = append(out, ino)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// dropSession forgets every open of session.
func (t *openTable) dropSession(session string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ino := range t.bySession[session] {
		if t.holders[ino]--; t.holders[ino] <= 0 {
			delete(t.holders, ino)
		}
	}
	delete(t.bySession, session)
}

// orphaned records orphans an apply made; seq is the sequence of its
// last event (0: awaited already, see openTable.orphans).
func (t *openTable) orphaned(inos []uint64, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ino := range inos {
		t.orphans[ino] = seq
	}
}

// awaited records that every session acknowledged the events up to
// after; it reports whether an orphan nobody holds can go now.
func (t *openTable) awaited(after uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	free := false
	for ino, seq := range t.orphans {
		if seq <= after {
			t.orphans[ino] = 0
			free = free || t.holders[ino] == 0
		}
	}
	return free
}

// sessionOf is the mount session named by the call's metadata ("" if none).
func sessionOf(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(SessionHeader); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// prepareHeld fills what apply needs to keep open files: the inodes held
// open, and whether a session other than the caller's exists (it may hold
// an open meta has not heard of yet: its announcement is on its way, ahead
// of its acknowledgement of this command's events, which reclaim awaits).
func (s *Service) prepareHeld(ctx context.Context, cmd *metapb.Command) {
	cmd.Held = s.openFiles().held()
	self := sessionOf(ctx)
	st := s.sessions()
	st.mu.Lock()
	for ms := range st.m {
		if ms.id != self {
			cmd.KeepUnlinked = true
			break
		}
	}
	st.mu.Unlock()
}

// holdFor records, for a delete or rename by a mount that has the file at
// ns/p open (ino), that the caller's session holds it; only if p names ino.
func (s *Service) holdFor(ctx context.Context, ns, p string, ino uint64) {
	session := sessionOf(ctx)
	if ino == 0 || session == "" {
		return
	}
	r, err := s.resolveView(&metapb.ResolveRequest{Ns: ns, Path: p})
	if err != nil || r.Inode.Ino != ino {
		return
	}
	s.openFiles().hold(session, ino)
}

// keepOrphan is what unlinkFile does with a file whose last name went:
// kept as an orphan if a session holds it or may (see openTable).
func (t *txn) keepOrphan(n *metapb.Inode) (bool, error) {
	if n.Type != metapb.FileType_REGULAR || !(t.keepUnlinked || t.held[n.Ino]) {
		return false, nil
	}
	n.Nlink = 0
	t.touch(n, false)
	if err := t.put(inodeKey(n.Ino), n); err != nil {
		return false, err
	}
	if err := t.b.Set(orphanKey(n.Ino), nil, nil); err != nil {
		return false, err
	}
	t.res.orphans = append(t.res.orphans, n.Ino)
	return true, nil
}

// reclaimOrphans removes the orphans in r that no session holds.
func (t *txn) reclaimOrphans(r *metapb.ReclaimOrphansCommand) error {
	for _, ino := range r.Inos {
		if t.held[ino] {
			continue
		}
		_, closer, err := t.b.Get(orphanKey(ino))
		if err == pebble.ErrNotFound {
			continue
		}
		if err != nil {
			return errors.E(errors.IO, err)
		}
		closer.Close()
		if err := t.removeFile(ino); err != nil {
			return err
		}
		if err := t.del(orphanKey(ino)); err != nil {
			return err
		}
		t.res.reclaimed = append(t.res.reclaimed, ino)
	}
	return nil
}

// reclaim removes the awaited orphans nobody holds.
func (s *Service) reclaim() {
	t := s.openFiles()
	t.reclaiming.Lock()
	defer t.reclaiming.Unlock()
	t.mu.Lock()
	var inos []uint64
	for ino, seq := range t.orphans {
		if seq == 0 && t.holders[ino] == 0 {
			inos = append(inos, ino)
		}
	}
	t.mu.Unlock()
	if len(inos) == 0 {
		return
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	cmd := &metapb.Command{Op: &metapb.Command_ReclaimOrphans{ReclaimOrphans: &metapb.ReclaimOrphansCommand{Inos: inos}}}
	cmd.Held = t.held()
	res, err := s.propose(cmd)
	if errors.Is(errors.Unavailable, err) {
		return // shutting down: the next start reclaims them
	}
	if err != nil {
		s.log.Warn("meta: reclaiming unlinked files failed", "err", err)
		return
	}
	t.mu.Lock()
	for _, ino := range res.reclaimed {
		delete(t.orphans, ino)
	}
	t.mu.Unlock()
}

// loadOrphans finds the orphans of before a restart; they are reclaimed a
// lease after start unless a session that comes back holds them again.
func (s *Service) loadOrphans() error {
	v, err := s.readView()
	if err != nil {
		return err
	}
	defer v.close()
	p := []byte{pOrphan, '/'}
	it, err := v.newIter(p, prefixEnd(p))
	if err != nil {
		return err
	}
	var inos []uint64
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == 10 {
			inos = append(inos, binary.BigEndian.Uint64(k[2:]))
		}
	}
	err = it.Error()
	it.Close()
	if err != nil {
		return err
	}
	if len(inos) > 0 {
		s.openFiles().orphaned(inos, 0)
		time.AfterFunc(SessionLease, s.reclaim)
	}
	return nil
}

// Orphans is the number of unlinked files kept for open descriptors (for
// tests and the status page).
func (s *Service) Orphans() int {
	t := s.openFiles()
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.orphans)
}

// openByIno answers a Resolve of ino, which the caller's session holds
// open, when its path names another file or none.
func (s *Service) openByIno(ctx context.Context, req *metapb.ResolveRequest) (*metapb.ResolveResponse, error) {
	const op = errors.Op("meta.Resolve")
	if !s.openFiles().holds(sessionOf(ctx), req.Ino) {
		return nil, errors.E(op, errors.NotExist, fullPath(req.Ns, req.Path), "no such file (and the inode is not open here)")
	}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	n, err := v.inode(req.Ino)
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, req.Path), err)
	}
	resp := &metapb.ResolveResponse{Inode: n, ByIno: true}
	if req.WantExtents {
		if resp.Extents, err = v.extents(n); err != nil {
			return nil, errors.E(op, err)
		}
	}
	return resp, nil
}

// names reports whether p in ns names file ino.
func (t *txn) names(ns *metapb.Namespace, p string, ino uint64) bool {
	if p == "" {
		return false
	}
	got, isDir, err := t.v.walk(ns.RootIno, p)
	return err == nil && !isDir && got == ino
}

// inodeEvent tells mounts that file ino changed where no path names it
// for the changer: they drop what they cache of the inode.
func (t *txn) inodeEvent(ns string, ino uint64) {
	t.res.events = append(t.res.events, &metapb.Event{Ns: ns, Ino: ino})
}

// commitOpen is commit to the open file r.OpenIno (CommitRequest.open_ino)
// when r.Path no longer names it: new extents over the same inode, on the
// same conditions (if_match), whatever its names are now.
func (t *txn) commitOpen(r *metapb.CommitRequest) error {
	n, err := t.v.inode(r.OpenIno)
	if err != nil {
		return err
	}
	if n.Type != metapb.FileType_REGULAR {
		return errors.E(errors.Invalid, "not a regular file")
	}
	if r.IfMatch != "" && r.IfMatch != n.Etag {
		return errors.E(errors.Precondition, "etag does not match")
	}
	exts, err := sparse(r.Extents, r.Size)
	if err != nil {
		return err
	}
	if err := t.replaceExtents(n, exts, needlesOf(exts)); err != nil {
		return err
	}
	t.touch(n, true)
	if r.Mode != 0 || r.ModeExact {
		n.Mode = r.Mode
	}
	n.Uid, n.Gid = r.Uid, r.Gid
	mtime := r.MtimeNs
	if mtime == 0 {
		mtime = t.now
	}
	n.Size, n.Etag, n.ContentType, n.UserMeta, n.MtimeNs = r.Size, r.Etag, r.ContentType, r.UserMeta, mtime
	if r.AtimeNs != 0 {
		n.AtimeNs = r.AtimeNs
	}
	t.res.inode = n
	t.inodeEvent(r.Ns, n.Ino)
	return t.put(inodeKey(n.Ino), n)
}

// appendOpen is append to the open file r.OpenIno (AppendRequest.open_ino)
// when r.Path no longer names it: at its end, whatever its names are now.
func (t *txn) appendOpen(r *metapb.AppendRequest, exts []*metapb.Extent, total uint64) error {
	n, err := t.v.inode(r.OpenIno)
	if err != nil {
		return err
	}
	if n.Type != metapb.FileType_REGULAR {
		return errors.E(errors.Invalid, "not a regular file")
	}
	t.touch(n, true)
	if err := t.appendExtents(n, n.Size, exts); err != nil {
		return err
	}
	n.Size += total
	n.Etag = syntheticETag(n)
	t.res.inode = n
	t.inodeEvent(r.Ns, n.Ino)
	return t.put(inodeKey(n.Ino), n)
}
