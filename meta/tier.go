package meta

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Automatic tiering. A policy (per namespace, or the global one for
// namespaces without their own) moves files between storage classes:
// rules by time since the last read, size and path prefix, first match
// wins; a file no rule matches that was read lately goes back to the
// promotion class. The mover runs on the leader only, every
// Config.TierInterval: it scans the tree from one consistent view, then
// moves the files due, one at a time, at the policy's byte rate, never
// holding a lock that reads or writes wait on.
//
// A move is copy, then switch. The mover reads each extent of the file
// from its volume and writes it as a new needle of a volume of the target
// class; then it proposes TierMoveCommand, which switches the file to the
// copies only if it is exactly as copied (same version and extents, its
// needles its own), and otherwise turns the copies into garbage. A crash
// before the switch leaves the file as it was; the copies made so far are
// named in the move's intent, which the leader releases to the collector
// after a grace (tier_intent.go). The
// old needles stay readable for a grace period of 10 intervals (t/g/
// keys, tier_apply.go), for readers that looked the file up before the
// switch, and then go to the garbage collector like any deleted needle.
//
// Last reads are tracked without a write per read: Resolve notes the
// inode in memory, and once a second the leader proposes one
// TierAccessCommand for every file read since, which moves a file's atime
// only when it is older than the interval. A file read often costs one
// write per interval, a cold file's first read one write. Reads a client
// serves from its own cache (the gateway's hot cache, the client
// library's metadata cache) reach meta as TierNoteReads, batched by the
// client once a second (client/readnotes.go), and count the same.

// tierState is the mover's soft state; guarded by mu.
type tierState struct {
	mu       sync.Mutex
	flushMu  sync.Mutex          // one flush of reads at a time
	grain    time.Duration       // atime granularity: Config.TierInterval
	reads    map[uint64]struct{} // files resolved since the last flush
	moving   map[uint64]string   // moves in progress, for status
	lastScan time.Time
	scan     tierScan // the last scan's figures
	// passes begun and ended (scan and moves), one at a time: a test
	// waits for a pass that began after it changed something.
	begun, ended uint64
	moved        uint64
	bytes        uint64
	stale        uint64
	failed       uint64
	leftovers    uint64 // intents of unfinished moves released (tier_intent.go)
	cachedReads  uint64 // reads clients reported from their caches
	kick         chan struct{}
	m            tierMetrics
}

// maxTierReads bounds the reads remembered between two flushes; beyond
// it reads go unrecorded (their files look colder than they are).
const maxTierReads = 1 << 20

type tierMetrics struct {
	moves    *prometheus.CounterVec
	bytes    prometheus.Counter
	inFlight prometheus.Gauge
	// tier2: unfinished moves whose copies were released, and reads
	// clients served from their caches and reported.
	leftovers   prometheus.Counter
	cachedReads prometheus.Counter
}

func (s *Service) tierStart() {
	s.tier.reads = map[uint64]struct{}{}
	s.tier.grain = s.cfg.TierInterval
	s.tier.moving = map[uint64]string{}
	s.tier.kick = make(chan struct{}, 1)
	reg := s.cfg.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	s.tier.m = tierMetrics{
		moves: registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "tier", Name: "moves_total",
			Help: "Files the tiering mover handled, by result: moved, stale (changed while copied; copy discarded), failed."}, []string{"result"})),
		bytes: registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "tier", Name: "moved_bytes_total",
			Help: "Bytes of files moved between storage classes."})),
		inFlight: registered(reg, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "tier", Name: "moves_in_progress",
			Help: "Tier moves in progress."})),
		leftovers: registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "tier", Name: "unfinished_moves_released_total",
			Help: "Moves left unfinished (a crash, a leader change) whose copies were turned into garbage."})),
		cachedReads: registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "tier", Name: "cached_reads_total",
			Help: "File reads clients served from their own caches and reported for tiering."})),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.background(s.tier.kick, s.tierStep)
	}()
}

// registered registers c, or returns the collector registered before
// under its name (several metas in one test process).
func registered[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex
			}
		}
	}
	return c
}

