package chunk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cairn"
	"cairn/capability"
	"cairn/errors"
	"cairn/metrics"
	"cairn/proto/metapb"
	"cairn/volume"
)

var _ cairn.Chunks = (*Store)(nil)

// Store is a data server: the volumes of one directory. It is the
// in-process cairn.Chunks; Handler serves it over HTTP.
type Store struct {
	cfg     Config
	id      string
	log     *slog.Logger
	ops     *metrics.Ops
	corrupt prometheus.Counter

	mu   sync.RWMutex
	vols map[uint32]*volume.Volume
	// compacting guards against two compactions of one volume (the
	// background compactor and an admin request).
	compacting map[uint32]bool
	closed     bool

	repl  replication // replica sets, lease, copies (replicate.go)
	ec    ecState     // erasure-coded shards held here (ec.go)
	scrub scrubState  // the scrub and corrupt-read repairs (scrub.go)
	// caps verifies the data plane's capabilities and signs calls to
	// peers (auth.go): Config.Caps, or keys from meta's heartbeats.
	caps *capability.Keyring
	// localOn: the local-read socket is listening (local.go).
	localOn atomic.Bool
	// maxVolumeSize is meta's volume size limit, once a heartbeat has
	// brought it (0: cfg.MaxVolumeSize).
	maxVolumeSize atomic.Int64
}

// volumeOptions are the options of a volume created or opened now.
func (s *Store) volumeOptions() volume.Options {
	o := s.cfg.volumeOptions()
	if n := s.maxVolumeSize.Load(); n > 0 {
		o.MaxSize = n
	}
	return o
}

// setMaxVolumeSize applies meta's volume size limit to every volume, so
// that a volume turns full where the cluster says (meta's --max-volume-size),
// not at this server's default. A value the volumes cannot take is
// refused and logged; the old limit stays.
func (s *Store) setMaxVolumeSize(n int64) {
	if n <= 0 || s.maxVolumeSize.Load() == n {
		return
	}
	o := s.cfg.volumeOptions()
	o.MaxSize = n
	if err := o.Validate(); err != nil {
		s.log.Error("meta's volume size limit refused", "max_volume_size", n, "err", err)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.maxVolumeSize.Store(n)
	for _, v := range s.vols {
		if err := v.SetMaxSize(n); err != nil {
			s.log.Error("could not set a volume's size limit", "volume", v.ID(), "err", err)
		}
	}
}

// Open opens every volume in cfg.Dir (creating the directory and the
// server id on first use).
func Open(cfg Config) (*Store, error) {
	const op errors.Op = "chunk.Open"
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, errors.E(op, err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	id, err := serverID(cfg.Dir)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	s := &Store{
		cfg: cfg, id: id, log: cfg.Logger.With("role", "chunk"),
		ops:        metrics.NewOps(cfg.Registerer, "chunk"),
		vols:       map[uint32]*volume.Volume{},
		compacting: map[uint32]bool{},
		caps:       cfg.Caps,
	}
	if s.caps == nil {
		s.caps = &capability.Keyring{} // no key until meta's first answer: refuses all
	}
	s.repl.init(cfg.Meta != nil)
	s.scrub.pending, s.scrub.queue = map[needleID]bool{}, make(chan needleID, 1024)
	s.corrupt = registerCounter(cfg.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "cairn", Subsystem: "chunk", Name: "corrupt_reads_total",
		Help: "Reads refused because a needle checksum did not match.",
	}))
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	for _, vid := range volumeIDs(ents, ".dat") {
		v, err := volume.Open(cfg.Dir, vid, cfg.volumeOptions())
		if err != nil {
			s.Close()
			return nil, errors.E(op, err)
		}
		if st := v.Stats(); st.Truncated > 0 || st.Damaged > 0 {
			s.log.Warn("volume repaired at open", "volume", vid, "truncated_bytes", st.Truncated, "damaged_records", st.Damaged)
		}
		s.vols[vid] = v
	}
	if err := s.openShards(); err != nil {
		s.Close()
		return nil, errors.E(op, errors.IO, err)
	}
	return s, nil
}

