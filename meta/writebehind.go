package meta

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"cairn/pathname"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Write-behind. A mount may answer close() before it has committed what
// was written (small files cost one synchronous create instead of three
// synchronous commits). It first tells meta it is dirty (MountDirty, one
// round trip before the close is answered), naming the path it changed
// behind. Before meta serves another client's read or change of namespace
// data that the mount's queued changes concern, it asks that mount to
// commit everything (Event.mount_flush on the session) and waits for its
// clean acknowledgement, so close-to-open holds across mounts and through
// the HTTP API: whoever looks after a close sees what it closed. A mount's
// own write-behind commits carry DrainHeader and never wait for others'
// flushes (two dirty mounts would otherwise wait for each other).
//
// Which calls a mount's queued changes concern is derived from the names
// it announced (kept per session until a clean covers them) and the
// names the call's request carries (classify.go's scope), like a CephFS
// directory capability at the grain of a name: a call is concerned when
// it names an announced path, a directory above one (a look-up, listing,
// rmdir or rename of the directory), a path under one (a directory made
// behind), a listing prefix that an announced path begins with, or an
// announced file by inode number. A mount that announced no path in its
// epoch (it was alone: no other mount could have cached anything) is
// concerned by every call, and so is every dirty mount when the call's
// names cannot be told. Two mounts working in two directories so never
// recall each other, and a hard-linked file, whose other names meta
// cannot tell from the path, is announced for its whole namespace.

// DrainHeader marks a call made while committing written-behind changes.
const DrainHeader = "cairn-drain"

func (s *Service) MountDirty(ctx context.Context, req *metapb.MountDirtyRequest) (*metapb.MountDirtyResponse, error) {
	const op = errors.Op("meta.MountDirty")
	t := s.sessions()
	t.mu.Lock()
	self := t.byID(req.Session)
	t.mu.Unlock()
	if self == nil {
		// Without a live session meta could not recall the changes: the
		// mount must commit synchronously.
		return nil, errors.E(op, errors.Unavailable, "no live session "+req.Session)
	}
	if req.Create {
		// Before the session is marked dirty: a refused create leaves the
		// mount's epoch as it was.
		if err := s.claimName(ctx, self, req); err != nil {
			return nil, errors.E(op, err)
		}
	}
	t.mu.Lock()
	var others []*mountSession
	for ms := range t.m {
		if ms != self {
			others = append(others, ms)
		}
	}
	key := nameKey(req.Ns, req.Path)
	self.mu.Lock()
	if req.Epoch > self.dirty {
		self.dirty = req.Epoch
	}
	switch {
	case (len(others) == 0 || req.Ns == "") && req.Epoch > self.unannounced:
		// Alone: the mount announces no further path in this epoch.
		// (Or it named none: every call concerns it.)
		self.unannounced = req.Epoch
	case t.held[key] > 0:
		// A command naming the path is in flight, and passed its recall
		// before this: it may give the file another name (link, rename)
		// that no announcement names. The whole namespace it is then.
		self.mark(key, req.Epoch)
		self.mark(nameKey(req.Ns, ""), req.Epoch)
	default:
		self.mark(key, req.Epoch)
	}
	flush := len(self.names) >= maxDirtyNames && self.asked < self.dirty
	if flush {
		self.asked = self.dirty
	}
	out := self.out
	self.mu.Unlock()
	t.dirty.Add(1)
	t.notices++
	id := t.notices
	t.mu.Unlock()
	if flush && out != nil {
		// The names of a mount that no one recalls pile up: ask it to
		// commit (and so to report clean), without waiting.
		out.send(&metapb.Event{MountFlush: true})
	}
	resp := &metapb.MountDirtyResponse{Alone: len(others) == 0}
	if req.Ns == "" {
		return resp, nil
	}
	if !req.Create && len(others) > 0 {
		// A file meta has may be named by inode number (an open file) or
		// by another name (a hard link): it is concerned by the first,
		// and by every name of its namespace for the second. (A create's
		// name is free: the file is in meta only once committed.) Done
		// before the close is answered, as the marks above.
		if r, err := s.resolveView(&metapb.ResolveRequest{Ns: req.Ns, Path: req.Path}); err == nil {
			self.mu.Lock()
			if self.inos == nil {
				self.inos = map[uint64]uint64{}
			}
			self.inos[r.Inode.Ino] = max(self.inos[r.Inode.Ino], req.Epoch)
			if r.Inode.Type != metapb.FileType_DIRECTORY && r.Inode.Nlink > 1 {
				self.mark(nameKey(req.Ns, ""), req.Epoch)
			}
			self.mu.Unlock()
		}
	}
	// Every other mount drops the path before the close is answered, as
	// for a committed change; its next look then reaches meta.
	ev := &metapb.Event{Ns: req.Ns, Path: req.Path, MountNotice: id}
	deadline, cancel := context.WithTimeout(ctx, SessionLease)
	defer cancel()
	for _, ms := range others {
		ms.mu.Lock()
		out := ms.out
		ms.mu.Unlock()
		if out == nil || out.send(ev) != nil {
			ms.cancel()
			continue
		}
		for {
			ms.mu.Lock()
			acked, wake := ms.noticed, ms.wake
			ms.mu.Unlock()
			if acked >= id {
				break
			}
			select {
			case <-wake:
				continue
			case <-ms.dead:
			case <-deadline.Done():
				if ctx.Err() == nil {
					ms.cancel()
				}
			}
			break
		}
	}
	return resp, nil
}