// noteRead records that file ino was looked up for reading.
func (s *Service) noteRead(n *metapb.Inode) {
	if n == nil || n.Type != metapb.FileType_REGULAR || s.tier.reads == nil {
		return
	}
	s.tier.mu.Lock()
	if len(s.tier.reads) < maxTierReads {
		s.tier.reads[n.Ino] = struct{}{}
	}
	s.tier.mu.Unlock()
}

// tierStep runs once a second on the leader: it records the reads seen,
// releases old needles whose grace is over, and every interval scans and
// moves. It never reports more work: the next second comes soon enough.
func (s *Service) tierStep(ctx context.Context) bool {
	if err := s.flushReads(); err != nil && ctx.Err() == nil {
		s.log.Warn("tiering: recording reads failed", "err", err)
	}
	if err := s.releaseGrace(time.Now()); err != nil && ctx.Err() == nil {
		s.log.Warn("tiering: releasing moved needles failed", "err", err)
	}
	if err := s.releaseIntents(time.Now()); err != nil && ctx.Err() == nil {
		s.log.Warn("tiering: releasing unfinished moves' copies failed", "err", err)
	}
	s.tier.mu.Lock()
	due := time.Since(s.tier.lastScan) >= s.cfg.TierInterval
	if due {
		s.tier.begun++
	}
	s.tier.mu.Unlock()
	if !due {
		return false
	}
	defer func() {
		s.tier.mu.Lock()
		s.tier.ended++
		s.tier.mu.Unlock()
	}()
	pols, err := s.tierPolicies("")
	if err != nil {
		s.log.Warn("tiering: reading policies failed", "err", err)
		return false
	}
	if len(pols) == 0 {
		// Nothing to move: no walk of the whole tree every interval.
		s.tier.mu.Lock()
		s.tier.lastScan = time.Now()
		s.tier.scan = tierScan{}
		s.tier.mu.Unlock()
		return false
	}
	sc, err := s.tierScan(pols, time.Now())
	if err != nil {
		s.log.Warn("tiering: scan failed", "err", err)
		return false
	}
	s.tier.mu.Lock()
	s.tier.scan = sc
	s.tier.lastScan = time.Now()
	s.tier.mu.Unlock()
	lim := &tierLimit{rate: tierRate(pols), next: time.Now()}
	for _, mv := range sc.moves {
		if ctx.Err() != nil || !s.leading() {
			break
		}
		s.tierMoveOne(ctx, mv, lim)
	}
	return false
}

// flushReads proposes the reads noted since the last flush.
func (s *Service) flushReads() error {
	s.tier.flushMu.Lock()
	defer s.tier.flushMu.Unlock()
	s.tier.mu.Lock()
	grain := s.tier.grain
	if len(s.tier.reads) == 0 {
		s.tier.mu.Unlock()
		return nil
	}
	inos := make([]uint64, 0, len(s.tier.reads))
	for ino := range s.tier.reads {
		inos = append(inos, ino)
	}
	s.tier.reads = map[uint64]struct{}{}
	s.tier.mu.Unlock()
	slices.Sort(inos)
	for len(inos) > 0 {
		n := min(len(inos), 10000)
		cmd := &metapb.TierAccessCommand{Inos: inos[:n], GrainNs: int64(grain)}
		if _, err := s.propose(&metapb.Command{Op: &metapb.Command_TierAccess{TierAccess: cmd}}); err != nil {
			return err
		}
		inos = inos[n:]
	}
	return nil
}

// releaseGrace turns moved-out needles whose grace ended into garbage.
func (s *Service) releaseGrace(now time.Time) error {
	v, err := s.readView()
	if err != nil {
		return err
	}
	it, err := v.newIter([]byte(pTierGrace), prefixEnd([]byte(pTierGrace)))
	if err != nil {
		v.close()
		return err
	}
	var keys [][]byte
	for it.First(); it.Valid() && len(keys) < gcBatch; it.Next() {
		due, _, ok := parseTierGraceKey(it.Key())
		if !ok || due > now.UnixNano() {
			break // keys sort by due time
		}
		keys = append(keys, bytes.Clone(it.Key()))
	}
	it.Close()
	v.close()
	if len(keys) == 0 {
		return nil
	}
	_, err = s.propose(&metapb.Command{Op: &metapb.Command_TierRelease{TierRelease: &metapb.TierReleaseCommand{Keys: keys}}})
	return err
}