// registerCounter registers c, or returns the counter already registered
// under its name (several stores in one test process share it).
func registerCounter(reg prometheus.Registerer, c prometheus.Counter) prometheus.Counter {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if ex, ok := are.ExistingCollector.(prometheus.Counter); ok {
				return ex
			}
		}
	}
	return c
}

// serverID returns the id kept in dir/server.id, creating it once.
func serverID(dir string) (string, error) {
	name := filepath.Join(dir, "server.id")
	if b, err := os.ReadFile(name); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		return "", err
	}
	return id, os.Rename(tmp, name)
}

// ID is the server's stable id.
func (s *Store) ID() string { return s.id }

// Ops is the store's operation counters (for the admin handler).
func (s *Store) Ops() *metrics.Ops { return s.ops }

func volPath(vid uint32) errors.Path { return errors.Path(strconv.FormatUint(uint64(vid), 10)) }

func (s *Store) volume(op errors.Op, vid uint32) (*volume.Volume, error) {
	s.mu.RLock()
	v, ok := s.vols[vid]
	closed := s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return nil, errors.E(op, errors.Unavailable, "data server is closed")
	case !ok:
		return nil, errors.E(op, errors.NotExist, volPath(vid), "no such volume")
	}
	return v, nil
}

func ctxErr(op errors.Op, ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return errors.E(op, errors.Canceled, err)
	}
	return nil
}

// Put stores data as a new needle of volume vid; see cairn.Chunks.
func (s *Store) Put(ctx context.Context, vid uint32, gen uint64, data []byte) (key uint64, err error) {
	const op errors.Op = "chunk.Put"
	done := s.ops.Start("put")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return 0, err
	}
	if err := s.serving(op); err != nil {
		return 0, err
	}
	peers, err := s.peers(op, vid, gen)
	if err != nil {
		return 0, err
	}
	if len(peers) > 0 {
		return s.putReplicated(ctx, op, vid, gen, data, peers)
	}
	v, err := s.volume(op, vid)
	if err != nil {
		return 0, err
	}
	return v.Append(gen, data)
}

// PutKey stores data under a key the caller chose (replication writes
// the primary's key); an existing needle with the key is replaced.
func (s *Store) PutKey(ctx context.Context, vid uint32, gen, key uint64, data []byte) (err error) {
	const op errors.Op = "chunk.PutKey"
	done := s.ops.Start("putkey")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return err
	}
	if err := s.serving(op); err != nil {
		return err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		return err
	}
	return v.AppendKey(gen, key, data)
}

// ReadTo copies [off, off+length) of a needle to w, verified; see
// cairn.Chunks.
func (s *Store) ReadTo(ctx context.Context, vid uint32, key uint64, off, length int64, w io.Writer) (n int64, err error) {
	const op errors.Op = "chunk.ReadTo"
	done := s.ops.Start("get")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return 0, err
	}
	if err := s.serving(op); err != nil {
		return 0, err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		if ev := s.ecVolume(vid); ev != nil {
			return s.ecReadTo(ctx, ev, key, off, length, w)
		}
		return 0, err
	}
	n, err = v.ReadTo(key, off, length, w)
	if errors.Is(errors.Corrupt, err) {
		s.foundCorrupt(vid, key, err)
		s.repairSoon(vid, key)
	}
	return n, err
}

// Size returns the length of a needle.
func (s *Store) Size(ctx context.Context, vid uint32, key uint64) (n int64, err error) {
	const op errors.Op = "chunk.Size"
	done := s.ops.Start("head")
	defer func() { done(err) }()
	if err := s.serving(op); err != nil {
		return 0, err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		if ev := s.ecVolume(vid); ev != nil {
			return s.ecSize(ev, key)
		}
		return 0, err
	}
	return v.Size(key)
}

// Delete removes a needle; see cairn.Chunks.
func (s *Store) Delete(ctx context.Context, vid uint32, gen uint64, key uint64) (err error) {
	const op errors.Op = "chunk.Delete"
	done := s.ops.Start("delete")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return err
	}
	if err := s.serving(op); err != nil {
		return err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		if ev := s.ecVolume(vid); ev != nil {
			return s.ecDelete(ev, key) // every shard server keeps the index
		}
		return err
	}
	return v.Delete(gen, key)
}

