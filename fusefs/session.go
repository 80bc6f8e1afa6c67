package fusefs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"google.golang.org/grpc/metadata"

	"cairn/meta"
	"cairn/proto/metapb"
)

// session follows meta's MountSession stream. Every event drops the
// entries it names, here and in the kernel, before it is acknowledged;
// meta answers the writer only after that acknowledgement. Caches are
// trusted only while the session is live: established, proven by its
// first event, and heard from within half a lease. A lost stream, a gap in
// the sequence or silence drops everything (generation moves on).
type session struct {
	m  *Mount
	id string

	gen   atomic.Uint64 // moves at every reset: cached state of older generations is dead
	ep    atomic.Uint64 // moves at every event: answers fetched across one are not cached
	heard atomic.Int64  // unix nanoseconds of meta's last message
	up    atomic.Bool

	steering atomic.Bool // a call finding the meta leader is out (run)

	last   atomic.Uint64                  // sequence of the last event received
	sendMu sync.Mutex                     // one sender at a time on the stream
	out    metapb.Meta_MountSessionClient // the stream while up (sendMu)

	locked kernelQueue // kernel notifications that take kernel locks (notifyKernel)

	mu  sync.Mutex
	own map[string]*ownOp // ns\x00path -> this mount's mutations in flight
	// expect holds, per path, the sequence of this mount's own change
	// whose event has not arrived yet (the reply often outruns the
	// stream): events up to it are this mount's own.
	expect map[string]uint64
}

// ownOp holds the events for a path this mount is changing itself: they
// are its own, and the kernel already knows (it asked for the change);
// applying them would only throw away what the reply is about to cache.
// Events numbered past the reply's are someone else's and are applied
// when the reply arrives.
type ownOp struct {
	n    int
	held []*metapb.Event
}

func newSession(m *Mount) *session {
	b := make([]byte, 12)
	rand.Read(b)
	return &session{m: m, id: hex.EncodeToString(b), own: map[string]*ownOp{}, expect: map[string]uint64{}}
}

func (s *session) live() bool {
	return s.up.Load() && time.Since(time.Unix(0, s.heard.Load())) < meta.SessionLease/2
}

func (s *session) generation() uint64 { return s.gen.Load() }
func (s *session) epoch() uint64      { return s.ep.Load() }

func ownKey(ns, p string) string { return ns + "\x00" + p }

// mutating registers this mount's change of paths in ns; done(seq), with
// the reply's sequence (0: unknown), releases them. It reports whether
// another client's change of them came after this one: its event was
// acknowledged while held here and is applied on another goroutine, so a
// caller still holding the node's lock must not trust the reply it just
// recorded (that client's call may already have returned).
func (s *session) mutating(ns string, paths ...string) (done func(seq uint64) (later bool)) {
	s.mu.Lock()
	for _, p := range paths {
		o := s.own[ownKey(ns, p)]
		if o == nil {
			o = &ownOp{}
			s.own[ownKey(ns, p)] = o
		}
		o.n++
	}
	s.mu.Unlock()
	return func(seq uint64) bool {
		var later []*metapb.Event
		s.mu.Lock()
		for _, p := range paths {
			k := ownKey(ns, p)
			o := s.own[k]
			if o == nil {
				continue
			}
			for _, e := range o.held {
				if seq == 0 || e.Seq > seq {
					later = append(later, e)
				}
			}
			o.held = nil
			if o.n--; o.n == 0 {
				delete(s.own, k)
			}
			if seq > s.last.Load() {
				s.expect[k] = max(s.expect[k], seq)
			}
		}
		s.mu.Unlock()
		if len(later) == 0 {
			return false
		}
		// Applied on another goroutine: callers release their paths while
		// holding node locks (a flush answers under node.mu), and applying
		// an event takes the locks of the nodes it names, which deadlocked
		// two mounts writing one file. An event is only a drop of cached
		// state, so arriving a moment later (or after a newer event) leaves
		// the same caches; the kernel side is asynchronous anyway (a
		// notification from inside a FUSE operation may need the very
		// locks the kernel holds for it).
		go func() {
			for _, e := range later {
				s.apply(e, false)
			}
		}()
		return true
	}
}

