package chunk

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cairn/capability"
	"cairn/ec"
	"cairn/errors"
	"cairn/proto/metapb"
	"cairn/volume"
)

// Compaction of an erasure-coded volume. Shards are immutable, so a
// deleted needle's bytes stay in them until the volume is encoded again:
// one shard server (CompactEC, asked by meta) reads the live needles'
// records through a Reader of the current shards, packs them end to end
// (ec.Packed), and encodes that into K+M new shard files and a new index
// sent to the same K+M servers as a staged set of generation gen
//
//	{vid}.ecx.g{gen}     the new needle index
//	{vid}.ecNN.g{gen}    new shard NN
//
// which nothing reads. Meta records the volume at gen only once every
// staged file is durable, then has each server switch (SwitchEC, also
// done at the heartbeat whose answer names the volume at gen): the staged
// shards are renamed over the current ones, the staged index last, so
// that a staged index left means a switch not finished. A compaction that
// fails, or a meta that crashes before the record, leaves the current
// set in charge; the next attempt (same gen) overwrites the staged files,
// and the heartbeat deletes those of an attempt that is over without a
// switch here (ecDropStaged).
//
// Deletions (.ecd) are kept across the switch: keys already deleted are
// not in the new index, and a delete that reached a server between the
// record and its switch still applies after it.

func ecStagedIndexPath(dir string, vid uint32, gen uint64) string {
	return ecIndexPath(dir, vid) + ".g" + strconv.FormatUint(gen, 10)
}

func ecStagedShardPath(dir string, vid uint32, i int, gen uint64) string {
	return ecShardPath(dir, vid, i) + ".g" + strconv.FormatUint(gen, 10)
}

// CompactEC encodes the live needles of erasure-coded volume vid again,
// into a staged set of generation gen on the servers to (shard i to
// to[i]; the same code and cell size). It returns the size of the new
// encoded file. Meta stops deletes of the volume while it runs, so the
// live set it packs is the volume's.
func (s *Store) CompactEC(ctx context.Context, vid uint32, gen uint64, to []string) (int64, error) {
	const op = errors.Op("chunk.CompactEC")
	ev := s.ecVolume(vid)
	if ev == nil {
		return 0, errors.E(op, errors.NotExist, volPath(vid), "no shards of the volume here")
	}
	if !s.startCompacting(vid) {
		return 0, errors.E(op, errors.Unavailable, volPath(vid), "volume is being compacted")
	}
	defer s.stopCompacting(vid)
	s.ec.mu.RLock()
	old := ev.layout
	live := make([]ec.Needle, 0, len(ev.idx))
	for _, n := range ev.idx {
		if !ev.deleted[n.Key] {
			live = append(live, n)
		}
	}
	s.ec.mu.RUnlock()
	if len(to) != old.K+old.M {
		return 0, errors.Errorf(op, errors.Invalid, "%d servers for a %d+%d code", len(to), old.K, old.M)
	}
	segs, index, size := packRecords(live, old.Cell)
	l := ec.Layout{K: old.K, M: old.M, Cell: old.Cell, Size: size}
	r, err := s.ecReader(ctx, ev, true)
	if err != nil {
		return 0, errors.E(op, err)
	}
	src, err := ec.NewPacked(r, segs, size)
	if err != nil {
		return 0, errors.E(op, err)
	}
	idx := ec.MarshalIndex(vid, index)
	for _, addr := range to {
		if err := s.ecPeer(addr).PutStagedIndex(ctx, vid, gen, idx); err != nil {
			return 0, errors.E(op, errors.Path(addr), err)
		}
	}
	if err := s.encodeTo(ctx, src, vid, l, to, func(ctx context.Context, addr string, i int, body io.Reader) error {
		if addr == s.cfg.Addr {
			return s.PutStagedShard(vid, gen, i, body) // this server's own shard: no loopback
		}
		return s.ecPeer(addr).PutStagedShard(ctx, vid, gen, i, body, l.FileSize())
	}); err != nil {
		return 0, errors.E(op, err)
	}
	s.log.Info("erasure-coded volume compacted (staged)", "volume", vid, "generation", gen,
		"bytes_before", old.Size, "bytes_after", l.Size, "needles", len(index))
	return l.Size, nil
}

