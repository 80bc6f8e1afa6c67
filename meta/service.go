package meta

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"google.golang.org/protobuf/proto"

	"cairn/capability"
	"cairn/errors"
	"cairn/metrics"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// Service is the metadata service. Its methods are the gRPC API
// (metapb.MetaServer); NewGRPCServer serves it.
type Service struct {
	metapb.UnimplementedMetaServer

	cfg Config
	log *slog.Logger
	db  *pebble.DB
	ops *metrics.Ops
	hub *hub
	rc  *readCache

	// caps signs data-plane capabilities with the keys of capFile
	// (caps.go); capMu guards capFile.
	caps    *capability.Keyring
	capMu   sync.Mutex
	capFile capKeyFile

	// mu serializes apply: every read-modify-write of the store runs under
	// it, and it is never held across an fsync or a network call.
	mu sync.Mutex

	// Placement state. Volumes are persisted (v/) and cached here; servers
	// and the volume sizes they report are soft state rebuilt from
	// heartbeats within a second of a restart.
	pmu      sync.Mutex
	servers  map[string]*dataServer
	volumes  map[uint32]*metapb.Volume
	vstats   map[uint32]*metapb.VolumeStat
	assignMu sync.Mutex     // one volume creation at a time
	cl       membership     // drain, suspects, repairs (membership.go, repair.go)
	ec       ecState        // erasure coding: encodes, shard rebuilds (ec.go)
	lc       lifecycleState // S3 lifecycle rules (lifecycle.go)
	tier     tierState      // automatic tiering: reads seen, moves (tier.go)

	// creating is the volume id createVolume last tried and the generation
	// of its last attempt, under assignMu: every attempt at one id takes
	// a higher generation (placement.go).
	creating struct {
		id  uint32
		gen uint64
	}

	genUser, genSecret string
	clusterID          string  // chosen at the first start (setupClusterID)
	sec                secrets // the group's shared secrets in memory (secrets.go)

	mountSessions sessionTable // see session.go
	locks         lockTable    // see locks.go
	opens         openTable    // see open.go
	callers       callerCache  // verified credentials (caller.go)

	group *group       // the Raft group (raft.go); nil: meta alone
	reqs  requestTable // the request ids applied, indexed (dedup.go); under mu

	gcKick  chan struct{}
	gcp     gcPasses // see WaitCollected
	closing chan struct{}
	wg      sync.WaitGroup
	syncs   sync.WaitGroup // log syncs no caller waits for (proposeWait)
	once    sync.Once
}

// Open opens (or creates) the store in cfg.Dir and starts the background
// garbage collector.
func Open(cfg Config) (*Service, error) {
	const op = errors.Op("meta.Open")
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	db, err := pebble.Open(filepath.Join(cfg.Dir, "pebble"), storeOptions(cfg))
	if err != nil {
		return nil, errors.E(op, errors.IO, errors.Path(cfg.Dir), err)
	}
	s := &Service{
		cfg:     cfg,
		log:     cfg.Logger.With("role", "meta"),
		db:      db,
		ops:     metrics.NewOps(cfg.Registerer, "meta"),
		servers: map[string]*dataServer{},
		volumes: map[uint32]*metapb.Volume{},
		vstats:  map[uint32]*metapb.VolumeStat{},
		gcKick:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		caps:    &capability.Keyring{},
	}
	if s.cfg.CapRenewFor == nil {
		s.cfg.CapRenewFor = s.mayRenew // renewals follow the caller's rights (authz.go)
	}
	s.cl.init()
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.setupSecrets(); err != nil { // secrets.go
		db.Close()
		return nil, err
	}
	if err := s.loadOrphans(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.setupStateOrGroup(); err != nil { // a group starts applying at once
		db.Close()
		return nil, err
	}
	if err := s.startLocks(); err != nil { // locks.go: a grace after a restart
		db.Close()
		return nil, err
	}
	s.wg.Add(3)
	go s.gcLoop()
	go s.repairLoop()
	go s.capLoop()
	s.ecStart()
	s.lifecycleStart()
	s.tierStart()
	return s, nil
}

// load reads the state kept in memory: the event sequence and the volumes.
func (s *Service) load() error {
	s.hub = newHub(0, 4096)
	s.rc = newReadCache(s.cfg.ReadCacheEntries, s.cfg.ReadCacheBytes)
	return s.rebuild() // fsm.go
}

// setupClusterID reads the cluster's id, choosing one at the first start.
func (s *Service) setupClusterID() error {
	get := func() (string, error) {
		v, err := s.readView()
		if err != nil {
			return "", err
		}
		defer v.close()
		id, _, err := v.get(keyClusterID)
		return string(id), err
	}
	id, err := get()
	if err != nil || id != "" {
		s.clusterID = id
		return err
	}
	var b [16]byte
	rand.Read(b[:])
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_SetClusterId{SetClusterId: &metapb.SetClusterIdRequest{Id: hex.EncodeToString(b[:])}}}); err != nil {
		return err
	}
	s.clusterID, err = get()
	return err
}