// clean records a mount's acknowledgement that it committed everything up
// to dirty epoch e.
func (ms *mountSession) clean(e uint64) {
	ms.mu.Lock()
	if e > ms.cleaned {
		ms.cleaned = e
		for k, ke := range ms.names {
			if ke <= e {
				delete(ms.names, k)
			}
		}
		for k, ke := range ms.dirs {
			if ke <= e {
				delete(ms.dirs, k)
			}
		}
		for k, ke := range ms.inos {
			if ke <= e {
				delete(ms.inos, k)
			}
		}
		close(ms.wake)
		ms.wake = make(chan struct{})
	}
	ms.mu.Unlock()
}

// maxDirtyNames is how many announced names a session collects before
// meta asks it to commit unprompted: a mount whose changes no one looks
// at would otherwise be remembered name by name for ever.
var maxDirtyNames = 1 << 14

// mark records that the session's changes of epoch e concern the path of
// key, and so every directory above it (ms.mu held).
func (ms *mountSession) mark(key string, e uint64) {
	if ms.names == nil {
		ms.names, ms.dirs = map[string]uint64{}, map[string]uint64{}
	}
	ms.names[key] = max(ms.names[key], e)
	for d, ok := parentKey(key); ok; d, ok = parentKey(d) {
		ms.dirs[d] = max(ms.dirs[d], e)
	}
}

// parentKey returns the key of the directory above key's path (the
// namespace's root above a top-level name); false for the root itself.
func parentKey(key string) (string, bool) {
	i := strings.IndexByte(key, 0)
	if i < 0 || i == len(key)-1 {
		return "", false
	}
	if j := strings.LastIndexByte(key[i+1:], '/'); j >= 0 {
		return key[:i+1+j], true
	}
	return key[:i+1], true
}