// alignSlack bounds the padding packRecords spends to keep a record
// within one cell: at most cell/alignSlack bytes (3% of the space).
const alignSlack = 32

// packRecords lays out what an encode writes of a volume file: its
// superblock, then the records of the needles live (data at n.Data, in
// the file read), in file order, end to end, except that a record which
// would cross a cell boundary starts at the next cell instead when the
// gap left is at most cell/alignSlack. A needle in one cell is read from
// one shard, in one request (or one rebuild); one that crosses needs two.
// Records that stay neighbours are one segment (one read). It returns the
// segments (ec.Packed), the index of the packed file (by key) and its
// size.
func packRecords(live []ec.Needle, cell int64) (segs []ec.Segment, index []ec.Needle, size int64) {
	live = slices.Clone(live)
	slices.SortFunc(live, func(a, b ec.Needle) int { return cmp.Compare(a.Data, b.Data) })
	segs = []ec.Segment{{At: 0, Src: 0, N: volume.SuperSize}}
	pos := int64(volume.SuperSize)
	index = make([]ec.Needle, 0, len(live))
	for _, n := range live {
		start, end := volume.RecordSpan(n.Data, n.Size)
		if in := pos % cell; end-start <= cell && in+end-start > cell && cell-in <= cell/alignSlack {
			pos += cell - in // zeros: no segment covers them
		}
		if last := &segs[len(segs)-1]; last.Src+last.N == start && last.At+last.N == pos {
			last.N += end - start
		} else {
			segs = append(segs, ec.Segment{At: pos, Src: start, N: end - start})
		}
		index = append(index, ec.Needle{Key: n.Key, Data: pos + (n.Data - start), Size: n.Size})
		pos += end - start
	}
	slices.SortFunc(index, func(a, b ec.Needle) int { return cmp.Compare(a.Key, b.Key) })
	return segs, index, pos
}

// encodeTo encodes src with layout l, streaming shard i to to[i] with put,
// all at once (ec.Encode writes every shard from a goroutine of its own).
func (s *Store) encodeTo(ctx context.Context, src io.ReaderAt, vid uint32, l ec.Layout, to []string,
	put func(ctx context.Context, addr string, i int, body io.Reader) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	writers := make([]io.Writer, len(to))
	pipes := make([]*io.PipeWriter, len(to))
	errs := make([]error, len(to))
	var wg sync.WaitGroup
	for i, addr := range to {
		pr, pw := io.Pipe()
		writers[i], pipes[i] = pw, pw
		wg.Go(func() {
			errs[i] = put(ctx, addr, i, pr)
			pr.CloseWithError(errs[i]) // unblocks the encoder if the upload failed
		})
	}
	encErr := ec.Encode(src, vid, l, writers)
	for _, pw := range pipes {
		pw.CloseWithError(encErr)
	}
	wg.Wait()
	if encErr != nil {
		return encErr
	}
	for i, err := range errs {
		if err != nil {
			return errors.E(errors.Path(to[i]), err)
		}
	}
	return nil
}