// Close stops the background work and closes the store. Calls in flight
// must have finished (stop the gRPC server first).
func (s *Service) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closing)
		s.hub.closeAll()
		s.wg.Wait()
		if s.group != nil {
			s.group.shutdown() // before the store: Raft applies to it
		}
		s.mu.Lock()
		s.syncs.Wait() // added under mu, so never concurrently with this Wait
		if s.group != nil {
			// No write-ahead log (storeOptions): tables keep what the
			// memtable holds, so a restart need not apply it again.
			if ferr := s.db.Flush(); ferr != nil {
				s.log.Warn("meta: flushing the store at close", "err", ferr)
			}
		}
		err = s.db.Close()
		s.mu.Unlock()
	})
	return err
}

// Ops is the per-operation metrics of the service (role "meta").
func (s *Service) Ops() *metrics.Ops { return s.ops }

// result is what apply returns: the record the RPC answers with and the
// events to publish once the batch is visible.
type result struct {
	ns        *metapb.Namespace
	inode     *metapb.Inode
	volume    *metapb.Volume
	events    []*metapb.Event
	garbage   bool // needles were queued: wake the collector
	server    *metapb.ClusterServerState
	first     uint64          // MountReserve: the first inode number reserved
	inodes    []*metapb.Inode // CommitBatch: one per commit
	seqs      []*metapb.Event // CommitBatch: each commit's event
	orphans   []uint64        // files unlinked while open (open.go)
	reclaimed []uint64        // ReclaimOrphans: the files removed

	joinRole string // UseJoinToken: the role the spent token allows
	revoked  bool   // RevokeCert: every replica reloads its revocation list
	secrets  bool   // secrets commands: every replica reloads the shared secrets (secrets.go)

	version *metapb.S3Version // S3 versioning commands (versions.go)
}

// propose applies cmd and returns once it is durable. It is the one path
// by which state changes; with Raft it becomes "append to the log, wait
// for the commit index, apply".
func (s *Service) propose(cmd *metapb.Command) (*result, error) {
	return s.proposeWait(cmd, true)
}

