package fusefs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"cairn/meta"
	"cairn/proto/metapb"
)

// writeBehind runs the commits that close() and attribute changes leave
// behind: per inode in order, across inodes in parallel (meta's group
// commit then shares fsyncs). Before the first of them is queued the mount
// tells meta it is dirty; meta recalls (session Event.mount_flush) before
// any other client reads or changes namespace data, and the mount answers
// once everything queued so far is committed. So close() costs no round
// trip to meta or the data servers, and close-to-open still holds for
// every other client. Durability is fsync's (as on a local disk): a mount
// that dies loses what it had not committed, never more, and meta never
// holds a half-applied change.
type writeBehind struct {
	m   *Mount
	sem chan struct{}

	mu   sync.Mutex
	idle *sync.Cond // on mu: a unit of work was committed (or dropped)
	// Epochs. Work is queued in the open epoch (epoch, once it is past
	// cut), announced to meta before it is answered. A drain closes the
	// open epoch where it stands (cut) and waits only for the work queued
	// in it and before: work queued after it began goes into the next
	// epoch, which the next queued change announces afresh. So a recall
	// ends in the time the queue of the moment takes, however fast this
	// mount keeps queueing (it waited for an empty queue, which a busy
	// writer never left: the recall outlived the other mount's call,
	// which answered EIO).
	epoch   uint64          // the open (or last) epoch
	cut     uint64          // the last epoch a drain closed
	dirty   bool            // the open epoch is announced to meta
	alone   bool            // no other session when this epoch began: paths need no notice
	noticed map[string]bool // paths other mounts were told of in this epoch
	pending int             // chains queued or running, all inodes
	// bytes is the unflushed writes the queued flushes hold (chain.bytes
	// summed): with pending, what a recall must commit (room).
	bytes int64
	// The peaks of pending and bytes, and the longest drain (recall or
	// sync): what the bounds (Config.WritebackMax*) are measured by.
	peakPending int
	peakBytes   int64
	longest     time.Duration
	// units counts, by epoch, the work queued and not yet committed: each
	// enqueue is one unit, counted from before its MountDirty is made
	// (without w.mu) until the chain's commit that carries it is done.
	units map[uint64]int
	// Drains run one at a time, as a group commit: the calls that arrive
	// while one runs share the next, which cuts when it starts. Each cut
	// makes the mount's next change of every path announce itself again
	// (a MountDirty round trip before close answers), so a recall per
	// look-up of a busy directory must not each cut. A drain so lasts at
	// most two queues of the moment.
	draining  bool
	drainSeq  uint64 // drains started
	drainDone uint64 // the last drain finished (drains finish in order)
	drained   uint64 // the epoch it reported clean

	inoMu        sync.Mutex
	inoNext, end uint64 // inode numbers reserved for local creates

	// parked chains hold only a create: they start with the file's first
	// flush (one commit creates it with its content) or a drain.
	parked map[*node]bool

	pack packer // commits of small files created here, in groups

	// Access times moved by reads, stored in batches (access.go).
	acc        *accessBatch  // the batch gathering (nil: none)
	accRunning bool          // a sender runs (sendAccesses)
	accKick    chan struct{} // send the gathering batch now

	// kept holds the nodes the kernel forgot while their work was still
	// queued (a closed file's dentry may be dropped at once). Their state
	// is newer than meta's, so the next lookup of the inode must revive
	// the node rather than build a new one from meta's record (which
	// showed an older size, and older content, on this very mount).
	keptMu sync.Mutex
	kept   map[uint64]*node

	mkdirs mkdirGate // mkdirs answered and not yet committed

	// made holds, by ns and path, the files and directories created here
	// whose create meta has not committed yet: meta does not know them,
	// so a lookup that misses the kernel's tree (the kernel forgot the
	// node or its directory) finds them here, not ENOENT from meta.
	madeMu    sync.Mutex
	madeCond  *sync.Cond // on madeMu: a queued create committed
	made      map[string]*node
	madeCount uint64 // creates queued so far (node.madeTicket)
}

