package chunk

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cairn/ec"
	"cairn/errors"
	"cairn/proto/metapb"
	"cairn/volume"

	"golang.org/x/sys/unix"
)

// Erasure-coded volumes on a data server (tiers; package ec has the
// format). A sealed volume of an ec class is encoded by the server holding
// its primary replica (EncodeVolume) into K+M shard files sent to the K+M
// servers meta chose; each keeps
//
//	{vid}.ec{NN}   shard NN (ec's shard file: header, cells, footer)
//	{vid}.ecx      the volume's needle index: where each live needle's
//	               data lies in the encoded .dat
//	{vid}.ecd      keys deleted since encoding, 8 bytes each
//
// A needle read on any shard server finds the needle in the index and
// reads it with volume's verifying reader over an ec.Reader whose shards
// are this server's own files and its peers' (GET /ec/{vid}/shards/{i}):
// straight from the data shard that holds it, rebuilt from any K others
// when that one is missing or returns bytes that fail the needle's CRCs.
// Meta learns of the shards from heartbeats (ShardStat) and tells each
// server where the others lie (HeartbeatResponse.ec_volumes).

type ecState struct {
	mu   sync.RWMutex
	vols map[uint32]*ecVol
	// closed is set (with mu) by Store.Close: shards loaded after it are
	// closed at once.
	closed bool
	// mapped counts the shard files mapped and not yet unmapped.
	mapped    atomic.Int64
	scrubbing sync.Map // [vid, shard] -> true while a scrub of it runs
	hint      sync.Map // vid -> []string: shard servers from the encode, until meta's word
	peers     sync.Map // addr -> *Remote: one client per peer, not one per read
	ranges    sync.Map // addr -> *rangePool: streams of shard ranges to peers (ec_ranges.go)
	// streams are the ranges streams served here (hijacked from HTTP:
	// Close ends them).
	streamsMu     sync.Mutex
	streams       map[net.Conn]struct{}
	streamsClosed bool
	rangesServed  atomic.Int64 // ranges asked (and allowed) on streams
	// stagedSwept is when (Unix ns) ecHeartbeat last looked for staged
	// files to drop (a degraded read may send a heartbeat too).
	stagedSwept atomic.Int64
}

// ecPeer is the client of the shard server at addr, made once: a read
// that goes to peers asks up to K of them.
func (s *Store) ecPeer(addr string) *Remote {
	if r, ok := s.ec.peers.Load(addr); ok {
		return r.(*Remote)
	}
	r, _ := s.ec.peers.LoadOrStore(addr, s.peer(addr))
	return r.(*Remote)
}

// ecBufs keeps the buffers of needle records fetched whole and of shard
// ranges served to peers: a degraded read would otherwise allocate and
// zero its needle's size several times over.
var ecBufs sync.Pool // *[]byte

func getECBuf(n int64) *[]byte {
	if bp, ok := ecBufs.Get().(*[]byte); ok && int64(cap(*bp)) >= n {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, max(n, 256<<10))
	return &b
}

func putECBuf(bp *[]byte) {
	if cap(*bp) <= prefetchMax {
		ecBufs.Put(bp)
	}
}

// ecVol is one erasure-coded volume this server holds shards of.
type ecVol struct {
	vid     uint32
	layout  ec.Layout
	idx     []ec.Needle // by key
	deleted map[uint64]bool
	shards  map[int]*localShard
	servers []string // shard i's server from meta ("" lost); nil until told
	// failed is when a peer's shard last failed a read: for a while reads
	// rebuild without asking it (a dead server costs no round trip each).
	failed sync.Map // peerShard -> time.Time
}

type peerShard struct {
	idx  int
	addr string
}

// peerRetry is how long a peer's shard that failed is left out of reads.
const peerRetry = 2 * time.Second

type localShard struct {
	f    *os.File
	s    *ec.Shard
	size int64
	fi   os.FileInfo // to know the file again when reopened by name
	m    *shardMap   // nil: not mapped
}

func ecIndexPath(dir string, vid uint32) string {
	return filepath.Join(dir, strconv.FormatUint(uint64(vid), 10)+".ecx")
}

func ecDeletedPath(dir string, vid uint32) string {
	return filepath.Join(dir, strconv.FormatUint(uint64(vid), 10)+".ecd")
}

func ecShardPath(dir string, vid uint32, i int) string {
	return filepath.Join(dir, fmt.Sprintf("%d.ec%02d", vid, i))
}