// proposeWait is propose; without wait it answers once cmd is applied and
// the log sync is requested, not done (see MkdirRequest.no_sync_wait).
func (s *Service) proposeWait(cmd *metapb.Command, wait bool) (*result, error) {
	if s.group != nil {
		return s.group.propose(cmd)
	}
	cmd.NowNs = time.Now().UnixNano()
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		return nil, errors.E(errors.Op("meta"), errors.Unavailable, "meta is shutting down")
	default:
	}
	b := s.db.NewIndexedBatch()
	res, err := applyCommand(s.db, b, cmd, s.rc, nil)
	if err == nil {
		err = s.cfg.space.admit(len(b.Repr())) // bounded while the disk is full (storespace.go)
	}
	if err != nil {
		s.mu.Unlock()
		b.Close()
		return nil, err
	}
	// Visible to readers from here on, durable only after SyncWait below:
	// holding mu only for the memtable insert lets concurrent proposers
	// queue their batches behind this one and share its fsync.
	s.rc.beginWrite()
	err = s.db.ApplyNoSyncWait(b, pebble.Sync)
	s.rc.endWrite(b)
	if err != nil {
		s.mu.Unlock()
		b.Close()
		return nil, errors.E(errors.Op("meta.apply"), diskKind(err), err)
	}
	s.published(res)
	if !wait {
		s.syncs.Add(1)
		go func() {
			defer s.syncs.Done()
			if err := b.SyncWait(); err != nil {
				s.log.Error("meta: log sync failed", "err", err)
			}
			b.Close()
		}()
		s.mu.Unlock()
	} else {
		s.mu.Unlock()
		err = b.SyncWait()
		b.Close()
		if err != nil {
			return nil, errors.E(errors.Op("meta.apply"), diskKind(err), err)
		}
	}
	s.kickGC(res) // only once durable: the collector deletes what it names
	return res, nil
}

// view reads the store. Outside apply it wraps one iterator, a consistent
// point-in-time view (clones share it); inside apply it reads the indexed
// batch, which sees the command's own writes.
type view struct {
	it *pebble.Iterator
	b  *pebble.Batch

	// A cached view (see readCache) reads the cache while its gen holds
	// and opens it lazily on the first miss. mixed reports that it read
	// the cache and then opened an iterator on a newer state: its answer
	// may mix two states and must be recomputed on a plain view.
	db        *pebble.DB
	rc        *readCache
	gen       uint64
	usedCache bool
	mixed     bool

	// Inside a shared apply batch (applyShared): what the earlier
	// commands of the batch wrote, and where this command's own records
	// start in the batch (its record count and offset then).
	shared *sharedBatch
	n0     uint32
	off    int
}

// sharedBatch is what the commands applied in one Pebble batch share
// (applyShared). A command reads the committed state through the read
// cache and one iterator, and what the batch's earlier commands wrote
// through written, a map: without it a command had to read through the
// indexed batch (a merged Pebble Get per read) once the batch held more
// than maxBatchScan records, which a Raft batch of a few entries
// always does.
type sharedBatch struct {
	written map[string]cacheEntry // key -> last set value or deletion
	scans   map[string]bool       // scan prefixes (scanPrefix) of written keys
	// opaque: an earlier command wrote a record other than a set or a
	// delete (a range deletion): read through the batch's index.
	opaque bool
	it     *pebble.Iterator // over the committed state, opened on first use
}

func newSharedBatch() *sharedBatch { return &sharedBatch{} }

// absorb adds the records of b from offset off on (one command's) to
// what later commands read.
func (sb *sharedBatch) absorb(b *pebble.Batch, off int) {
	r := batchrepr.Reader(b.Repr()[off:])
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			sb.opaque = true
			return
		}
		if !ok {
			return
		}
		if sb.written == nil { // a batch of one command needs none
			sb.written, sb.scans = map[string]cacheEntry{}, map[string]bool{}
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			sb.written[string(k)] = cacheEntry{val: v} // cloned when read
		case pebble.InternalKeyKindDelete:
			sb.written[string(k)] = cacheEntry{absent: true}
		default:
			sb.opaque = true
		}
		if scan := scanPrefix(k); scan != nil {
			sb.scans[string(scan)] = true
		}
	}
}

func (sb *sharedBatch) close() {
	if sb.it != nil {
		sb.it.Close()
		sb.it = nil
	}
}

func (s *Service) readView() (*view, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, errors.E(errors.Op("meta.read"), errors.IO, err)
	}
	return &view{it: it}, nil
}