// PutStagedIndex stores the index of volume vid's staged generation gen.
func (s *Store) PutStagedIndex(vid uint32, gen uint64, b []byte) error {
	const op = errors.Op("chunk.PutStagedIndex")
	got, _, err := ec.ParseIndex(b)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	if got != vid {
		return errors.Errorf(op, errors.Invalid, "index of volume %d sent for %d", got, vid)
	}
	name := filepath.Base(ecStagedIndexPath(s.cfg.Dir, vid, gen))
	if _, err := writeFileSynced(s.cfg.Dir, name, strings.NewReader(string(b)), nil); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// PutStagedShard stores shard idx of volume vid's staged generation gen,
// checked and durable; it is not read until the switch.
func (s *Store) PutStagedShard(vid uint32, gen uint64, idx int, body io.Reader) error {
	return s.storeShard("chunk.PutStagedShard", ecStagedIndexPath(s.cfg.Dir, vid, gen), ecStagedShardPath(s.cfg.Dir, vid, idx, gen), vid, idx, body)
}

// SwitchEC makes volume vid's staged generation gen current here, if this
// server has it staged (else it did already, or never had it: nothing to
// do). Safe to repeat and to resume after a crash in the middle.
func (s *Store) SwitchEC(vid uint32, gen uint64) error {
	const op = errors.Op("chunk.SwitchEC")
	stagedIdx := ecStagedIndexPath(s.cfg.Dir, vid, gen)
	if _, err := os.Stat(stagedIdx); err != nil {
		return nil
	}
	for i := range ec.MaxShards {
		p := ecStagedShardPath(s.cfg.Dir, vid, i, gen)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := os.Rename(p, ecShardPath(s.cfg.Dir, vid, i)); err != nil {
			return errors.E(op, errors.IO, volPath(vid), err)
		}
	}
	if err := os.Rename(stagedIdx, ecIndexPath(s.cfg.Dir, vid)); err != nil {
		return errors.E(op, errors.IO, volPath(vid), err)
	}
	if d, err := os.Open(s.cfg.Dir); err == nil {
		d.Sync()
		d.Close()
	}
	if err := s.loadEC(vid); err != nil {
		return errors.E(op, err)
	}
	s.log.Info("erasure-coded volume switched to its compacted shards", "volume", vid, "generation", gen)
	return nil
}

// parseStagedName parses the name of a staged file of a compaction,
// {vid}.ecx.g{gen} or {vid}.ec{NN}.g{gen}.
func parseStagedName(name string) (vid uint32, gen uint64, ok bool) {
	base, g, found := strings.Cut(name, ".g")
	if !found {
		return 0, 0, false
	}
	v, kind, found := strings.Cut(base, ".ec")
	if !found || kind != "x" && (len(kind) != 2 || kind[0] < '0' || kind[0] > '9' || kind[1] < '0' || kind[1] > '9') {
		return 0, 0, false
	}
	id, err1 := strconv.ParseUint(v, 10, 32)
	gen, err2 := strconv.ParseUint(g, 10, 64)
	if err1 != nil || err2 != nil || strconv.FormatUint(id, 10) != v || strconv.FormatUint(gen, 10) != g {
		return 0, 0, false
	}
	return uint32(id), gen, true
}

// ecDropStaged deletes the staged files of compactions that are over
// without a switch here (the heartbeat's clean-up; known is every
// encoded volume meta places a shard of on this server): a volume meta
// does not place here any more (the attempt's servers changed, and it
// started over elsewhere), or one meta records at a later generation
// than the staged one. A staged set at the volume's next generation or
// later may be an attempt in progress, and is left: the next attempt
// overwrites it, or a switch takes it.
func (s *Store) ecDropStaged(known map[uint32]*metapb.Volume) {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		vid, gen, ok := parseStagedName(e.Name())
		if !ok {
			continue
		}
		if v := known[vid]; v != nil && gen >= v.Generation {
			continue
		}
		if err := os.Remove(filepath.Join(s.cfg.Dir, e.Name())); err == nil {
			s.log.Info("staged file of a compaction that is over deleted", "volume", vid, "generation", gen, "file", e.Name())
		}
	}
}

// ecSwitchStaged switches the volumes meta records at a generation this
// server has staged (the heartbeat's part of a compaction).
func (s *Store) ecSwitchStaged(vid uint32, gen uint64) {
	if err := s.SwitchEC(vid, gen); err != nil {
		s.log.Error("could not switch to a compacted erasure-coded volume", "volume", vid, "generation", gen, "err", err)
	}
}