// openShards finds the shard files in the data directory (at Open).
func (s *Store) openShards() error {
	s.ec.vols = map[uint32]*ecVol{}
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		// A shard or index upload cut short by a crash (writeFileSynced's
		// temporary file): never renamed into place, never read.
		if n := e.Name(); strings.Contains(n, ".ec") && strings.Contains(n, ".tmp") {
			os.Remove(filepath.Join(s.cfg.Dir, n))
		}
	}
	for _, vid := range volumeIDs(ents, ".ecx") {
		if err := s.loadEC(vid); err != nil {
			s.log.Warn("erasure-coded volume not loaded", "volume", vid, "err", err)
		}
	}
	return nil
}

// loadEC (re)reads volume vid's index, deletions and shard files.
func (s *Store) loadEC(vid uint32) error {
	b, err := os.ReadFile(ecIndexPath(s.cfg.Dir, vid))
	if err != nil {
		return err
	}
	got, locs, err := ec.ParseIndex(b)
	if err != nil {
		return err
	}
	if got != vid {
		return errors.Errorf("chunk.loadEC", errors.Corrupt, "index of volume %d in the file of %d", got, vid)
	}
	ev := &ecVol{vid: vid, idx: locs, deleted: map[uint64]bool{}, shards: map[int]*localShard{}}
	if d, err := os.ReadFile(ecDeletedPath(s.cfg.Dir, vid)); err == nil {
		for i := 0; i+8 <= len(d); i += 8 {
			ev.deleted[binary.LittleEndian.Uint64(d[i:])] = true
		}
	}
	for i := 0; i < ec.MaxShards; i++ {
		ls, err := openLocalShard(ecShardPath(s.cfg.Dir, vid, i), &s.ec.mapped)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			s.log.Warn("shard file refused", "volume", vid, "shard", i, "err", err)
			continue
		}
		if ls.s.Index != i || ls.s.Volume != vid {
			ls.close()
			continue
		}
		ev.layout = ls.s.Layout
		ev.shards[i] = ls
	}
	s.ec.mu.Lock()
	if s.ec.closed {
		s.ec.mu.Unlock()
		for _, ls := range ev.shards {
			ls.close()
		}
		return errors.E(errors.Op("chunk.loadEC"), errors.Unavailable, volPath(vid), "store closed")
	}
	if h, ok := s.ec.hint.Load(vid); ok {
		ev.servers = h.([]string)
	}
	if old := s.ec.vols[vid]; old != nil && old.servers != nil {
		ev.servers = old.servers
		for _, ls := range old.shards {
			ls.close() // a reader still holding it fails and rebuilds
		}
	}
	s.ec.vols[vid] = ev
	s.ec.mu.Unlock()
	return nil
}

// openLocalShard opens and maps a shard file; live counts the mapping.
func openLocalShard(path string, live *atomic.Int64) (*localShard, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	m := mapShard(f, fi.Size(), live)
	var under io.ReaderAt = f
	if m != nil {
		under = mappedFile{f, m}
	}
	sh, err := ec.OpenShard(under, fi.Size())
	if err != nil {
		m.release()
		f.Close()
		return nil, err
	}
	return &localShard{f: f, s: sh, size: fi.Size(), fi: fi, m: m}, nil
}

// close closes the shard's file and gives up its hold on the mapping
// (unmapped once no reader holds it): the shard is dropped or replaced.
func (ls *localShard) close() {
	ls.f.Close()
	ls.retireMap()
}

// retireMap gives up the shard's hold on its mapping, once.
func (ls *localShard) retireMap() {
	if ls.m != nil && ls.m.retired.CompareAndSwap(false, true) {
		ls.m.release()
	}
}

// shardMap is a local shard file mapped read-only: a rebuild here reads
// the local shard's range in place (ec.Lender: no pread, no copy). The
// mapping is unmapped when the shard is dropped or replaced, or the store
// closed, and the last reader lending from it is done: a reader never
// touches unmapped memory. Shard files are never truncated or written in
// place here (every writer, storeShard's upload or rebuild and SwitchEC's
// compaction, renames a new file over the old), so the mapped bytes stay;
// a file cut short from outside faults the reader that lends from it,
// which ec.Reader turns into a failed read of that shard (faultSafe).
type shardMap struct {
	b       []byte
	refs    atomic.Int64 // the shard's own hold, until retired, and lenders
	retired atomic.Bool
	live    *atomic.Int64 // the store's count of mappings
}