// cachedView is a view for point reads that tries the read cache first.
func (s *Service) cachedView() (*view, error) {
	gen, ok := s.rc.snapshot()
	if !ok {
		return s.readView()
	}
	return &view{db: s.db, rc: s.rc, gen: gen}, nil
}

// iter returns the view's iterator, opening it on first use.
func (v *view) iter() (*pebble.Iterator, error) {
	if v.it == nil && v.shared != nil {
		// One iterator for every command of the batch: nothing reaches
		// the store while they apply, and opening one costs more than
		// most of a command's reads.
		if v.shared.it == nil {
			it, err := v.db.NewIter(nil)
			if err != nil {
				return nil, errors.E(errors.Op("meta.read"), errors.IO, err)
			}
			v.shared.it = it
		}
		return v.shared.it, nil
	}
	if v.it == nil {
		it, err := v.db.NewIter(nil)
		if err != nil {
			return nil, errors.E(errors.Op("meta.read"), errors.IO, err)
		}
		v.it = it
		if v.usedCache && v.rc.gen.Load() != v.gen {
			v.mixed = true
		}
	}
	return v.it, nil
}

// cached looks k up in the read cache, when the view may use it.
func (v *view) cached(k []byte) (cacheEntry, bool) {
	if v.rc == nil {
		return cacheEntry{}, false
	}
	e, ok := v.rc.get(v.gen, k)
	if ok {
		v.usedCache = true
	}
	return e, ok
}

func (v *view) remember(k []byte, e cacheEntry) {
	if v.rc != nil {
		v.rc.put(v.gen, k, e)
	}
}

func (v *view) close() {
	if v.it != nil {
		v.it.Close()
	}
}

// get returns a copy of the value of key; found is false if it is absent.
func (v *view) get(key []byte) (val []byte, found bool, err error) {
	if v.b != nil {
		if v.db == nil || v.b.Count()-v.n0 > maxBatchScan || v.shared != nil && v.shared.opaque {
			return v.batchGet(key)
		}
		if val, found, ok := batchRecord(v.b, v.off, key); ok {
			return val, found, nil
		}
		if v.shared != nil {
			if e, ok := v.shared.written[string(key)]; ok {
				return bytes.Clone(e.val), !e.absent, nil
			}
		}
		// Not written by this batch: read the committed state like any
		// view, through the cache and one iterator kept for the whole
		// batch (apply runs under the apply mutex: no batch lands while
		// it reads, so both hold exactly the committed state).
	}
	if e, ok := v.cached(key); ok {
		return e.val, !e.absent, nil // callers never modify values
	}
	it, err := v.iter()
	if err != nil {
		return nil, false, err
	}
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, false, errors.E(errors.Op("meta.read"), errors.IO, err)
		}
		v.remember(key, cacheEntry{absent: true})
		return nil, false, nil
	}
	val = bytes.Clone(it.Value())
	v.remember(key, cacheEntry{val: val})
	return val, true, nil
}

// batchGet reads key through the indexed batch: its own writes over the
// committed state.
func (v *view) batchGet(key []byte) ([]byte, bool, error) {
	val, c, err := v.b.Get(key)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errors.E(errors.Op("meta.read"), errors.IO, err)
	}
	val = bytes.Clone(val)
	c.Close()
	return val, true, nil
}

// maxBatchScan is the largest batch whose records batchRecord scans; a
// larger one (a recursive delete) is read through its index instead.
const maxBatchScan = 64

// batchRecord looks key up among the records of b from offset off on
// (0: all of them), the last one winning; ok is false when they do not
// write key, or hold a record kind other than set and delete.
func batchRecord(b *pebble.Batch, off int, key []byte) (val []byte, found, ok bool) {
	r := b.Reader()
	if off > 0 {
		r = batchrepr.Reader(b.Repr()[off:])
	}
	for {
		kind, k, v, more, err := r.Next()
		if err != nil {
			return nil, false, false
		}
		if !more {
			return val, found, ok
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if bytes.Equal(k, key) {
				val, found, ok = bytes.Clone(v), true, true
			}
		case pebble.InternalKeyKindDelete:
			if bytes.Equal(k, key) {
				val, found, ok = nil, false, true
			}
		default:
			return nil, false, false
		}
	}
}