// concerns returns the epoch up to which the session must have committed
// before a call of scope sc is served, or 0 when its queued changes do
// not concern the call (ms.mu held). See the comment at the top.
func (ms *mountSession) concerns(sc *scope) uint64 {
	if ms.dirty <= ms.cleaned {
		return 0
	}
	if sc.unknown || ms.unannounced > ms.cleaned {
		return ms.dirty
	}
	var e uint64
	for _, k := range sc.names {
		// The name, or a directory above names announced.
		e = max(e, ms.names[k], ms.dirs[k])
		// A name announced above it: a directory made or renamed behind
		// (or the whole namespace).
		for d, ok := parentKey(k); ok; d, ok = parentKey(d) {
			e = max(e, ms.names[d])
		}
	}
	for _, p := range sc.prefixes {
		// The directory the listing starts in, and those above it.
		i := strings.IndexByte(p, 0)
		dir := p[:i+1]
		if j := strings.LastIndexByte(p[i+1:], '/'); j >= 0 {
			dir = p[:i+1+j]
		}
		for d, ok := dir, true; ok; d, ok = parentKey(d) {
			e = max(e, ms.names[d])
		}
		// Names that begin with the prefix are under its directory.
		if ms.dirs[dir] > 0 {
			for k, ke := range ms.names {
				if strings.HasPrefix(k, p) {
					e = max(e, ke)
				}
			}
		}
	}
	for _, ino := range sc.inos {
		e = max(e, ms.inos[ino])
	}
	if e <= ms.cleaned {
		return 0
	}
	return e
}

// recallDirty makes the dirty mounts other than the caller whose queued
// changes concern a data call commit them before it is served (see the
// comment at the top; which calls and which names is read from the
// request, classify.go). A command also honours other mounts' create
// claims (holdNames); the returned release is run once it has run.
func (s *Service) recallDirty(ctx context.Context, method string, req any) (release func()) {
	m, ok := req.(proto.Message)
	if !ok || !dataMethods[method] {
		return func() {}
	}
	self, drain := callerSession(ctx)
	if drain {
		return func() {}
	}
	if commandMethods[method] {
		sc := requestScope(m.ProtoReflect())
		return s.holdNames(ctx, self, &sc)
	}
	t := s.sessions()
	if t.dirty.Load() == 0 {
		return func() {} // a read while no mount is dirty: not even the scope
	}
	sc := requestScope(m.ProtoReflect())
	t.mu.Lock()
	rs := t.concerned(self, &sc)
	t.mu.Unlock()
	s.recall(ctx, rs)
	return func() {}
}

// callerSession returns the caller's mount session, and whether the call
// is one of its write-behind commits (DrainHeader).
func callerSession(ctx context.Context) (self string, drain bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	if v := md.Get(SessionHeader); len(v) > 0 {
		self = v[0]
	}
	return self, len(md.Get(DrainHeader)) > 0
}

// concerned returns the sessions other than self whose queued changes
// concern a call of scope sc, each with the epoch it must report clean
// (t.mu held). Only what was announced before the call began must be
// seen: later closes on a busy mount do not hold it up.
func (t *sessionTable) concerned(self string, sc *scope) []recall {
	if t.dirty.Load() == 0 {
		return nil
	}
	var rs []recall
	any := false
	for ms := range t.m {
		ms.mu.Lock()
		if ms.dirty > ms.cleaned {
			any = true
			if ms.id != self {
				if e := ms.concerns(sc); e > 0 {
					rs = append(rs, recall{ms, e, ms.out})
				}
			}
		}
		ms.mu.Unlock()
	}
	if !any {
		t.dirty.Store(0) // nobody is: skip the scan until the next MountDirty
	}
	return rs
}

// recall is the set of dirty sessions a call waits for: each must report
// clean at least target.
type recall struct {
	ms     *mountSession
	target uint64
	out    *sessionStream
}

// RecallTimeout bounds how long a call waits for a dirty mount to commit
// what it left behind: a mount that has not reported clean by then is cut
// off (its session ends) and the call goes on. A client's attempt at a
// data call must outlast it, or the call fails while meta still waits.
const RecallTimeout = SessionLease + 10*time.Second