// mapShard maps f (size bytes), or returns nil if it cannot: reads then
// go through pread as before. live counts it until it is unmapped.
func mapShard(f *os.File, size int64, live *atomic.Int64) *shardMap {
	if size <= 0 || int64(int(size)) != size {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var b []byte
	cerr := rc.Control(func(fd uintptr) {
		b, err = unix.Mmap(int(fd), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	})
	if cerr != nil || err != nil {
		return nil
	}
	m := &shardMap{b: b, live: live}
	m.refs.Store(1)
	live.Add(1)
	return m
}

func (m *shardMap) acquire() bool {
	for {
		r := m.refs.Load()
		if r == 0 {
			return false
		}
		if m.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (m *shardMap) release() {
	if m != nil && m.refs.Add(-1) == 0 {
		unix.Munmap(m.b)
		m.live.Add(-1)
	}
}

// mappedFile is a shard file whose bytes can also be lent from its
// mapping.
type mappedFile struct {
	*os.File
	m *shardMap
}

func (f mappedFile) Lend(off, n int64) ([]byte, func(), bool) {
	if off < 0 || n < 0 || off+n > int64(len(f.m.b)) || !f.m.acquire() {
		return nil, nil, false
	}
	return f.m.b[off : off+n : off+n], f.m.release, true
}

// closeShards closes every shard file and gives up the mappings (each
// unmapped once no reader lends from it): Store.Close.
func (e *ecState) closeShards() {
	e.mu.Lock()
	e.closed = true
	vols := e.vols
	e.vols = map[uint32]*ecVol{}
	e.mu.Unlock()
	for _, ev := range vols {
		for _, ls := range ev.shards {
			ls.close()
		}
	}
}

func (s *Store) ecVolume(vid uint32) *ecVol {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	return s.ec.vols[vid]
}

// ShardStats is what the heartbeat reports of the shards held here.
func (s *Store) ShardStats() []*metapb.ShardStat {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	var out []*metapb.ShardStat
	for _, ev := range s.ec.vols {
		var dead, live int64
		for _, n := range ev.idx {
			if ev.deleted[n.Key] {
				dead += n.Size
			} else {
				live += n.Size
			}
		}
		for i, ls := range ev.shards {
			out = append(out, &metapb.ShardStat{Volume: ev.vid, Index: uint32(i), Size: uint64(ls.size),
				DeadBytes: uint64(dead), LiveBytes: uint64(live)})
		}
	}
	slices.SortFunc(out, func(a, b *metapb.ShardStat) int {
		return int(int64(a.Volume)<<8+int64(a.Index)) - int(int64(b.Volume)<<8+int64(b.Index))
	})
	return out
}

// ecHeartbeat applies meta's word on the ec volumes with a shard here:
// where every shard lies.
func (s *Store) ecHeartbeat(vols []*metapb.Volume) {
	known := map[uint32]*metapb.Volume{}
	for _, v := range vols {
		if v.Ec != nil {
			known[v.Id] = v
		}
	}
	s.ec.mu.Lock()
	for vid, ev := range s.ec.vols {
		if v := known[vid]; v != nil {
			ev.servers = slices.Clone(v.Ec.ShardServers)
		}
	}
	s.ec.mu.Unlock()
	// A compaction meta recorded whose switch this server missed.
	for vid, v := range known {
		if _, err := os.Stat(ecStagedIndexPath(s.cfg.Dir, vid, v.Generation)); err == nil {
			s.ecSwitchStaged(vid, v.Generation)
		}
	}
	// Staged files of compactions that ended without a switch here, now
	// and then: it lists the directory.
	now := time.Now().UnixNano()
	if last := s.ec.stagedSwept.Load(); now-last >= int64(stagedSweep) && s.ec.stagedSwept.CompareAndSwap(last, now) {
		s.ecDropStaged(known)
	}
}

// stagedSweep is how often the heartbeat looks for staged files to drop.
const stagedSweep = time.Minute

// ecDropShards deletes the stale shards meta names (HeartbeatResponse.
// ec_drop: another server holds them now, and has said so). A volume
// left with no shard here loses its index and deletions too.
func (s *Store) ecDropShards(drop []*metapb.ShardStat) {
	for _, st := range drop {
		vid, i := st.Volume, int(st.Index)
		s.ec.mu.Lock()
		ev := s.ec.vols[vid]
		var ls *localShard
		if ev != nil {
			ls = ev.shards[i]
			delete(ev.shards, i)
		}
		last := ev != nil && len(ev.shards) == 0
		if last {
			delete(s.ec.vols, vid)
		}
		s.ec.mu.Unlock()
		if ls == nil {
			continue
		}
		ls.close() // a reader still holding it fails over to a rebuild
		if err := os.Remove(ecShardPath(s.cfg.Dir, vid, i)); err != nil && !os.IsNotExist(err) {
			s.log.Warn("could not delete a stale shard", "volume", vid, "shard", i, "err", err)
			continue
		}
		s.log.Info("stale shard deleted: meta has it on another server", "volume", vid, "shard", i)
		if last {
			os.Remove(ecIndexPath(s.cfg.Dir, vid))
			os.Remove(ecDeletedPath(s.cfg.Dir, vid))
		}
	}
}

// ecDropVolume forgets erasure-coded volume vid here and deletes its
// shard files (not its index: the caller writes the next one).
func (s *Store) ecDropVolume(vid uint32) {
	s.ec.mu.Lock()
	ev := s.ec.vols[vid]
	delete(s.ec.vols, vid)
	s.ec.mu.Unlock()
	if ev != nil {
		for _, ls := range ev.shards {
			ls.close()
		}
	}
	for i := range ec.MaxShards {
		if err := os.Remove(ecShardPath(s.cfg.Dir, vid, i)); err == nil {
			s.log.Info("shard of an unfinished encode deleted", "volume", vid, "shard", i)
		}
	}
}

// locate finds needle key of an ec volume.
func (s *Store) ecLocate(ev *ecVol, key uint64) (volume.Location, bool) {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	return ev.locate(key)
}

// locate is ecLocate with s.ec.mu held.
func (ev *ecVol) locate(key uint64) (volume.Location, bool) {
	n, ok := ec.Find(ev.idx, key)
	if !ok || ev.deleted[key] {
		return volume.Location{}, false
	}
	return volume.Location{Data: n.Data, Size: n.Size}, true
}

// liveIndex is the index without the needles deleted since encoding.
func (s *Store) liveIndex(ev *ecVol) []byte {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	live := make([]ec.Needle, 0, len(ev.idx))
	for _, n := range ev.idx {
		if !ev.deleted[n.Key] {
			live = append(live, n)
		}
	}
	return ec.MarshalIndex(ev.vid, live)
}

// reader is an ec.Reader over this server's shards and its peers'.
func (s *Store) ecReader(ctx context.Context, ev *ecVol, askAll bool) (*ec.Reader, error) {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	l := ev.layout
	shards := make([]io.ReaderAt, l.K+l.M)
	for i := range shards {
		if ls := ev.shards[i]; ls != nil {
			shards[i] = ls.s
		} else if i < len(ev.servers) && ev.servers[i] != "" && ev.servers[i] != s.cfg.Addr {
			if t, ok := ev.failed.Load(peerShard{i, ev.servers[i]}); ok && !askAll && time.Since(t.(time.Time)) < peerRetry {
				continue
			}
			shards[i] = &remoteShard{ctx: ctx, r: s.rangeStreams(ev.servers[i]), vid: ev.vid, idx: i, ev: ev}
		}
	}
	return ec.NewReader(l, shards)
}

// remoteShard reads a peer's shard over the data plane.
type remoteShard struct {
	ctx context.Context
	r   *rangePool
	vid uint32
	idx int
	ev  *ecVol // nil: do not remember failures
}

func (rs *remoteShard) ReadAt(p []byte, off int64) (int, error) {
	n, err := rs.r.ReadShard(rs.ctx, rs.vid, rs.idx, p, off)
	if err != nil && rs.ev != nil && rs.ctx.Err() == nil {
		rs.ev.failed.Store(peerShard{rs.idx, rs.r.r.Addr()}, time.Now())
	}
	return n, err
}

// Ask is ReadAt sent ahead (ec.Asker): a rebuild asks its peers at once.
func (rs *remoteShard) Ask(p []byte, off int64) func() error {
	wait := rs.r.Ask(rs.ctx, rs.vid, rs.idx, p, off)
	return func() error {
		err := wait()
		if err != nil && rs.ev != nil && rs.ctx.Err() == nil {
			rs.ev.failed.Store(peerShard{rs.idx, rs.r.r.Addr()}, time.Now())
		}
		return err
	}
}

// avoiding reads an ec.Reader without the shards in avoid.
type avoiding struct {
	r     *ec.Reader
	avoid []int
}

func (a avoiding) ReadAt(p []byte, off int64) (int, error) {
	return a.r.ReadAtAvoiding(p, off, a.avoid)
}

// ecReadTo is ReadTo of a needle of an erasure-coded volume. A read whose
// bytes fail the needle's checksums is read again with the data shards
// that held it rebuilt from the others, from where the good bytes ended.
func (s *Store) ecReadTo(ctx context.Context, ev *ecVol, key uint64, off, length int64, w io.Writer) (int64, error) {
	const op = errors.Op("chunk.ecReadTo")
	loc, ok := s.ecLocate(ev, key)
	if !ok {
		return 0, errors.E(op, errors.NotExist, volPath(ev.vid), "no such needle")
	}
	n, err := s.ecReadOnce(ctx, ev, key, loc, off, length, w, false)
	if n == 0 && err != nil && !errors.Is(errors.NotExist, err) && !errors.Is(errors.Range, err) && ctx.Err() == nil {
		// Too few shards among those not recently failed: ask every one.
		n, err = s.ecReadOnce(ctx, ev, key, loc, off, length, w, true)
		if n == 0 && err != nil && !errors.Is(errors.NotExist, err) && ctx.Err() == nil && s.Heartbeat(ctx) == nil {
			// Still too few: where the shards lie may have changed since
			// the last heartbeat (meta rebuilt one elsewhere, and its old
			// holder answers "no shard here"). This heartbeat's answer
			// carries the map as meta has it now.
			return s.ecReadOnce(ctx, ev, key, loc, off, length, w, true)
		}
	}
	return n, err
}

func (s *Store) ecReadOnce(ctx context.Context, ev *ecVol, key uint64, loc volume.Location, off, length int64, w io.Writer, askAll bool) (int64, error) {
	r, err := s.ecReader(ctx, ev, askAll)
	if err != nil {
		return 0, errors.E(errors.Op("chunk.ecReadTo"), err)
	}
	// A needle whose record (data and block checksums) lies in local
	// shards is read block by block as the verifier asks, straight from
	// disk. One that needs a peer's shard, or a rebuild, is fetched whole
	// first: one request (or one rebuild of K parallel reads) instead of
	// one per block.
	blocks := (loc.Size + volume.BlockSize - 1) / volume.BlockSize
	rec := loc.Size + 4*blocks
	var n int64
	fetched := false
	if rec <= prefetchMax && !s.allLocal(ev, loc.Data, rec) {
		bp := getECBuf(rec)
		defer putECBuf(bp) // WriteRecord is done with it when it returns
		if _, rerr := r.ReadAt(*bp, loc.Data); rerr == nil {
			// Verified in place and written in one piece: no copy. A
			// record that fails its checksums goes on to the rebuild below.
			fetched = true
			n, err = volume.WriteRecord(*bp, key, loc.Size, off, length, w)
		}
	}
	if !fetched {
		n, err = volume.ReadLocated(avoiding{r: r}, key, loc, off, length, w)
	}
	if err == nil || !errors.Is(errors.Corrupt, err) {
		return n, err
	}
	s.corrupt.Inc()
	var avoid []int
	for _, pc := range ev.layout.Pieces(loc.Data, rec) {
		if !slices.Contains(avoid, pc.Shard) {
			avoid = append(avoid, pc.Shard)
		}
	}
	s.log.Warn("needle of an erasure-coded volume failed its checksum; rebuilding it from the other shards", "volume", ev.vid, "key", key, "shards", avoid)
	for _, i := range avoid {
		s.ec.mu.RLock()
		local := ev.shards[i] != nil
		s.ec.mu.RUnlock()
		if local {
			go s.scrubShard(ev, i) // a damaged shard is dropped and rebuilt
		}
	}
	m, err := volume.ReadLocated(avoiding{r: r, avoid: avoid}, key, loc, off+n, length-n, w)
	return n + m, err
}

// allLocal reports whether bytes [off, off+n) of the encoded file lie in
// shards on this server.
func (s *Store) allLocal(ev *ecVol, off, n int64) bool {
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	for _, pc := range ev.layout.Pieces(off, n) {
		if ev.shards[pc.Shard] == nil {
			return false
		}
	}
	return true
}

// prefetchMax bounds the record a read of an ec needle fetches whole.
const prefetchMax = 16 << 20

// window is a ReaderAt that answers from b (the bytes at base) what lies
// in it, and from under the rest.
type window struct {
	base  int64
	b     []byte
	under io.ReaderAt
}

func (w window) ReadAt(p []byte, off int64) (int, error) {
	if off >= w.base && off+int64(len(p)) <= w.base+int64(len(w.b)) {
		return copy(p, w.b[off-w.base:]), nil
	}
	return w.under.ReadAt(p, off)
}

// ecSize is Size for an ec volume.
func (s *Store) ecSize(ev *ecVol, key uint64) (int64, error) {
	loc, ok := s.ecLocate(ev, key)
	if !ok {
		return 0, errors.E(errors.Op("chunk.Size"), errors.NotExist, volPath(ev.vid), "no such needle")
	}
	return loc.Size, nil
}

// ecDelete records a needle deleted: appended to the .ecd and synced
// before the answer. Its bytes stay in the shards (they are immutable);
// the space comes back when the volume is re-encoded (not yet done).
func (s *Store) ecDelete(ev *ecVol, key uint64) error {
	const op = errors.Op("chunk.ecDelete")
	s.ec.mu.Lock()
	defer s.ec.mu.Unlock()
	if _, ok := ev.locate(key); !ok {
		return nil
	}
	f, err := os.OpenFile(ecDeletedPath(s.cfg.Dir, ev.vid), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	defer f.Close()
	if _, err := f.Write(binary.LittleEndian.AppendUint64(nil, key)); err != nil {
		return errors.E(op, errors.IO, err)
	}
	if err := f.Sync(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	ev.deleted[key] = true
	return nil
}

// writeFileSynced writes a file whole under a temporary name, syncs it,
// renames it into place and syncs the directory: it exists complete or
// not at all. check, if set, vets the synced file before the rename.
func writeFileSynced(dir, name string, body io.Reader, check func(*os.File) error) (int64, error) {
	tmp, err := os.CreateTemp(dir, name+".tmp*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	n, err := copyToFile(tmp, body)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil && check != nil {
		err = check(tmp)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return n, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return n, err
	}
	defer d.Close()
	return n, d.Sync()
}

// copyBufs are copyToFile's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyChunk); return &b }}

const (
	copyChunk      = 1 << 20 // bytes per write of copyToFile
	writebackChunk = 8 << 20 // bytes written between writebacks started
)

// copyToFile copies body to f in writes of copyChunk (io.Copy's 32 KiB
// cost a shard of a volume tens of thousands of system calls), and has
// the kernel start writing every writebackChunk to disk as it goes
// (startWriteback): the fsync that ends a shard upload then waits for
// the last few MiB, not for a whole shard left in the page cache, and
// the disk works while the shard is still arriving. The fsync is still
// what makes the file durable.
func copyToFile(f *os.File, body io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	var n, started int64
	for {
		k, rerr := io.ReadFull(body, *bp)
		if k > 0 {
			if _, err := f.Write((*bp)[:k]); err != nil {
				return n, err
			}
			n += int64(k)
			if n-started >= writebackChunk {
				startWriteback(f, started, n-started)
				started = n
			}
		}
		switch rerr {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return n, nil
		default:
			return n, rerr
		}
	}
}

// PutShardIndex stores volume vid's needle index (before its shards).
// servers, if given, says where every shard goes: reads may need them
// before meta's heartbeat answer says so.
func (s *Store) PutShardIndex(vid uint32, b []byte, servers []string) error {
	const op = errors.Op("chunk.PutShardIndex")
	if len(servers) > 0 {
		// An encode begins (only EncodeVolume names the servers): shards
		// of the volume here are from an attempt that did not finish (a
		// crash of meta or of a server in the middle), perhaps of another
		// size; none of them may be read with this index.
		s.ecDropVolume(vid)
		s.ec.hint.Store(vid, slices.Clone(servers))
	}
	got, _, err := ec.ParseIndex(b)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	if got != vid {
		return errors.Errorf(op, errors.Invalid, "index of volume %d sent for %d", got, vid)
	}
	name := filepath.Base(ecIndexPath(s.cfg.Dir, vid))
	if _, err := writeFileSynced(s.cfg.Dir, name, strings.NewReader(string(b)), nil); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// PutShard stores shard idx of volume vid from body (a whole shard file),
// durable and checked (header, size) before it is used; then the volume
// is loaded again with it.
func (s *Store) PutShard(vid uint32, idx int, body io.Reader) error {
	const op = errors.Op("chunk.PutShard")
	if err := s.storeShard(op, ecIndexPath(s.cfg.Dir, vid), ecShardPath(s.cfg.Dir, vid, idx), vid, idx, body); err != nil {
		return err
	}
	return s.loadEC(vid)
}

// storeShard writes shard idx of volume vid from body to path, synced, once
// the volume's index (at index) is there and the file's header names that
// shard of that volume.
func (s *Store) storeShard(op errors.Op, index, path string, vid uint32, idx int, body io.Reader) error {
	if _, err := os.Stat(index); err != nil {
		return errors.E(op, errors.Invalid, volPath(vid), "shard sent before its volume's index")
	}
	_, err := writeFileSynced(s.cfg.Dir, filepath.Base(path), body, func(f *os.File) error {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		sh, err := ec.OpenShard(f, fi.Size())
		if err != nil {
			return err
		}
		if sh.Volume != vid || sh.Index != idx {
			return errors.Errorf(op, errors.Invalid, "shard %d of volume %d sent as %d of %d", sh.Index, sh.Volume, idx, vid)
		}
		return nil
	})
	if err != nil {
		return errors.E(op, errors.IO, volPath(vid), err)
	}
	return nil
}

// readShard reads cell bytes of a local shard (a peer's reconstruction).
func (s *Store) readShard(vid uint32, idx int, p []byte, off int64) error {
	var ls *localShard
	s.ec.mu.RLock()
	if ev := s.ec.vols[vid]; ev != nil {
		ls = ev.shards[idx]
	}
	s.ec.mu.RUnlock()
	if ls == nil {
		return errors.E(errors.Op("chunk.readShard"), errors.NotExist, volPath(vid), fmt.Sprintf("no shard %d here", idx))
	}
	_, err := ls.s.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return errors.E(errors.Op("chunk.readShard"), errors.IO, volPath(vid), err)
	}
	return nil
}

// sendShard writes n cell bytes of local shard idx from off to w with
// the kernel's file-to-socket copy (sendfile): a degraded read elsewhere
// asks K servers for its needle's range, and a pread into a buffer and
// a write from it cost a copy each. The copy needs a file position of its
// own, so the shard is opened again by name, and used only if it is still
// the file loaded. handled is false if it could not be done that way (the
// caller reads and writes instead); nothing was written then.
func (s *Store) sendShard(w io.Writer, vid uint32, idx int, off, n int64) (handled bool, err error) {
	var ls *localShard
	s.ec.mu.RLock()
	if ev := s.ec.vols[vid]; ev != nil {
		ls = ev.shards[idx]
	}
	s.ec.mu.RUnlock()
	if ls == nil {
		return false, nil
	}
	at, err := ls.s.FileOffset(off, n)
	if err != nil {
		return false, nil
	}
	f, err := os.Open(ecShardPath(s.cfg.Dir, vid, idx))
	if err != nil {
		return false, nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, ls.fi) {
		return false, nil
	}
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		return false, nil
	}
	_, err = io.Copy(w, io.LimitReader(f, n))
	return true, err
}

// EncodeVolume encodes this server's copy of volume vid (which must be
// at generation gen) into the shards of code k+m with cells of cell
// bytes, sending shard i to to[i] (index first). The volume turns
// read-only here first, so that the copy encoded is the whole volume.
// The shards are durable on their servers when it returns; the caller
// (meta) records them and only then drops the replicas.
func (s *Store) EncodeVolume(ctx context.Context, vid uint32, gen uint64, k, m int, cell int64, to []string) (size int64, err error) {
	const op = errors.Op("chunk.EncodeVolume")
	v, err := s.volume(op, vid)
	if err != nil {
		return 0, err
	}
	if v.Gen() != gen {
		return 0, errors.Errorf(op, errors.Stale, "volume %d is at generation %d, not %d", vid, v.Gen(), gen)
	}
	if len(to) != k+m {
		return 0, errors.Errorf(op, errors.Invalid, "%d servers for a %d+%d code", len(to), k, m)
	}
	// Sealed, not just marked: the index taken below must hold every needle
	// the volume acknowledges, those still waiting for their fdatasync too.
	if err := v.Seal(); err != nil {
		return 0, errors.E(op, err)
	}
	if !s.startCompacting(vid) {
		return 0, errors.E(op, errors.Unavailable, volPath(vid), "volume is being compacted")
	}
	defer s.stopCompacting(vid)
	f, inst, release, err := v.Share()
	if err != nil {
		return 0, errors.E(op, err)
	}
	defer release()
	locInst, locs := v.Locations()
	if locInst != inst {
		return 0, errors.E(op, errors.Stale, volPath(vid), "volume file changed while encoding started")
	}
	if err := (ec.Layout{K: k, M: m, Cell: cell}).Validate(); err != nil {
		return 0, errors.E(op, err)
	}
	// What is encoded is the live records packed (packRecords): deleted
	// needles' bytes stay behind, and few records cross a cell.
	needles := make([]ec.Needle, len(locs))
	for i, l := range locs {
		needles[i] = ec.Needle{Key: l.Key, Data: l.Data, Size: l.Size}
	}
	segs, packed, size := packRecords(needles, cell)
	l := ec.Layout{K: k, M: m, Cell: cell, Size: size}
	src, err := ec.NewPacked(f, segs, size)
	if err != nil {
		return 0, errors.E(op, err)
	}
	index := ec.MarshalIndex(vid, packed)
	for _, addr := range to {
		if err := s.peer(addr).PutShardIndex(ctx, vid, index, to); err != nil {
			return 0, errors.E(op, errors.Path(addr), err)
		}
	}
	if err := s.encodeTo(ctx, src, vid, l, to, func(ctx context.Context, addr string, i int, body io.Reader) error {
		if addr == s.cfg.Addr {
			return s.PutShard(vid, i, body) // this server's own shard: no loopback
		}
		return s.peer(addr).PutShard(ctx, vid, i, body, l.FileSize())
	}); err != nil {
		return 0, errors.E(op, err)
	}
	s.log.Info("volume encoded", "volume", vid, "code", fmt.Sprintf("%d+%d", k, m), "bytes", l.Size, "needles", len(locs))
	return l.Size, nil
}

// RebuildShard makes shard idx of volume vid here from the other shards
// (servers[i] holds shard i; "" is lost), its index from the first
// server that has it. Durable when it returns.
func (s *Store) RebuildShard(ctx context.Context, vid uint32, idx int, l ec.Layout, servers []string) error {
	const op = errors.Op("chunk.RebuildShard")
	if err := l.Validate(); err != nil {
		return errors.E(op, err)
	}
	if len(servers) != l.K+l.M || idx < 0 || idx >= len(servers) {
		return errors.Errorf(op, errors.Invalid, "shard %d of %d servers for a %d+%d code", idx, len(servers), l.K, l.M)
	}
	if s.ecVolume(vid) == nil {
		var lastErr error = errors.E(op, errors.Unavailable, "no server sent the index")
		for i, addr := range servers {
			if addr == "" || i == idx {
				continue
			}
			b, err := s.peer(addr).ShardIndex(ctx, vid)
			if err == nil {
				err = s.PutShardIndex(vid, b, nil)
			}
			if err == nil {
				lastErr = nil
				break
			}
			lastErr = err
		}
		if lastErr != nil {
			return errors.E(op, lastErr)
		}
		if err := s.loadEC(vid); err != nil {
			return errors.E(op, err)
		}
	}
	shards := make([]io.ReaderAt, l.K+l.M)
	for i, addr := range servers {
		if addr != "" && i != idx {
			shards[i] = &remoteShard{ctx: ctx, r: s.rangeStreams(addr), vid: vid, idx: i}
		}
	}
	r, err := ec.NewReader(l, shards)
	if err != nil {
		return errors.E(op, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(r.RebuildShard(vid, idx, pw)) }()
	err = s.PutShard(vid, idx, pr)
	pr.CloseWithError(err)
	if err != nil {
		return errors.E(op, err)
	}
	s.log.Info("shard rebuilt", "volume", vid, "shard", idx)
	return nil
}

// scrubShards checks every local shard's cells against its footer (the
// scrub pass); it returns how many were found damaged.
func (s *Store) scrubShards() (damaged int) {
	s.ec.mu.RLock()
	type one struct {
		ev *ecVol
		i  int
	}
	var all []one
	for _, ev := range s.ec.vols {
		for i := range ev.shards {
			all = append(all, one{ev, i})
		}
	}
	s.ec.mu.RUnlock()
	for _, o := range all {
		if s.scrubShard(o.ev, o.i) {
			damaged++
		}
	}
	return damaged
}

// scrubShard checks local shard i of ev; a damaged shard is removed, so
// that its absence from the next heartbeat has meta rebuild it (reads
// rebuild around it meanwhile). It reports whether it was damaged.
func (s *Store) scrubShard(ev *ecVol, i int) bool {
	key := [2]uint32{ev.vid, uint32(i)}
	if _, busy := s.ec.scrubbing.LoadOrStore(key, true); busy {
		return false
	}
	defer s.ec.scrubbing.Delete(key)
	s.ec.mu.RLock()
	ls := ev.shards[i]
	s.ec.mu.RUnlock()
	if ls == nil {
		return false
	}
	bad, err := ls.s.Scrub()
	if err == nil && len(bad) == 0 {
		return false
	}
	s.corrupt.Inc()
	s.log.Error("shard damaged; removing it so that meta rebuilds it", "volume", ev.vid, "shard", i, "bad_cells", len(bad), "err", err)
	s.ec.mu.Lock()
	if ev.shards[i] == ls {
		delete(ev.shards, i)
	}
	s.ec.mu.Unlock()
	os.Remove(ecShardPath(s.cfg.Dir, ev.vid, i))
	// ls.f stays open for readers still holding it; the collector closes
	// it. The mapping goes when the last lender is done.
	ls.retireMap()
	return true
}

func (s *Store) startCompacting(vid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.compacting[vid] {
		return false
	}
	s.compacting[vid] = true
	return true
}

func (s *Store) stopCompacting(vid uint32) {
	s.mu.Lock()
	delete(s.compacting, vid)
	s.mu.Unlock()
}

// volumeIDs are the volume ids of the directory entries named {vid}{suffix}.
func volumeIDs(ents []os.DirEntry, suffix string) []uint32 {
	var out []uint32
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok {
			continue
		}
		if vid, err := strconv.ParseUint(name, 10, 32); err == nil {
			out = append(out, uint32(vid))
		}
	}
	return out
}