func (v *view) has(key []byte) (bool, error) {
	_, found, err := v.get(key)
	return found, err
}

func (v *view) getProto(key []byte, m proto.Message) (bool, error) {
	val, found, err := v.get(key)
	if err != nil || !found {
		return found, err
	}
	if err := proto.Unmarshal(val, m); err != nil {
		return false, errors.E(errors.Op("meta.read"), errors.Corrupt, err)
	}
	return true, nil
}

// newIter returns an iterator over [lower, upper) in the same view.
func (v *view) newIter(lower, upper []byte) (*pebble.Iterator, error) {
	o := &pebble.IterOptions{LowerBound: lower, UpperBound: upper}
	var it *pebble.Iterator
	var err error
	if v.b != nil {
		it, err = v.b.NewIter(o)
	} else {
		var base *pebble.Iterator
		if base, err = v.iter(); err == nil {
			it, err = base.Clone(pebble.CloneOptions{IterOptions: o})
		}
	}
	if err != nil {
		return nil, errors.E(errors.Op("meta.read"), errors.IO, err)
	}
	return it, nil
}

func (v *view) namespace(name string) (*metapb.Namespace, error) {
	n := &metapb.Namespace{}
	found, err := v.getProto(nsKey(name), n)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.E(errors.NotExist, errors.Path(name), "no such namespace")
	}
	return n, nil
}

func (v *view) inode(ino uint64) (*metapb.Inode, error) {
	n := &metapb.Inode{}
	found, err := v.getProto(inodeKey(ino), n)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.E(errors.Corrupt, fmt.Sprintf("dangling inode %d", ino))
	}
	return n, nil
}

// lookup finds name in directory parent: as a file first, then as a
// directory (they never coexist).
func (v *view) lookup(parent uint64, name string) (ino uint64, dir, found bool, err error) {
	return v.lookupAs(parent, name, false)
}

// lookupAs is lookup trying a directory first when dirFirst is set: what a
// path's inner components almost always are, so a walk costs one read per
// level instead of two.
func (v *view) lookupAs(parent uint64, name string, dirFirst bool) (ino uint64, dir, found bool, err error) {
	for _, d := range [2]bool{dirFirst, !dirFirst} {
		val, ok, err := v.get(direntKey(parent, name, d))
		if err != nil {
			return 0, false, false, err
		}
		if ok {
			return u64(val), d, true, nil
		}
	}
	return 0, false, false, nil
}

// walk resolves a clean path below root in one pass: one seek per level.
func (v *view) walk(root uint64, p string) (ino uint64, dir bool, err error) {
	ino, dir = root, true
	for p != "" {
		name, rest, _ := cutSlash(p)
		if !dir {
			return 0, false, errors.E(errors.NotDir, "a path component is a file")
		}
		child, isDir, found, err := v.lookupAs(ino, name, rest != "")
		if err != nil {
			return 0, false, err
		}
		if !found {
			return 0, false, errors.E(errors.NotExist, "no such file or directory")
		}
		ino, dir, p = child, isDir, rest
	}
	return ino, dir, nil
}

func cutSlash(p string) (first, rest string, found bool) {
	if i := bytes.IndexByte([]byte(p), '/'); i >= 0 {
		return p[:i], p[i+1:], true
	}
	return p, "", false
}