// CreateVolume creates volume vid at generation gen. If it exists at gen,
// that is success; at a lower generation, the volume moves to gen (meta
// bumped it when the replica set changed); at a higher one, errors.Stale.
func (s *Store) CreateVolume(ctx context.Context, vid uint32, gen uint64) (err error) {
	const op errors.Op = "chunk.CreateVolume"
	done := s.ops.Start("create")
	defer func() { done(err) }()
	if err := ctxErr(op, ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.E(op, errors.Unavailable, "data server is closed")
	}
	if v, ok := s.vols[vid]; ok {
		if v.Gen() == gen {
			return nil
		}
		if err := v.SetGen(gen); err != nil {
			return errors.E(op, err)
		}
		return nil
	}
	v, err := volume.Create(s.cfg.Dir, vid, gen, s.volumeOptions())
	if err != nil {
		return errors.E(op, err)
	}
	s.vols[vid] = v
	s.log.Info("volume created", "volume", vid, "gen", gen)
	return nil
}

// SetReadOnly marks a volume read-only or writable.
func (s *Store) SetReadOnly(vid uint32, ro bool) error {
	v, err := s.volume("chunk.SetReadOnly", vid)
	if err != nil {
		return err
	}
	return v.SetReadOnly(ro)
}

// VolumeStats returns every volume's figures, by volume id.
func (s *Store) VolumeStats() []volume.Stats {
	s.mu.RLock()
	out := make([]volume.Stats, 0, len(s.vols))
	for _, v := range s.vols {
		out = append(out, v.Stats())
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b volume.Stats) int { return int(a.ID) - int(b.ID) })
	return out
}

// Stats returns the volumes as heartbeats report them.
func (s *Store) Stats() []*metapb.VolumeStat {
	var out []*metapb.VolumeStat
	for _, st := range s.VolumeStats() {
		out = append(out, &metapb.VolumeStat{
			Id: st.ID, Generation: st.Gen, Size: uint64(st.Size), Garbage: uint64(st.Garbage),
			// A volume whose disk is full or whose fdatasync failed takes no
			// new needles: meta then assigns writes to other volumes.
			Needles: uint64(st.Needles), ReadOnly: st.ReadOnly || st.Full || st.NoSpace || st.Failed,
		})
	}
	return out
}

// Compact compacts volume vid now. Reads continue meanwhile; writes to
// the volume pause only for the final swap.
func (s *Store) Compact(vid uint32) (err error) {
	const op errors.Op = "chunk.Compact"
	done := s.ops.Start("compact")
	defer func() { done(err) }()
	v, err := s.volume(op, vid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.compacting[vid] {
		s.mu.Unlock()
		return errors.E(op, errors.Unavailable, volPath(vid), "compaction already running")
	}
	s.compacting[vid] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.compacting, vid)
		s.mu.Unlock()
	}()
	before := v.Stats()
	start := time.Now()
	if err := v.Compact(); err != nil {
		return errors.E(op, err)
	}
	after := v.Stats()
	s.log.Info("volume compacted", "volume", vid, "before", before.Size, "after", after.Size, "took", time.Since(start))
	return nil
}

// Close closes every volume. Calls after Close fail with errors.Unavailable.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	vols := s.vols
	s.vols = map[uint32]*volume.Volume{}
	s.mu.Unlock()
	s.ec.closeStreams()
	s.ec.closeShards()
	var errs []error
	for _, v := range vols {
		if err := v.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run sends heartbeats to meta (if configured), compacts volumes whose
// garbage passes Config.CompactRatio, scrubs, repairs needles that reads
// found corrupt, and serves local readers
// (local.go), until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if s.cfg.Meta != nil {
		wg.Go(func() { s.heartbeats(ctx) })
	}
	if s.cfg.CompactRatio > 0 {
		wg.Go(func() { s.compactor(ctx) })
	}
	if s.cfg.ScrubRate > 0 {
		wg.Go(func() { s.scrubber(ctx) })
	}
	wg.Go(func() { s.repairer(ctx) })
	if !s.cfg.NoLocalReads {
		wg.Go(func() { s.serveLocal(ctx) })
	}
	wg.Wait()
	return ctx.Err()
}