// madeAt returns the node created here at ns/p whose create is queued.
func (w *writeBehind) madeAt(ns, p string) *node {
	w.madeMu.Lock()
	defer w.madeMu.Unlock()
	return w.made[ownKey(ns, p)]
}

// createDone forgets n's queued create (meta has it, or it failed). A
// node with a queued create is not renamed (rename settles it first), so
// it is where it was queued.
func (w *writeBehind) createDone(n *node) {
	q := n.f.queuedAt.Load()
	if q == nil {
		return
	}
	k := ownKey(n.ns, *q)
	w.madeMu.Lock()
	if w.made[k] == n {
		delete(w.made, k)
	}
	if d := n.madeIn; d != nil {
		delete(d.queuedKids, n)
		n.madeIn = nil
		w.madeCond.Broadcast()
	}
	w.madeMu.Unlock()
}

// kidsBefore waits until the creates queued in directory d before ticket
// t are committed, starting those that are parked. A directory's mtime
// set after its files were created (tar sets it last) must reach meta
// after their creates, whose commits move it.
func (w *writeBehind) kidsBefore(d *node, t uint64) {
	w.madeMu.Lock()
	defer w.madeMu.Unlock()
	for {
		var wait []*node
		for kid, kt := range d.queuedKids {
			if kt <= t {
				wait = append(wait, kid)
			}
		}
		if len(wait) == 0 {
			return
		}
		w.madeMu.Unlock()
		for _, kid := range wait {
			w.unpark(kid)
		}
		w.madeMu.Lock()
		if _, queued := d.queuedKids[wait[0]]; queued {
			w.madeCond.Wait() // createDone broadcasts under madeMu
		}
	}
}

// mkdirGate orders a mount's meta calls after the mkdirs it answered
// before them: mkdir answers the kernel at once (mkdirBehind) and commits
// in the background, and a call naming a path below a directory meta does
// not have yet would fail. Mkdirs commit one at a time in the order they
// were answered (a directory's parent first), and every other data call
// waits for the mkdirs answered before it began.
type mkdirGate struct {
	mu       sync.Mutex
	cond     *sync.Cond // on mu: done moved
	issued   uint64     // tickets handed out
	doneUpTo uint64     // tickets are done in order: this one and every one before
}

type mkdirKey struct{} // marks the context of a mkdir's own commit

// add hands out the next ticket (a mkdir answered).
func (g *mkdirGate) add() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.issued++
	return g.issued
}