// tierMove is one file a scan found due to move.
type tierMove struct {
	ns, path, from, to string
	ino, version, size uint64
	extents            []*metapb.Extent
	nsClass            string // the namespace's class (a file in it keeps "")
}

// tierScan is what one scan found.
type tierScan struct {
	moves   []tierMove
	classes map[string]*metapb.TierClassBytes
	at      time.Time
}

// maxTierPlan bounds the moves one scan plans; the next scan finds the rest.
const maxTierPlan = 10000

// tierScan walks every namespace's tree from one view: it sums the bytes
// per class and plans the moves the policies ask for.
func (s *Service) tierScan(pols map[string]*metapb.TierPolicy, now time.Time) (tierScan, error) {
	sc := tierScan{classes: map[string]*metapb.TierClassBytes{}, at: now}
	v, err := s.readView()
	if err != nil {
		return sc, err
	}
	defer v.close()
	it, err := v.newIter([]byte{pNamespace, '/'}, []byte{pNamespace, '/' + 1})
	if err != nil {
		return sc, err
	}
	var nss []*metapb.Namespace
	for it.First(); it.Valid(); it.Next() {
		ns := &metapb.Namespace{}
		if err := proto.Unmarshal(it.Value(), ns); err != nil {
			it.Close()
			return sc, err
		}
		nss = append(nss, ns)
	}
	it.Close()
	for _, ns := range nss {
		pol := pols[ns.Name]
		if pol == nil {
			pol = pols[""]
		}
		if err := s.scanNamespace(v, ns, pol, now, &sc); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// className is the effective class of a file of ns stored as fileClass.
func className(ns *metapb.Namespace, fileClass string) string {
	return cmp.Or(fileClass, ns.StorageClass, ClassReplicated)
}

func (s *Service) scanNamespace(v *view, ns *metapb.Namespace, pol *metapb.TierPolicy, now time.Time, sc *tierScan) error {
	type dir struct {
		ino  uint64
		path string
	}
	stack := []dir{{ns.RootIno, ""}}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		p := direntPrefix(d.ino)
		it, err := v.newIter(p, prefixEnd(p))
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			_, name, isDir, ok := parseDirentKey(it.Key())
			if !ok {
				continue
			}
			child := u64(it.Value())
			path := name
			if d.path != "" {
				path = d.path + "/" + name
			}
			if isDir {
				stack = append(stack, dir{child, path})
				continue
			}
			n, err := v.inode(child)
			if err != nil {
				it.Close()
				return err
			}
			if n.Type != metapb.FileType_REGULAR {
				continue
			}
			cls := className(ns, n.StorageClass)
			cb := sc.classes[cls]
			if cb == nil {
				cb = &metapb.TierClassBytes{Class: cls}
				sc.classes[cls] = cb
			}
			cb.Files++
			cb.Bytes += n.Size
			to := tierTarget(pol, path, n, cls, now)
			if to == "" || to == cls || len(sc.moves) >= maxTierPlan || n.Nlink > 1 || n.Size == 0 {
				continue
			}
			exts, err := v.extents(n)
			if err != nil {
				it.Close()
				return err
			}
			if len(exts) == 0 || sharedNeedles(v, exts) {
				continue // a copy or version shares the data: it stays
			}
			sc.moves = append(sc.moves, tierMove{ns: ns.Name, path: path, from: cls, to: to, ino: n.Ino,
				version: n.Version, size: n.Size, extents: exts, nsClass: className(ns, "")})
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func sharedNeedles(v *view, exts []*metapb.Extent) bool {
	for _, nd := range distinctNeedles(exts) {
		if shared, err := v.has(refKey(nd)); err != nil || shared {
			return true
		}
	}
	return false
}

// tierTarget is the class policy pol puts the file n at path in ("": no
// opinion). The first rule that matches decides; with none, a file read
// within the promotion window goes to the promotion class.
func tierTarget(pol *metapb.TierPolicy, path string, n *metapb.Inode, cls string, now time.Time) string {
	if pol == nil {
		return ""
	}
	lastRead := max(n.AtimeNs, n.MtimeNs)
	idle := now.UnixNano() - lastRead
	for _, r := range pol.Rules {
		if r.Prefix != "" && !strings.HasPrefix(path, r.Prefix) {
			continue
		}
		if n.Size < r.MinSize || r.MaxSize > 0 && n.Size > r.MaxSize {
			continue
		}
		if r.UnreadNs > 0 && idle < r.UnreadNs {
			continue
		}
		return r.To
	}
	if pol.PromoteTo != "" && cls != pol.PromoteTo && idle < pol.PromoteReadNs {
		return pol.PromoteTo
	}
	return ""
}

// tierLimit paces the bytes moves copy.
type tierLimit struct {
	rate int64
	next time.Time
}

// wait returns once n more bytes fit the rate, or when ctx ends.
func (l *tierLimit) wait(ctx context.Context, n int64) error {
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(n) / float64(l.rate) * float64(time.Second)))
	d := time.Until(l.next)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// defaultTierRate is the byte rate of moves when the global policy sets none.
const defaultTierRate = 32 << 20

func tierRate(pols map[string]*metapb.TierPolicy) int64 {
	if g := pols[""]; g != nil && g.Rate > 0 {
		return int64(g.Rate)
	}
	return defaultTierRate
}

// tierMoveOne copies mv's extents to its target class and switches the
// file to the copies; see the top of the file.
func (s *Service) tierMoveOne(ctx context.Context, mv tierMove, lim *tierLimit) {
	s.tier.mu.Lock()
	s.tier.moving[mv.ino] = fmt.Sprintf("%s/%s: %s -> %s (%d bytes)", mv.ns, mv.path, mv.from, mv.to, mv.size)
	s.tier.mu.Unlock()
	s.tier.m.inFlight.Inc()
	defer func() {
		s.tier.mu.Lock()
		delete(s.tier.moving, mv.ino)
		s.tier.mu.Unlock()
		s.tier.m.inFlight.Dec()
	}()
	result, err := s.tierCopyAndSwitch(s.dataCtx(ctx), mv, lim)
	s.tier.mu.Lock()
	switch result {
	case "moved":
		s.tier.moved++
		s.tier.bytes += mv.size
	case "stale":
		s.tier.stale++
	default:
		s.tier.failed++
	}
	s.tier.mu.Unlock()
	s.tier.m.moves.WithLabelValues(result).Inc()
	switch {
	case result == "moved":
		s.tier.m.bytes.Add(float64(mv.size))
		s.log.Info("tier move", "ns", mv.ns, "path", mv.path, "from", mv.from, "to", mv.to, "bytes", mv.size)
	case err != nil && ctx.Err() == nil:
		s.log.Warn("tier move failed; retried at the next scan", "ns", mv.ns, "path", mv.path, "to", mv.to, "err", err)
	}
}

// tierCopyAndSwitch does the move; it reports "moved", "stale" or
// "failed".
func (s *Service) tierCopyAndSwitch(ctx context.Context, mv tierMove, lim *tierLimit) (string, error) {
	const op = errors.Op("meta.tierMove")
	cmd := &metapb.TierMoveCommand{Ns: mv.ns, Path: mv.path, Ino: mv.ino, Version: mv.version,
		From: mv.extents, GraceNs: int64(10 * s.cfg.TierInterval)}
	if mv.to != mv.nsClass {
		cmd.StorageClass = mv.to
	}
	var buf bytes.Buffer
	var vol *metapb.Volume
	for _, e := range mv.extents {
		buf.Reset()
		if err := s.readExtent(ctx, e, &buf); err != nil {
			s.discardCopies(mv.ino, cmd.To)
			return "failed", errors.E(op, fullPath(mv.ns, mv.path), err)
		}
		key, v, err := s.tierPut(ctx, mv.ns, mv.to, vol, buf.Bytes())
		if err != nil {
			s.discardCopies(mv.ino, cmd.To)
			return "failed", errors.E(op, fullPath(mv.ns, mv.path), err)
		}
		vol = v
		cmd.To = append(cmd.To, &metapb.Extent{Offset: e.Offset, Length: e.Length, Volume: v.Id, Key: key})
		// Named in the file's intent before the next copy (tier_intent.go).
		if err := s.tierNoteCopy(mv.ino, cmd.To[len(cmd.To)-1]); err != nil {
			s.discardCopies(mv.ino, cmd.To)
			return "failed", errors.E(op, fullPath(mv.ns, mv.path), err)
		}
		// Paced after the copy: the time a move takes is mostly spent
		// here, with its copies already named in the intent.
		if err := lim.wait(ctx, int64(e.Length)); err != nil {
			s.discardCopies(mv.ino, cmd.To)
			return "failed", errors.E(op, errors.Canceled, err)
		}
	}
	res, err := s.propose(&metapb.Command{Op: &metapb.Command_TierMove{TierMove: cmd}})
	if err != nil {
		return "failed", errors.E(op, fullPath(mv.ns, mv.path), err)
	}
	if res.inode == nil {
		return "stale", nil
	}
	return "moved", nil
}

// discardCopies aborts the move of file ino: the needles it already wrote
// and its intent's go to the garbage queue (best effort: on a failure the
// leader releases the intent after its grace, tier_intent.go).
func (s *Service) discardCopies(ino uint64, exts []*metapb.Extent) {
	if len(exts) == 0 {
		return
	}
	cmd := &metapb.TierMoveCommand{Ino: ino, To: exts, Abort: true}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_TierMove{TierMove: cmd}}); err != nil {
		s.log.Warn("tiering: could not queue a failed move's copies as garbage", "err", err)
	}
}