// heartbeats renews the lease every heartbeatPeriod. A heartbeat that
// fails is sent again after heartbeatRetry, not a period later: meta may
// be changing leaders, and the lease runs out meanwhile (the group client
// finds the new leader; each attempt is bounded, see Heartbeat).
func (s *Store) heartbeats(ctx context.Context) {
	failing := false
	for {
		start := time.Now()
		err := s.Heartbeat(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			s.log.Warn("heartbeat failed", "err", err)
			failing = true
		case err == nil && failing:
			s.log.Info("heartbeat ok again")
			failing = false
		}
		wait := time.Until(start.Add(s.heartbeatPeriod()))
		if err != nil {
			wait = heartbeatRetry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// heartbeatRetry is the pause before a failed heartbeat is sent again:
// short against any lease, long enough not to spin on a meta that
// refuses at once.
const heartbeatRetry = 50 * time.Millisecond

// heartbeatPatience is how much longer than a period a heartbeat waits
// for its answer: long enough for the group client to find a new leader
// for it (its watch starts at 1-1.25 s and asks every half second), and
// short of a lease, which ends anyway if no member leads for that long.
const heartbeatPatience = 2 * time.Second

// leaseRenewals is how many heartbeats a lease spans at least: renewed
// that often, a lease outlasts a meta failover (an election, then the new
// leader's first answer) of up to five sixths of its length. Renewed every
// HeartbeatInterval, the 2.25 s lease of a 3 s dead-after outlasted 1.25 s
// in the worst case, and a failover takes 1-2 s.
const leaseRenewals = 6

// heartbeatPeriod is the time between heartbeats: HeartbeatInterval, or
// less when meta's leases are short (a cluster with a short dead-after).
func (s *Store) heartbeatPeriod() time.Duration {
	p := s.cfg.HeartbeatInterval
	if l := time.Duration(s.repl.leaseLen.Load()); l > 0 {
		p = min(p, l/leaseRenewals)
	}
	return p
}

// Heartbeat sends one heartbeat to meta. One attempt is bounded by a
// heartbeat period plus heartbeatPatience. A leader that went silent
// (stopped, or cut off with its connections open) answers nothing; the
// group client watches a call unanswered for a second, asks the other
// members who leads and sends the call again to a new leader the moment
// one is named (meta/failover.go). A bound shorter than that watch gave
// up first, and the next heartbeat went wherever a follower pointed: to
// the silent leader again until the election ended, a period lost each
// time. Back-to-back leader changes then cost data servers their leases.
func (s *Store) Heartbeat(ctx context.Context) error {
	if s.cfg.Meta == nil {
		return nil
	}
	req := &metapb.HeartbeatRequest{
		ServerId: s.id, Addr: s.cfg.Addr, Labels: s.cfg.Labels, Volumes: s.Stats(), Disk: s.DiskHealth(),
		Shards: s.ShardStats(),
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.Dir, &fs); err == nil {
		req.Capacity = fs.Blocks * uint64(fs.Bsize)
		req.Free = fs.Bavail * uint64(fs.Bsize)
	}
	ctx, cancel := context.WithTimeout(ctx, s.heartbeatPeriod()+heartbeatPatience)
	defer cancel()
	sent := time.Now()
	resp, err := s.cfg.Meta.Heartbeat(ctx, req)
	if err != nil {
		return errors.E(errors.Op("chunk.Heartbeat"), errors.Unavailable, err)
	}
	s.heartbeatAnswer(sent, resp)
	return nil
}

func (s *Store) compactor(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, st := range s.VolumeStats() {
			if ctx.Err() != nil {
				return
			}
			// Read-only volumes too: in a cluster most volumes end read-only
			// (full, or after a replica failed) and still take deletes.
			if st.GarbageRatio() < s.cfg.CompactRatio {
				continue
			}
			if err := s.Compact(st.ID); err != nil && !errors.Is(errors.Unavailable, err) {
				s.log.Error("background compaction failed", "volume", st.ID, "err", err)
			}
		}
	}
}

func (s *Store) String() string { return fmt.Sprintf("chunk.Store(%s)", s.cfg.Dir) }
