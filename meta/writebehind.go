package meta

import (
	"context"
	"path"
	"time"

	"google.golang.org/grpc/metadata"

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

// dataMethods are the calls that read or change namespace data.
var dataMethods = map[string]bool{
	"Resolve": true, "BatchResolve": true, "List": true,
	"Mkdir": true, "Commit": true, "CommitBatch": true, "Append": true, "Delete": true, "Rename": true, "SetAttr": true,
	"Symlink": true, "Link": true, "SetXattr": true, "Mknod": true, "DeleteNamespace": true,
}

// DataMethod reports whether the call of full method name (or its bare
// name) reads or changes namespace data.
func DataMethod(method string) bool { return dataMethods[path.Base(method)] }

func (s *Service) MountDirty(ctx context.Context, req *metapb.MountDirtyRequest) (*metapb.MountDirtyResponse, error) {
	t := s.sessions()
	t.mu.Lock()
	var self *mountSession
	var others []*mountSession
	for ms := range t.m {
		if ms.id == req.Session {
			self = ms
		} else {
			others = append(others, ms)
		}
	}
	if self == nil {
		t.mu.Unlock()
		// Without a live session meta could not recall the changes: the
		// mount must commit synchronously.
		return nil, errors.E(errors.Op("meta.MountDirty"), errors.Unavailable, "no live session "+req.Session)
	}
	self.mu.Lock()
	if req.Epoch > self.dirty {
		self.dirty = req.Epoch
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
	type recall struct {
		ms     *mountSession
		target uint64
		out    *sessionStream
	}
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
	deadline, cancel := context.WithTimeout(ctx, SessionLease+10*time.Second)
	defer cancel()
	for _, r := range dirty {
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