func (s *session) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	var last uint64
	started := time.Now().UnixNano()
	for ctx.Err() == nil {
		err := s.follow(ctx, &last)
		s.reset()
		if ctx.Err() != nil {
			return
		}
		s.m.log.Debug("mount: session lost", "err", err)
		if s.heard.Load() > started {
			backoff = 50 * time.Millisecond // it was up: try again at once
		}
		// A stream refused by a member of a meta group that does not
		// lead moves nothing: only unary calls follow the leader a
		// refusal names (meta/failover.go). So an idle mount (no other
		// calls) kept sending its session to a follower after a leader
		// change, while the new leader's grace for locks ran out. One
		// cheap call finds the leader for the next attempt (beside the
		// back-off: a meta that is down must not slow the reconnect).
		if s.steering.CompareAndSwap(false, true) {
			go func() {
				defer s.steering.Store(false)
				lctx, cancel := context.WithTimeout(ctx, meta.SessionLease)
				defer cancel()
				s.m.meta.Info(lctx, &metapb.Empty{})
			}()
		}
		started = time.Now().UnixNano()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (s *session) follow(ctx context.Context, last *uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, meta.SessionHeader, s.id)
	stream, err := s.m.meta.MountSession(ctx)
	if err != nil {
		return err
	}
	s.sendMu.Lock()
	// With the locks held here: a new meta leader takes them back.
	err = stream.Send(&metapb.MountSessionMsg{Session: s.id, Locks: s.m.locks.all()})
	if err == nil {
		// The files open here, again: a new session (or meta after a
		// restart) must know them before anything is unlinked.
		for _, ino := range s.m.openInos() {
			if err = stream.Send(&metapb.MountSessionMsg{Open: ino}); err != nil {
				break
			}
		}
	}
	if err == nil {
		s.out = stream
	}
	s.sendMu.Unlock()
	if err != nil {
		return err
	}
	defer func() {
		s.sendMu.Lock()
		s.out = nil
		s.sendMu.Unlock()
	}()
	go func() {
		// Silence for half a lease ends the session: meta may already
		// be answering writers without this mount's acknowledgement.
		t := time.NewTicker(meta.LeaseBeat / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if s.up.Load() && !s.live() {
					cancel()
					return
				}
			}
		}
	}()
	first := true
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		s.heard.Store(time.Now().UnixNano())
		if ev.MountFlush {
			o := s.m.stats.Op("recall")
			o.Calls.Add(1) // shown in .cairn-stats: each waits for this mount's queue
			// Another client is about to look: commit everything left
			// behind, then say so (not on this goroutine, which must keep
			// acknowledging the events those commits cause elsewhere).
			go func() {
				start := time.Now()
				e := s.m.wb.drain()
				o.Nanos.Add(int64(time.Since(start))) // avg-us: how long the caller waited for this mount
				s.sendMu.Lock()
				stream.Send(&metapb.MountSessionMsg{Clean: e})
				s.sendMu.Unlock()
			}()
			continue
		}
		if ev.MountNotice != 0 {
			// Another mount changed ns/path behind: drop it like a
			// change, so that the next look asks meta.
			s.apply(ev, true)
			s.sendMu.Lock()
			err := stream.Send(&metapb.MountSessionMsg{NoticeAck: ev.MountNotice})
			s.sendMu.Unlock()
			if err != nil {
				return err
			}
			continue
		}
		if ev.Seq == 0 && !ev.Reset_ {
			continue // heartbeat
		}
		gap := *last != 0 && ev.Seq != *last+1 && !ev.Reset_
		if first || ev.Reset_ || gap {
			s.reset()
			if first || ev.Reset_ {
				// Meta holds this mount's dirty epoch with the session
				// it had: a new one starts clean there.
				s.m.wb.sessionUp()
			}
			first = false
			s.up.Store(true)
		}
		*last = ev.Seq
		s.last.Store(ev.Seq)
		if !ev.Reset_ {
			s.apply(ev, true)
		}
		s.sendMu.Lock()
		err = stream.Send(&metapb.MountSessionMsg{Ack: ev.Seq})
		s.sendMu.Unlock()
		if err != nil {
			return err
		}
	}
}