// extents returns a file's extents in offset order.
func (v *view) extents(n *metapb.Inode) ([]*metapb.Extent, error) {
	p := extentsAt(n)
	// Inside apply, a list the batch wrote to is read through the batch,
	// and neither read from nor left in the cache: the cache holds the
	// committed state only.
	dirty := v.batchWrote(p)
	if e, ok := v.cached(p); ok && !dirty {
		out := make([]*metapb.Extent, len(e.vals))
		for i, val := range e.vals {
			out[i] = &metapb.Extent{}
			if err := proto.Unmarshal(val, out[i]); err != nil {
				return nil, errors.E(errors.Corrupt, err)
			}
		}
		return out, nil
	}
	var it *pebble.Iterator
	if v.b == nil || !dirty && v.db != nil {
		// The batch wrote nothing here: the committed state is what it
		// reads, through the view's iterator, with no batch iterator to
		// build and merge.
		var err error
		if it, err = v.iter(); err != nil {
			return nil, err
		}
	} else {
		var err error
		if it, err = v.newIter(p, prefixEnd(p)); err != nil {
			return nil, err
		}
		defer it.Close()
	}
	// Outside apply the view's own iterator is reused: a clone costs as
	// much as the rest of a Resolve. Callers do not use it concurrently.
	var out []*metapb.Extent
	var vals [][]byte
	for it.SeekGE(p); it.Valid() && bytes.HasPrefix(it.Key(), p); it.Next() {
		e := &metapb.Extent{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			return nil, errors.E(errors.Corrupt, err)
		}
		out = append(out, e)
		if v.rc != nil {
			vals = append(vals, bytes.Clone(it.Value()))
		}
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	if !dirty {
		v.remember(p, cacheEntry{vals: vals})
	}
	return out, nil
}

// batchWrote reports whether the batch being applied wrote a key under
// the scan prefix p (scanPrefix), or anything it cannot tell apart.
func (v *view) batchWrote(p []byte) bool {
	if v.b == nil {
		return false
	}
	if v.shared != nil && (v.shared.opaque || v.shared.scans[string(p)]) {
		return true
	}
	r := v.b.Reader()
	if v.off > 0 {
		r = batchrepr.Reader(v.b.Repr()[v.off:])
	}
	for {
		kind, k, _, more, err := r.Next()
		if err != nil {
			return true
		}
		if !more {
			return false
		}
		if kind != pebble.InternalKeyKindSet && kind != pebble.InternalKeyKindDelete || bytes.HasPrefix(k, p) {
			return true
		}
	}
}

// checkNS validates a namespace name and a path inside it, returning the
// clean path.
func checkPath(op errors.Op, ns, p string) (string, error) {
	if err := pathname.ValidNamespace(ns); err != nil {
		return "", errors.E(op, err)
	}
	clean, _, err := pathname.Clean(p)
	if err != nil {
		return "", errors.E(op, errors.Path(ns+"/"+p), err)
	}
	return clean, nil
}

func fullPath(ns, p string) errors.Path {
	if p == "" {
		return errors.Path(ns)
	}
	return errors.Path(ns + "/" + p)
}

// quietLogger sends Pebble's chatter to slog at debug level, and its
// errors at error level.
type quietLogger struct{ l *slog.Logger }

func (q quietLogger) Infof(format string, args ...any) {}
func (q quietLogger) Errorf(format string, args ...any) {
	q.l.Error("pebble", "msg", fmt.Sprintf(format, args...))
}
func (q quietLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if strings.Contains(msg, syscall.ENOSPC.Error()) {
		// Pebble cannot go on after a failed log write; say what to do.
		// Every change acknowledged before is in the synced log.
		q.l.Error("meta's disk is full: free space and start meta again; acknowledged changes are kept", "msg", msg)
	} else {
		q.l.Error("pebble fatal", "msg", msg)
	}
	os.Exit(1)
}

// diskKind classifies an error of the store's disk: a full disk is
// NoSpace (507 at the HTTP edges), anything else IO.
func diskKind(err error) errors.Kind {
	if errors.IsErr(err, syscall.ENOSPC) {
		return errors.NoSpace
	}
	return errors.IO
}