// readExtent copies extent e's bytes from a server of its volume to w.
func (s *Service) readExtent(ctx context.Context, e *metapb.Extent, w *bytes.Buffer) error {
	s.pmu.Lock()
	v := s.volumes[e.Volume]
	var addrs []string
	if v != nil {
		addrs = slices.Clone(v.Servers)
		if v.Ec != nil {
			addrs = slices.DeleteFunc(slices.Clone(v.Ec.ShardServers), func(a string) bool { return a == "" })
		}
	}
	s.pmu.Unlock()
	if len(addrs) == 0 {
		return errors.Errorf(errors.Op("meta.readExtent"), errors.Unavailable, "volume %d has no server", e.Volume)
	}
	var last error
	for _, addr := range addrs {
		w.Reset()
		if _, err := s.cfg.Chunks(addr).ReadTo(ctx, e.Volume, e.Key, int64(e.NeedleOffset), int64(e.Length), w); err != nil {
			last = errors.E(errors.Path(addr), err)
			continue
		}
		return nil
	}
	return last
}

// tierPut writes data as a new needle of a writable volume of class cls
// in namespace ns (prefer, if it is still writable), as a client's write
// would: Assign, then the volume's primary, which forwards to the others.
func (s *Service) tierPut(ctx context.Context, ns, cls string, prefer *metapb.Volume, data []byte) (uint64, *metapb.Volume, error) {
	var full []uint32
	var last error
	for range 4 {
		v := prefer
		if v == nil {
			a, err := s.Assign(ctx, &metapb.AssignRequest{Ns: ns, StorageClass: cls, Full: full})
			if err != nil {
				return 0, nil, err
			}
			v = a.Volume
		}
		prefer = nil
		if len(v.Servers) == 0 {
			full = append(full, v.Id)
			continue
		}
		key, err := s.cfg.Chunks(v.Servers[0]).Put(ctx, v.Id, v.Generation, data)
		if err == nil {
			return key, v, nil
		}
		last = err
		switch {
		case errors.Is(errors.ReadOnly, err):
			full = append(full, v.Id) // full: ask for another
		case errors.Is(errors.Stale, err):
			// Its replica set changed since: ask again.
		default:
			return 0, nil, err
		}
	}
	return 0, nil, last
}