// send sends m on the session stream if it is up; else the next session
// carries it (opens are announced again at its start).
func (s *session) send(m *metapb.MountSessionMsg) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.out != nil {
		s.out.Send(m)
	}
}

// reset drops everything cached, here and (asynchronously) in the kernel.
func (s *session) reset() {
	s.m.stats.Op("session-reset").Calls.Add(1) // shown in .cairn-stats: each drops every cache
	s.up.Store(false)
	s.gen.Add(1)
	s.ep.Add(1)
	if s.m.root == nil {
		return
	}
	go forgetTree(s.m.root)
}

// forgetTree tells the kernel to drop every entry below dir, but for the
// nodes with changes queued here (write-behind) and the directories
// above them: their local record is newer than meta's, and a kernel that
// forgot them would look them up in a meta that (restarted, or before the
// queued commit lands) does not have them yet, and answer ENOENT for a
// file this mount created and closed. It reports whether it kept any.
func forgetTree(dir *fs.Inode) (kept bool) {
	for name, ch := range dir.Children() {
		keep := false
		if ch.IsDir() {
			keep = forgetTree(ch)
		}
		if n, ok := ch.Operations().(*node); ok && n.busy() {
			keep = true
		}
		if keep {
			kept = true
			continue
		}
		dir.NotifyEntry(name)
	}
	return kept
}

// apply drops what ev names. With wait, the kernel's attribute
// invalidations are waited for (see notifyKernel).
func (s *session) apply(ev *metapb.Event, wait bool) {
	if ev.Ino != 0 {
		s.applyIno(ev, wait)
		return
	}
	if wait && ev.MountNotice == 0 {
		k := ownKey(ev.Ns, ev.Path)
		s.mu.Lock()
		o := s.own[k]
		if o != nil {
			o.held = append(o.held, ev)
		}
		x, mine := s.expect[k]
		mine = mine && ev.Seq <= x
		if mine && ev.Seq == x {
			delete(s.expect, k)
		}
		if len(s.expect) > 4096 {
			for k, x := range s.expect {
				if x <= ev.Seq {
					delete(s.expect, k)
				}
			}
		}
		s.mu.Unlock()
		if o != nil || mine {
			return // the operation keeps this mount's caches current itself
		}
	}
	s.ep.Add(1)
	var attrs, locked []func()
	if ev.Namespace {
		if l, ok := s.m.rootOps().(*nsList); ok {
			attrs = append(attrs, func() { l.NotifyContent(-1, 0) })
			locked = append(locked, func() { l.NotifyEntry(ev.Ns) })
		}
	} else {
		n := s.find(ev.Ns, ev.Path)
		if n != nil {
			n.invalidate()
			attrs = append(attrs, func() { n.NotifyContent(-1, 0) })
			locked = append(locked, func() { n.NotifyContent(0, 0) })
		}
		if ev.Path != "" {
			if parent := s.find(ev.Ns, parentOf(ev.Path)); parent != nil {
				parent.invalidate()
				name := ev.Path[strings.LastIndexByte(ev.Path, '/')+1:]
				if n != nil {
					dropAlias(parent, name, n)
				}
				attrs = append(attrs, func() { parent.NotifyContent(-1, 0) })
				locked = append(locked, func() { parent.NotifyEntry(name) })
			}
		}
	}
	s.notifyKernel(attrs, locked, wait)
}