// turn waits until every ticket before t is done.
func (g *mkdirGate) turn(t uint64) {
	g.mu.Lock()
	for g.doneUpTo < t-1 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// done marks ticket t done; its turn came first.
func (g *mkdirGate) done(t uint64) {
	g.mu.Lock()
	g.doneUpTo = t
	g.cond.Broadcast()
	g.mu.Unlock()
}

// wait returns once every mkdir answered so far is done.
func (g *mkdirGate) wait() {
	g.mu.Lock()
	for t := g.issued; g.doneUpTo < t; {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// OnForget keeps n if its work is queued (see writeBehind.kept).
func (n *node) OnForget() {
	n.m.untrack(n)
	w := n.m.wb
	w.keptMu.Lock()
	if n.busy() {
		w.kept[n.StableAttr().Ino] = n
	}
	w.keptMu.Unlock()
}

// revive returns the node kept for ino, if any; the caller links it into
// the tree again.
func (w *writeBehind) revive(ino uint64) *node {
	w.keptMu.Lock()
	defer w.keptMu.Unlock()
	n := w.kept[ino]
	delete(w.kept, ino)
	return n
}

// unkeep drops n from kept once its queue is empty (meta is current).
func (w *writeBehind) unkeep(n *node) {
	w.keptMu.Lock()
	if w.kept[n.StableAttr().Ino] == n {
		delete(w.kept, n.StableAttr().Ino)
	}
	w.keptMu.Unlock()
}

// allocIno returns an inode number reserved in meta for a local create
// (one MountReserve per 1,024 creates).
func (w *writeBehind) allocIno(ctx context.Context) (uint64, error) {
	w.inoMu.Lock()
	defer w.inoMu.Unlock()
	if w.inoNext == w.end {
		r, err := w.m.meta.MountReserve(ctx, &metapb.MountReserveRequest{Count: 1024})
		if err != nil {
			return 0, err
		}
		w.inoNext, w.end = r.First, r.First+uint64(r.Count)
	}
	w.inoNext++
	return w.inoNext - 1, nil
}

// chain is one inode's work left behind (node.wb, guarded by its own
// mutex so that a long flush holding node.mu does not block queueing).
// Work coalesces: a close and the chown, chmod and utimens after it
// become one Commit carrying the attributes.
type chain struct {
	mu     sync.Mutex
	create bool                   // created here, not yet in meta (Commit.ino)
	flush  bool                   // unflushed writes to commit
	attrs  *metapb.SetAttrRequest // attribute changes to commit (merged)
	done   chan struct{}          // non-nil while running; closed when idle
	err    error                  // the first failure, reported by the next fsync/close
	bytes  int64                  // unflushed bytes charged to writeBehind.bytes
	flying int64                  // of those, the ones the running round commits
	units  map[uint64]int         // the work gathered, by epoch (writeBehind.units)
	access *accessBatch           // the batch holding the file's atime (access.go)
}

// work is what enqueue adds to a chain.
type work struct {
	create bool
	in     *node // the directory a create is made in
	flush  bool
	bytes  int64 // the file's unflushed bytes when its flush was queued
	attrs  *metapb.SetAttrRequest
}

func mergeAttrs(old, nw *metapb.SetAttrRequest) *metapb.SetAttrRequest {
	if old == nil {
		return proto.Clone(nw).(*metapb.SetAttrRequest)
	}
	if nw.Mode != nil {
		old.Mode = nw.Mode
	}
	if nw.Uid != nil {
		old.Uid = nw.Uid
	}
	if nw.Gid != nil {
		old.Gid = nw.Gid
	}
	if nw.MtimeNs != nil {
		old.MtimeNs = nw.MtimeNs
	}
	if nw.AtimeNs != nil {
		old.AtimeNs = nw.AtimeNs
	}
	old.Access = old.Access && nw.Access // an access alone stays quiet
	return old
}

func newWriteBehind(m *Mount) *writeBehind {
	w := &writeBehind{m: m, sem: make(chan struct{}, 32), noticed: map[string]bool{}, parked: map[*node]bool{}, kept: map[uint64]*node{}, made: map[string]*node{}, units: map[uint64]int{}, accKick: make(chan struct{}, 1)}
	w.idle = sync.NewCond(&w.mu)
	w.madeCond = sync.NewCond(&w.madeMu)
	w.pack.w = w
	w.mkdirs.cond = sync.NewCond(&w.mkdirs.mu)
	return w
}

// enqueue queues f for n. It returns false when write-behind is off or meta
// could not be told (then the caller does the work itself).
func (w *writeBehind) enqueue(ctx context.Context, n *node, wk work) bool {
	p, err := n.path()
	if err != nil {
		return false
	}
	return w.enqueueAt(ctx, n, p, wk)
}

// enabled reports whether work may be left behind now.
func (w *writeBehind) enabled() bool { return !w.m.cfg.SyncClose && w.m.sess.live() }

// enqueueAt is enqueue for a node at path p (a node being created is not
// in the tree yet).
func (w *writeBehind) enqueueAt(ctx context.Context, n *node, p string, wk work) bool {
	if !w.enabled() {
		return false
	}
	w.mu.Lock()
	if !w.room(n, wk) {
		w.mu.Unlock()
		w.m.stats.Op("writeback-full").Calls.Add(1) // shown in .cairn-stats: each committed synchronously
		return false
	}
	n.f.queuedAt.Store(&p)
	k := ownKey(n.ns, p)
	if w.epoch == w.cut {
		// A drain closed the last epoch: this work opens the next.
		w.epoch++
		w.dirty = false
	}
	epoch := w.epoch
	w.units[epoch]++
	if !w.dirty || !w.alone && (!w.noticed[k] || wk.create) {
		// Meta learns this mount is dirty, and every other mount drops
		// the path, before the close (or chmod...) is answered. A create
		// or mkdir is answered here only with meta's grant (the name is
		// free, and no other mount holds a queued create of it): with
		// other mounts live, a create of a name another mount is
		// creating too is refused here, and made synchronously instead,
		// which answers EEXIST.
		//
		// Not under w.mu: MountDirty may wait for other mounts (their
		// notice acknowledgements, the recall of a claim), and the
		// mount's other creates need not queue behind it. The unit is
		// counted already: a drain that closes this epoch meanwhile
		// waits for it, so the epoch it reports clean covers the work
		// announced here.
		//
		// Not cut by the kernel's interrupt either (a signal landing on
		// the caller's thread; the Go runtime's preemption does): the
		// round trip is short and bounded (CallTimeout), and a close
		// whose announcement was cut would answer EINTR, which close(2)
		// passes to the program and nobody retries.
		w.mu.Unlock()
		r, err := w.m.meta.MountDirty(context.WithoutCancel(ctx), &metapb.MountDirtyRequest{Session: w.m.sess.id, Epoch: epoch, Ns: n.ns, Path: p, Create: wk.create})
		w.mu.Lock()
		if err != nil {
			w.unitsDone(epoch, 1)
			w.mu.Unlock()
			return false
		}
		if epoch > w.cut {
			// The epoch is still open (a drain that closed it has
			// forgotten its notices; the next work announces anew).
			switch {
			case !w.dirty:
				// Alone for the whole epoch: another session's first
				// look recalls this mount, which ends the epoch.
				w.alone = r.Alone
			case !r.Alone:
				w.alone = false // another session came while it was announced
			}
			w.dirty = true
			w.noticed[k] = true
		}
	}
	// Still under w.mu: a drain (meta's recall) must either see this
	// work pending or come before it was announced.
	w.madeMu.Lock()
	if wk.create {
		w.made[k] = n
		w.madeCount++
		if d := wk.in; d != nil {
			if d.queuedKids == nil {
				d.queuedKids = map[*node]uint64{}
			}
			d.queuedKids[n] = w.madeCount
			n.madeIn, n.madeTicket = d, w.madeCount
		}
	}
	if wk.attrs != nil && wk.attrs.MtimeNs != nil && n.isDir() {
		n.timesAfter = w.madeCount
	}
	w.madeMu.Unlock()
	c := &n.wb
	c.mu.Lock()
	if wk.isAccess() && c.done == nil {
		// An access alone: no chain, into the gathering batch
		// (access.go).
		c.mu.Unlock()
		w.gather(n, *wk.attrs.AtimeNs, map[uint64]int{epoch: 1})
		w.mu.Unlock()
		return true
	}
	c.create = c.create || wk.create
	c.flush = c.flush || wk.flush
	if wk.attrs != nil {
		c.attrs = mergeAttrs(c.attrs, wk.attrs)
	}
	// wk.bytes is all the file's unflushed bytes, the running round's
	// too until its commit lands: those are charged already (a close's
	// release, right after its flush started the round, charged them
	// twice, and the queue hit its bound at half its bytes).
	if more := wk.bytes - c.bytes - c.flying; more > 0 {
		w.bytes += more
		c.bytes += more
	}
	w.peakBytes = max(w.peakBytes, w.bytes)
	if c.units == nil {
		c.units = map[uint64]int{}
	}
	c.units[epoch]++
	switch {
	case c.done == nil && !c.flush && c.attrs == nil:
		c.done = make(chan struct{})
		w.pending++
		w.peakPending = max(w.peakPending, w.pending)
		w.parked[n] = true
	case c.done == nil:
		c.done = make(chan struct{})
		w.pending++
		w.peakPending = max(w.peakPending, w.pending)
		go w.run(n)
	case w.parked[n] && c.flush:
		// Attribute changes alone leave a create parked: tar sets the
		// times, owner and mode of a file before closing it, and the
		// close's one commit carries them all.
		delete(w.parked, n)
		go w.run(n)
	}
	c.mu.Unlock()
	w.mu.Unlock()
	return true
}

// room reports whether wk may be queued for n (w.mu held). The queue is
// bounded, in chains and in the bytes they hold, so that a recall (which
// meta waits for only RecallTimeout before it cuts the session off, and
// with it everything this mount answered) always has a bounded amount to
// commit, and memory stays bounded however fast a program writes. Work
// past the bound is not waited for here but done synchronously by the
// caller: a wait would hold the caller's kernel locks, and the chains it
// waits for may themselves be waiting (a parked create commits only at
// its close, which may be this very caller's; a chain's calls wait for
// the mkdirs answered before them). Work joining a chain that is already
// queued takes no room but its new bytes: a created file's close always
// may join its parked create, which therefore never deadlocks a full
// queue. One file's bytes are always admitted into an empty queue
// (Config.DirtyMax bounds them).
func (w *writeBehind) room(n *node, wk work) bool {
	c := &n.wb
	c.mu.Lock()
	chained := c.done != nil
	more := wk.bytes - c.bytes - c.flying
	c.mu.Unlock()
	if !chained && wk.isAccess() {
		return w.accessRoom()
	}
	if !chained && w.pending >= w.m.cfg.WritebackMaxEntries {
		return false
	}
	return more <= 0 || w.bytes == 0 || w.bytes+more <= w.m.cfg.WritebackMaxBytes
}

// gauges is the queue's line of the stats file: a comment below the
// table, which parsers of the table skip.
func (w *writeBehind) gauges() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("# write-behind: %d queued, %d bytes (bounds %d, %d); peaks %d, %d bytes; longest drain %v\n",
		w.pending, w.bytes, w.m.cfg.WritebackMaxEntries, w.m.cfg.WritebackMaxBytes, w.peakPending, w.peakBytes, w.longest.Round(time.Millisecond))
}

// kidsQueued waits until the creates queued so far in directory d are
// committed: a directory's mtime set synchronously (the queue was full)
// must still reach meta after them (timesAfterKids).
func (w *writeBehind) kidsQueued(d *node) {
	w.madeMu.Lock()
	t := w.madeCount
	w.madeMu.Unlock()
	w.kidsBefore(d, t)
}

// unitsDone counts n units of epoch e committed (w.mu held).
func (w *writeBehind) unitsDone(e uint64, n int) {
	if w.units[e] -= n; w.units[e] <= 0 {
		delete(w.units, e)
	}
	w.idle.Broadcast()
}

// queuedUpTo reports whether work of epoch e or earlier is queued
// (w.mu held).
func (w *writeBehind) queuedUpTo(e uint64) bool {
	for ue := range w.units {
		if ue <= e {
			return true
		}
	}
	return false
}

// unpark starts n's chain if it is parked.
func (w *writeBehind) unpark(n *node) {
	w.mu.Lock()
	if w.parked[n] {
		delete(w.parked, n)
		go w.run(n)
	}
	w.mu.Unlock()
}

// chainContext is the context of work left behind, charged to the stats
// line name: its meta calls never wait for recalls (see meta.DrainHeader)
// and never wait for the chains they run in (settle).
func (w *writeBehind) chainContext(name string) (context.Context, func()) {
	ctx := w.m.begin(context.Background(), name)
	ctx = metadata.AppendToOutgoingContext(ctx, meta.DrainHeader, "1")
	ctx = context.WithValue(ctx, inChainKey{}, true)
	return ctx, func() { end(ctx) }
}

func (w *writeBehind) run(n *node) {
	c := &n.wb
	ctx, finish := w.chainContext("writebehind")
	for {
		c.mu.Lock()
		create, flush, attrs, units, bytes := c.create, c.flush, c.attrs, c.units, c.bytes
		if create {
			flush = true // the create is the first flush's commit
		}
		c.create, c.flush, c.attrs, c.units, c.bytes = false, false, nil, nil, 0
		c.flying = bytes
		if !flush && attrs == nil {
			close(c.done)
			c.done, c.flying = nil, 0
			c.mu.Unlock()
			w.commitUnits(units, bytes) // none
			break
		}
		c.mu.Unlock()
		if (work{create: create, flush: flush, attrs: attrs}).isAccess() {
			// An access that came while the chain ran, alone in this
			// round: it goes with the batch (access.go), its units too.
			w.mu.Lock()
			w.gather(n, *attrs.AtimeNs, units)
			w.mu.Unlock()
			c.mu.Lock()
			c.flying = 0
			c.mu.Unlock()
			w.commitUnits(nil, bytes)
			continue
		}
		w.runOnce(ctx, n, create, flush, attrs)
		c.mu.Lock()
		c.flying = 0
		c.mu.Unlock()
		w.commitUnits(units, bytes)
	}
	finish()
	if !n.busy() { // else the access batch holding its atime unkeeps it
		w.unkeep(n)
	}
	w.mu.Lock()
	if w.pending--; w.pending == 0 {
		w.idle.Broadcast()
	}
	w.mu.Unlock()
}

// commitUnits counts the units of a chain's round committed, and the
// bytes it held.
func (w *writeBehind) commitUnits(units map[uint64]int, bytes int64) {
	if len(units) == 0 && bytes == 0 {
		return
	}
	w.mu.Lock()
	w.bytes -= bytes
	for e, k := range units {
		w.unitsDone(e, k)
	}
	w.mu.Unlock()
}

// runOnce commits one round of n's chain: what it gathered until now.
func (w *writeBehind) runOnce(ctx context.Context, n *node, create, flush bool, attrs *metapb.SetAttrRequest) {
	if create && n.isDir() {
		// A directory made here: its Mkdir first, then whatever
		// attributes were changed meanwhile. Not counted against
		// w.sem: commits holding its slots may be waiting for this
		// very mkdir (mkdirGate).
		w.mkdirs.turn(n.mkdirTicket)
		n.fail(retry(ctx, func() error { return n.commitMkdir(ctx) }))
		w.mkdirs.done(n.mkdirTicket)
		w.createDone(n)
		if attrs != nil {
			w.timesAfterKids(n, attrs)
			w.sem <- struct{}{}
			n.fail(retry(ctx, func() error { return n.commitBehind(ctx, false, attrs) }))
			<-w.sem
		}
		return
	}
	if create && w.pack.commit(n, mtimeOf(attrs)) {
		w.createDone(n)
		return // committed with others (pack.go), attributes too
	}
	if n.isDir() {
		w.timesAfterKids(n, attrs)
	}
	if attrs != nil && attrs.AtimeNs != nil && !attrs.Access {
		// An atime set (utimensat) after a read's: stored after it
		// (meta would keep the later of the two).
		w.waitAccess(n)
	}
	// Retried while meta is unreachable: the close was answered, so
	// giving up would lose it. Committing the same extents or
	// attributes twice leaves the same file.
	w.sem <- struct{}{}
	n.fail(retry(ctx, func() error { return n.commitBehind(ctx, flush, attrs) }))
	<-w.sem
	if create {
		w.createDone(n)
	}
}

// mtimeOf is the mtime a commit carries for attrs (0: the commit's time).
func mtimeOf(attrs *metapb.SetAttrRequest) int64 {
	if attrs != nil && attrs.MtimeNs != nil {
		return *attrs.MtimeNs
	}
	return 0
}

// commitBehind commits what a chain gathered: the writes with the
// attributes in one Commit (which also creates a file created here), or
// the attributes alone.
func (n *node) commitBehind(ctx context.Context, flush bool, attrs *metapb.SetAttrRequest) error {
	n.mu.Lock()
	creating := n.f.creating
	n.mu.Unlock()
	if creating {
		mtime := mtimeOf(attrs)
		committed, err := n.flushAt(ctx, mtime)
		if err != nil || committed {
			return err
		}
		return n.commitCreate(ctx, mtime)
	}
	if flush {
		committed, err := n.flushAt(ctx, mtimeOf(attrs))
		if err != nil || committed {
			return err // the commit carried the node's attributes
		}
	}
	if attrs == nil {
		return nil
	}
	p, err := n.path()
	if err != nil {
		return err
	}
	r := proto.Clone(attrs).(*metapb.SetAttrRequest)
	r.Ns, r.Path, r.OpenIno = n.ns, p, n.openIno()
	done := n.m.sess.mutating(n.ns, p)
	na, err := n.m.meta.SetAttr(ctx, r)
	if err != nil {
		done(0)
		return err
	}
	seq := na.Seq
	n.mu.Lock()
	if a := n.attr; a != nil && a.Ino == na.Ino && a.Version > na.Version {
		// A commit of this mount reached meta after this call and its
		// answer was installed first (an access time stored while a
		// close's flush went on): meta holds that record, which carried
		// this mount's attributes too. Laid over it, this answer would
		// give the file its size before the flush (fsx: a file truncated,
		// read, written past its end and reopened showed the truncated
		// size).
		na = a
	} else {
		na = n.keepQueued(na)
		n.attr = na // the content is as it was: extents stay
	}
	n.mu.Unlock()
	n.tellParent(na)
	done(seq)
	return nil
}

// keepQueued returns a commit's answer na with the attributes changed
// here while it was on its way, if their own commit is still queued: they
// are newer than na (n.mu held).
func (n *node) keepQueued(na *metapb.Inode) *metapb.Inode {
	n.wb.mu.Lock()
	queued, access := n.wb.attrs != nil, n.wb.access != nil
	n.wb.mu.Unlock()
	switch {
	case queued:
		na = proto.Clone(na).(*metapb.Inode)
		na.Mode, na.Uid, na.Gid, na.MtimeNs, na.AtimeNs = n.attr.Mode, n.attr.Uid, n.attr.Gid, n.attr.MtimeNs, n.attr.AtimeNs
	case access && n.attr != nil && n.attr.AtimeNs > na.AtimeNs:
		na = proto.Clone(na).(*metapb.Inode)
		na.AtimeNs = n.attr.AtimeNs // its batch is on its way
	}
	return na
}

// fail records an error of a queued commit for the next fsync or close.
func (n *node) fail(err error) {
	if err == nil {
		return
	}
	n.m.log.Warn("mount: write-behind commit failed", "ns", n.ns, "ino", n.StableAttr().Ino, "err", err)
	n.wb.mu.Lock()
	if n.wb.err == nil {
		n.wb.err = err
	}
	n.wb.mu.Unlock()
}

type inChainKey struct{}

// settle waits until n's queue is empty and returns (and clears) the first
// error a queued commit met. Work running in the queue itself does not
// wait (it would wait for itself).
func (n *node) settle(ctx context.Context) error {
	if ctx.Value(inChainKey{}) != nil {
		return nil
	}
	n.waitQueue()
	n.wb.mu.Lock()
	err := n.wb.err
	n.wb.err = nil
	n.wb.mu.Unlock()
	return err
}

// waitQueue waits until n's queue is empty (not from inside the chain),
// its atime batch included: meta's record then has everything this mount
// changed.
func (n *node) waitQueue() {
	n.waitChain()
	n.m.wb.waitAccess(n)
}

// waitChain waits until n's chain is done, not for an atime batch.
func (n *node) waitChain() {
	n.m.wb.unpark(n)
	n.wb.mu.Lock()
	ch := n.wb.done
	n.wb.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// busy reports whether n has queued work (its local state is ahead of meta).
func (n *node) busy() bool {
	n.wb.mu.Lock()
	defer n.wb.mu.Unlock()
	return n.wb.done != nil || n.wb.access != nil
}

// sessionUp starts a new announced state for a session that meta knows
// afresh (a new stream, or meta's reset): meta keeps a mount's dirty epoch
// with the session's stream, and a new one starts clean there, so meta no
// longer knew this mount was dirty while the mount, still in its epoch
// with the path noticed, announced none of its later closes either. Other
// mounts' reads then ran without recalling it and missed writes whose
// close had returned (TestConcurrentWritersTwoMounts, after the session
// was cut under load: a mount showed the other's writers' older rounds).
// The next queued change announces a new epoch (and its path) again, and
// what was queued before is committed now: meta could not recall it.
func (w *writeBehind) sessionUp() {
	w.mu.Lock()
	w.dirty = false
	clear(w.noticed)
	queued := len(w.units) > 0
	w.mu.Unlock()
	if queued {
		go w.drain()
	}
}

// drain waits until everything queued before it began is committed and
// returns the dirty epoch that covers; meta's recall is answered with
// it. It closes the open epoch first, so work queued meanwhile (a writer
// that keeps closing files) is not waited for: it goes into the next
// epoch, announced to meta before it is answered, and a later recall
// (whose target is that epoch) waits for it.
func (w *writeBehind) drain() uint64 {
	start := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	// Only a drain that starts from now on covers what was queued
	// before this call.
	want := w.drainSeq + 1
	for w.draining {
		w.idle.Wait()
	}
	if w.drainDone >= want {
		return w.drained // another call's drain started after this one came
	}
	w.draining = true
	w.drainSeq++
	e := w.epoch
	w.cut = e
	w.dirty = false
	clear(w.noticed)
	for n := range w.parked {
		delete(w.parked, n)
		go w.run(n)
	}
	w.kickAccess()
	for w.queuedUpTo(e) {
		w.idle.Wait()
	}
	w.draining = false
	w.longest = max(w.longest, time.Since(start))
	w.drainDone, w.drained = w.drainSeq, e
	w.idle.Broadcast()
	return e
}

// commitCreate commits an empty file created here (no write came).
func (n *node) commitCreate(ctx context.Context, mtime int64) error {
	p, err := n.path()
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.f.creating {
		return nil
	}
	a := n.attr
	if mtime == 0 {
		mtime = a.MtimeNs // the create's time, which stat showed
	}
	epoch := n.answerEpoch(ctx)
	done := n.m.sess.mutating(n.ns, p)
	na, err := n.m.meta.Commit(ctx, &metapb.CommitRequest{
		Ns: n.ns, Path: p, Etag: emptyETag, Mode: a.Mode, ModeExact: true, Uid: a.Uid, Gid: a.Gid,
		IfNoneMatch: true, Ino: a.Ino, MtimeNs: mtime, AtimeNs: a.AtimeNs, CtimeNs: max(a.CtimeNs, mtime),
	})
	if err != nil {
		done(0)
		return err
	}
	n.f.creating = false
	n.setAttrLocked(na, epoch)
	n.f.pageVersion = na.Version
	defer n.tellParent(na)
	done(na.Seq)
	return nil
}

// timesAfterKids holds a directory's attribute commit that sets its
// mtime until the creates made in it before the mtime was set are in
// meta.
func (w *writeBehind) timesAfterKids(d *node, attrs *metapb.SetAttrRequest) {
	if attrs == nil || attrs.MtimeNs == nil {
		return
	}
	w.madeMu.Lock()
	t := d.timesAfter
	w.madeMu.Unlock()
	w.kidsBefore(d, t)
}