// Routes (admin capability, as the other ec routes):
//
//	POST /ec/{vid}/compact                   CompactEC (JSON ecCompactRequest)
//	PUT  /ec/{vid}/staged/{gen}/index        PutStagedIndex
//	PUT  /ec/{vid}/staged/{gen}/shards/{i}   PutStagedShard
//	POST /ec/{vid}/switch/{gen}              SwitchEC
func (s *Store) ecCompactRoutes(mux *http.ServeMux) {
	admin := need{capability.Admin, true, false}
	mux.HandleFunc("POST /ec/{vid}/compact", s.guard(admin, s.handleCompactEC))
	mux.HandleFunc("PUT /ec/{vid}/staged/{gen}/index", s.guard(admin, s.handlePutStagedIndex))
	mux.HandleFunc("PUT /ec/{vid}/staged/{gen}/shards/{i}", s.guard(admin, s.handlePutStagedShard))
	mux.HandleFunc("POST /ec/{vid}/switch/{gen}", s.guard(admin, s.handleSwitchEC))
}

type ecCompactRequest struct {
	Gen uint64   `json:"gen"`
	To  []string `json:"to"`
}

func parseGenPath(r *http.Request) (uint64, error) {
	g, err := strconv.ParseUint(r.PathValue("gen"), 10, 64)
	if err != nil {
		return 0, errors.Errorf(errors.Op("chunk.http"), errors.Invalid, "bad generation %q", r.PathValue("gen"))
	}
	return g, nil
}

func (s *Store) handleCompactEC(w http.ResponseWriter, r *http.Request) {
	var req ecCompactRequest
	vid, _, err := ecRequest(r, false, &req)
	var size int64
	if err == nil {
		ka := startKeepAlive(w)
		size, err = s.CompactEC(r.Context(), vid, req.Gen, req.To)
		ka.stop()
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, map[string]int64{"size": size})
}

func (s *Store) handlePutStagedIndex(w http.ResponseWriter, r *http.Request) {
	vid, _, err := ecRequest(r, false, nil)
	var gen uint64
	if err == nil {
		gen, err = parseGenPath(r)
	}
	if err == nil {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(r.Body, 1<<30)); err == nil {
			err = s.PutStagedIndex(vid, gen, b)
		}
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (s *Store) handlePutStagedShard(w http.ResponseWriter, r *http.Request) {
	vid, i, err := ecRequest(r, true, nil)
	var gen uint64
	if err == nil {
		gen, err = parseGenPath(r)
	}
	if err == nil {
		err = s.PutStagedShard(vid, gen, i, r.Body)
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (s *Store) handleSwitchEC(w http.ResponseWriter, r *http.Request) {
	vid, _, err := ecRequest(r, false, nil)
	var gen uint64
	if err == nil {
		gen, err = parseGenPath(r)
	}
	if err == nil {
		err = s.SwitchEC(vid, gen)
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func stagedURL(r *Remote, vid uint32, gen uint64, rest string) string {
	return r.ecURL(vid, "/staged/"+strconv.FormatUint(gen, 10)+rest)
}

// CompactEC asks the server to compact erasure-coded volume vid into a
// staged generation gen on to; it returns the new encoded size.
func (r *Remote) CompactEC(ctx context.Context, vid uint32, gen uint64, to []string) (int64, error) {
	return r.postForSize(ctx, "chunk.Remote.CompactEC", vid, "/compact", ecCompactRequest{Gen: gen, To: to})
}

// PutStagedIndex sends the index of a staged generation.
func (r *Remote) PutStagedIndex(ctx context.Context, vid uint32, gen uint64, b []byte) error {
	resp, err := r.do(ctx, "chunk.Remote.PutStagedIndex", http.MethodPut, stagedURL(r, vid, gen, "/index"), r.token(ctx, capability.Admin, vid, 0), b, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// PutStagedShard streams a staged shard file of size bytes.
func (r *Remote) PutStagedShard(ctx context.Context, vid uint32, gen uint64, i int, body io.Reader, size int64) error {
	return r.putStream(ctx, "chunk.Remote.PutStagedShard", stagedURL(r, vid, gen, "/shards/"+strconv.Itoa(i)), vid, body, size)
}

// SwitchEC asks the server to make a staged generation current.
func (r *Remote) SwitchEC(ctx context.Context, vid uint32, gen uint64) error {
	resp, err := r.do(ctx, "chunk.Remote.SwitchEC", http.MethodPost, r.ecURL(vid, fmt.Sprintf("/switch/%d", gen)), r.token(ctx, capability.Admin, vid, 0), nil, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}