// recall sends mount_flush to each session of rs and waits until it
// reports clean at least its target, cutting off those that do not in
// time.
func (s *Service) recall(ctx context.Context, rs []recall) {
	if len(rs) == 0 {
		return
	}
	deadline, cancel := context.WithTimeout(ctx, RecallTimeout)
	defer cancel()
	for _, r := range rs {
		done := s.ops.Start("recall") // per session recalled: how often, and how long it waits
		if r.out == nil || r.out.send(&metapb.Event{MountFlush: true}) != nil {
			r.ms.cancel()
			done(errors.E(errors.Unavailable, "mount session gone"))
			continue
		}
		for {
			r.ms.mu.Lock()
			cleaned, wake := r.ms.cleaned, r.ms.wake
			r.ms.mu.Unlock()
			if cleaned >= r.target {
				break
			}
			select {
			case <-wake:
				continue
			case <-r.ms.dead:
			case <-deadline.Done():
				if ctx.Err() == nil {
					s.log.Warn("mount did not commit its written-behind changes in time: cut off", "session", r.ms.id)
					r.ms.cancel()
				}
			}
			break
		}
		done(nil)
	}
}

// Create claims. A mount answers a create or mkdir behind (before meta
// has it) only with meta's grant: MountDirty with create. Meta grants it
// when the name is free, which it can tell only once the mounts that may
// hold a queued create of the name have committed: those whose epoch
// began alone (they announce nothing) and the one holding a claim on the
// name. It recalls them, looks the name up, and records the grantee's
// claim, which lasts until the grantee reports clean an epoch that
// covers it (its create is then in meta, where the look-up finds it) or
// its session ends. So of two mounts creating one name exclusively, the
// second is refused synchronously (EEXIST) instead of both answering and
// one commit failing later; a mount creating alone or in names no one
// else creates pays one round trip and no recall.
type claim struct {
	ms    *mountSession
	epoch uint64
}

// claimName grants self's create of req.Ns/req.Path, or fails with
// Exist when the name is taken.
func (s *Service) claimName(ctx context.Context, self *mountSession, req *metapb.MountDirtyRequest) error {
	t := s.sessions()
	key := nameKey(req.Ns, req.Path)
	for attempt := 0; ; attempt++ {
		var rs []recall
		t.mu.Lock()
		if t.held[key] > 0 {
			// A synchronous command naming it is in flight: it may
			// create it after the look-up below. Wait for its end.
			wake := t.heldWake
			t.mu.Unlock()
			if attempt == 8 {
				return errors.E(errors.Unavailable, errors.Path(req.Ns+"/"+req.Path), "create claim contended")
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return errors.E(errors.Canceled, ctx.Err())
			}
			continue
		}
		for ms := range t.m {
			if ms == self {
				continue
			}
			ms.mu.Lock()
			if ms.unannounced > ms.cleaned {
				rs = append(rs, recall{ms, ms.dirty, ms.out})
			}
			ms.mu.Unlock()
		}
		if c, ok := t.claims[key]; ok && c.ms != self {
			_, live := t.m[c.ms]
			c.ms.mu.Lock()
			held := live && c.ms.cleaned < c.epoch
			out := c.ms.out
			c.ms.mu.Unlock()
			if !held {
				delete(t.claims, key)
			} else if !slices.ContainsFunc(rs, func(r recall) bool { return r.ms == c.ms }) {
				rs = append(rs, recall{c.ms, c.epoch, out})
			}
		}
		if len(rs) == 0 {
			_, err := s.Resolve(ctx, &metapb.ResolveRequest{Ns: req.Ns, Path: req.Path})
			switch {
			case err == nil:
				err = errors.E(errors.Exist, errors.Path(req.Ns+"/"+req.Path))
			case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err):
				// Free (or under a directory the mount made behind).
				if len(t.claims) >= 4096 {
					t.sweepClaims()
				}
				t.claims[key] = claim{self, req.Epoch}
				err = nil
			}
			t.mu.Unlock()
			return err
		}
		t.mu.Unlock()
		if attempt == 8 {
			// Busy name: the mount creates synchronously instead.
			return errors.E(errors.Unavailable, errors.Path(req.Ns+"/"+req.Path), "create claim contended")
		}
		s.recall(ctx, rs)
	}
}