// notifyKernel tells the kernel to drop what an event changed: attrs
// are attribute invalidations, which take no lock in the kernel; locked
// are the drops of entries (the kernel takes the directory's lock) and
// of cached pages (it takes their locks). With wait, the attributes are
// waited for (briefly: the kernel may be slow, but nothing of this mount
// holds what they need), the locked ones never: a request this mount is
// serving may hold that very lock while it waits for meta (a create
// holds its directory's through the create claim, which waits for the
// other mounts' acknowledgements; a lookup or permission check holds it
// through a call that recalls another mount, whose commits wait for this
// mount's acknowledgements), so an acknowledgement that waited for them
// stalled both mounts (200 ms per event before, which under two mounts
// creating in one directory grew into calls timing out). Nothing stale
// is served meanwhile: this mount's own caches are dropped before the
// acknowledgement, and an entry the kernel still holds leads to an
// inode whose attributes are invalid, so any use of it asks this mount,
// which asks meta (and the kernel drops cached pages whose file changed
// when it fetches the attributes: auto_inval_data). The kernel applies
// the locked ones as soon as the lock holder returns; they run one at a
// time, each after its event's attributes (as when each was waited for),
// on one goroutine (not one thread blocked per event).
func (s *session) notifyKernel(attrs, locked []func(), wait bool) {
	done := make(chan struct{})
	go func() {
		for _, f := range attrs {
			f()
		}
		close(done)
		s.locked.add(locked) // after the attributes, as when one call did both
	}()
	if wait {
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// kernelQueue runs kernel notifications one at a time, in the order
// added, on one goroutine started when there are some.
type kernelQueue struct {
	mu      sync.Mutex
	q       []func()
	running bool
}

func (k *kernelQueue) add(fs []func()) {
	if len(fs) == 0 {
		return
	}
	k.mu.Lock()
	k.q = append(k.q, fs...)
	start := !k.running
	k.running = true
	k.mu.Unlock()
	if start {
		go k.run()
	}
}

func (k *kernelQueue) run() {
	for {
		k.mu.Lock()
		if len(k.q) == 0 {
			k.q, k.running = nil, false
			k.mu.Unlock()
			return
		}
		f := k.q[0]
		k.q[0] = nil
		k.q = k.q[1:]
		k.mu.Unlock()
		f()
	}
}

// dropAlias unlinks name from parent in the tree paths are computed from
// when n, a file with several names, would be found by it: another mount
// changed that name and may have removed it (a hard link deleted or
// renamed away), and a path through a name that is gone makes every call
// about the file fail with ENOENT although it is still there by its other
// names. A later lookup of the name links it again; a file whose only
// known name this is keeps it.
func dropAlias(parent *node, name string, n *node) {
	if n.isDir() {
		return
	}
	n.mu.Lock()
	links := n.attr != nil && n.attr.Nlink > 1
	n.mu.Unlock()
	if !links {
		return
	}
	if nm, p := n.Parent(); p != &parent.Inode || nm != name {
		return // paths do not go through this name
	}
	parent.RmChild(name)
	if _, p := n.Parent(); p == nil {
		parent.AddChild(name, &n.Inode, false)
	}
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// find returns the node at ns/p if the kernel's tree holds it.
func (s *session) find(ns, p string) *node {
	s.m.mu.Lock()
	root := s.m.nsRoot[ns]
	s.m.mu.Unlock()
	if root == nil {
		return nil
	}
	cur := &root.Inode
	for p != "" {
		var name string
		if i := strings.IndexByte(p, '/'); i >= 0 {
			name, p = p[:i], p[i+1:]
		} else {
			name, p = p, ""
		}
		if cur = cur.GetChild(name); cur == nil {
			return nil
		}
	}
	n, _ := cur.Operations().(*node)
	return n
}
