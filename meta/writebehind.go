package meta

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cairn/pathname"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Write-behind. A mount may answer close() before it has committed what
// was written (small files cost one synchronous create instead of three
// synchronous commits). It first tells meta it is dirty (MountDirty, one
// round trip when it turns dirty). Before meta serves any other client's
// read or change of namespace data, it asks every dirty mount to commit
// everything (Event.mount_flush on the session) and waits for its clean
// acknowledgement, so close-to-open holds across mounts and through the
// HTTP API: whoever looks after a close sees what it closed. A mount's own
// write-behind commits carry DrainHeader and never wait for others' flushes
// (two dirty mounts would otherwise wait for each other).

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
	self.mu.Lock()
	if req.Epoch > self.dirty {
		self.dirty = req.Epoch
	}
	if len(others) == 0 && req.Epoch > self.unannounced {
		// Alone: the mount announces no further path in this epoch.
		self.unannounced = req.Epoch
	}
	self.mu.Unlock()
	t.dirty.Add(1)
	t.notices++
	id := t.notices
	t.mu.Unlock()
	resp := &metapb.MountDirtyResponse{Alone: len(others) == 0}
	if req.Ns == "" {
		return resp, nil
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
		close(ms.wake)
		ms.wake = make(chan struct{})
	}
	ms.mu.Unlock()
}

// recallDirty makes every dirty mount other than the caller commit its
// written-behind changes before a data call is served.
func (s *Service) recallDirty(ctx context.Context, fullMethod string) {
	t := s.sessions()
	if t.dirty.Load() == 0 || !DataMethod(fullMethod) {
		return
	}
	var self string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if len(md.Get(DrainHeader)) > 0 {
			return
		}
		if v := md.Get(SessionHeader); len(v) > 0 {
			self = v[0]
		}
	}
	t.mu.Lock()
	var dirty []recall
	any := false
	for ms := range t.m {
		ms.mu.Lock()
		if ms.dirty > ms.cleaned {
			any = true
			if ms.id != self {
				// Only what was closed before this call began must be
				// seen: later closes on a busy mount do not hold it up.
				dirty = append(dirty, recall{ms, ms.dirty, ms.out})
			}
		}
		ms.mu.Unlock()
	}
	if !any {
		t.dirty.Store(0) // nobody is: skip the scan until the next MountDirty
	}
	t.mu.Unlock()
	s.recall(ctx, dirty)
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
	deadline, cancel := context.WithTimeout(ctx, RecallTimeout)
	defer cancel()
	for _, r := range rs {
		if r.out == nil || r.out.send(&metapb.Event{MountFlush: true}) != nil {
			r.ms.cancel()
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

// holdNames makes a synchronous command honour the create claims of
// other mounts, atomically with its own check: the check meta makes when
// it applies the command (the name is free, a rename's target...) must
// not race a claim granted meanwhile, which lets another mount answer a
// create of the same name behind. So before the command runs, every live
// claim another mount holds on a name the request names is recalled (the
// holder commits its queued create; the command then meets it in meta),
// and until the command has run no claim on those names is granted
// (claimName waits). Which commands and which names is read from the
// request (classify.go's rule: a command naming a path in a namespace),
// not from a list. The caller's own claims and a mount's write-behind
// commits (DrainHeader) pass. It returns the release, run once the
// command is applied (or failed).
func (s *Service) holdNames(ctx context.Context, method string, req any) func() {
	m, ok := req.(proto.Message)
	if !ok || !commandMethods[method] || !dataMethods[method] {
		return func() {}
	}
	var self string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if len(md.Get(DrainHeader)) > 0 {
			return func() {}
		}
		if v := md.Get(SessionHeader); len(v) > 0 {
			self = v[0]
		}
	}
	keys := requestNames(m.ProtoReflect(), nil, 0)
	if len(keys) == 0 {
		return func() {}
	}
	t := s.sessions()
	for {
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
		if len(rs) == 0 {
			for _, k := range keys {
				t.held[k]++
			}
			t.mu.Unlock()
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
		t.mu.Unlock()
		if ctx.Err() != nil {
			return func() {} // the command fails on its own context
		}
		s.recall(ctx, rs)
	}
}

// requestNames appends to keys the nameKey of every path m names: in each
// message, a namespace field (ns, bucket, *_ns) with the path fields
// beside it (path, key, from, to, *_path), at any depth.
func requestNames(m protoreflect.Message, keys []string, depth int) []string {
	if depth > 4 {
		return keys
	}
	var ns string
	var paths []string
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		n := string(f.Name())
		switch {
		case f.IsList() && f.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				keys = requestNames(l.Get(i).Message(), keys, depth+1)
			}
		case f.IsMap() || f.IsList():
		case f.Kind() == protoreflect.MessageKind:
			keys = requestNames(v.Message(), keys, depth+1)
		case f.Kind() != protoreflect.StringKind:
		case n == "ns" || n == "bucket" || strings.HasSuffix(n, "_ns"):
			ns = v.String()
		case n == "path" || n == "key" || n == "from" || n == "to" || strings.HasSuffix(n, "_path"):
			paths = append(paths, v.String())
		}
		return true
	})
	if ns != "" {
		for _, p := range paths {
			keys = append(keys, nameKey(ns, p))
		}
	}
	return keys
}