// sweepClaims drops the claims no longer held: their create is in meta,
// or their session ended (t.mu held).
func (t *sessionTable) sweepClaims() {
	for k, c := range t.claims {
		_, live := t.m[c.ms]
		c.ms.mu.Lock()
		held := live && c.ms.cleaned < c.epoch
		c.ms.mu.Unlock()
		if !held {
			delete(t.claims, k)
		}
	}
}

// nameKey is the key of ns/p in the claim and hold tables: the path
// cleaned, so that two spellings of one name meet.
func nameKey(ns, p string) string {
	if c, _, err := pathname.Clean(p); err == nil {
		p = c
	}
	return ns + "\x00" + p
}

// holdNames serves a synchronous command's recall: the dirty mounts its
// names concern (recallDirty), and the create claims of other mounts,
// atomically with the command's own check. The check meta makes when it
// applies the command (the name is free, a rename's target...) must not
// race a claim granted meanwhile, which lets another mount answer a
// create of the same name behind. So before the command runs, every live
// claim another mount holds on a name the request names is recalled (the
// holder commits its queued create; the command then meets it in meta),
// and until the command has run no claim on those names is granted
// (claimName waits). Nor may a change announced meanwhile escape: a
// mount that announces a name the command then links or renames would
// leave the file's new name unannounced. So the last look at the dirty
// mounts and the hold of the names are one step: a mount the look finds
// concerned after the recall announced after the command began, which
// need not wait for it, and the command's names become its own
// (announced with its epoch); a mount announcing after the step sees the
// hold (MountDirty). The caller's own changes concerned by its command
// take its names too (its rename or link of a file it closed behind
// gives that file a name it never announced). It returns the release,
// run once the command is applied (or failed).
func (s *Service) holdNames(ctx context.Context, self string, sc *scope) func() {
	keys := sc.names
	t := s.sessions()
	for attempt := 0; ; attempt++ {
		var rs []recall
		t.mu.Lock()
		for _, k := range keys {
			c, ok := t.claims[k]
			if !ok || c.ms.id == self {
				continue
			}
			_, live := t.m[c.ms]
			c.ms.mu.Lock()
			held := live && c.ms.cleaned < c.epoch
			out := c.ms.out
			c.ms.mu.Unlock()
			if !held {
				delete(t.claims, k)
			} else if !slices.ContainsFunc(rs, func(r recall) bool { return r.ms == c.ms }) {
				rs = append(rs, recall{c.ms, c.epoch, out})
			}
		}
		dirty := t.concerned(self, sc)
		if len(rs) == 0 && (len(dirty) == 0 || attempt > 0) {
			for _, r := range dirty {
				r.ms.mu.Lock()
				for _, k := range keys {
					r.ms.mark(k, r.ms.dirty)
				}
				r.ms.mu.Unlock()
			}
			if own := t.byID(self); own != nil && t.dirty.Load() != 0 {
				own.mu.Lock()
				if own.concerns(sc) > 0 {
					for _, k := range keys {
						own.mark(k, own.dirty)
					}
				}
				own.mu.Unlock()
			}
			for _, k := range keys {
				t.held[k]++
			}
			t.mu.Unlock()
			if len(keys) == 0 {
				return func() {}
			}
			return func() {
				t.mu.Lock()
				for _, k := range keys {
					if t.held[k]--; t.held[k] <= 0 {
						delete(t.held, k)
					}
				}
				close(t.heldWake)
				t.heldWake = make(chan struct{})
				t.mu.Unlock()
			}
		}
		if attempt == 0 {
			for _, r := range dirty {
				if i := slices.IndexFunc(rs, func(o recall) bool { return o.ms == r.ms }); i >= 0 {
					rs[i].target = max(rs[i].target, r.target)
				} else {
					rs = append(rs, r)
				}
			}
		}
		t.mu.Unlock()
		if ctx.Err() != nil {
			return func() {} // the command fails on its own context
		}
		s.recall(ctx, rs)
	}
}
