package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cairn/capability"
	"cairn/chunk"
	"cairn/ec"
	"cairn/errors"
	"cairn/gateway"
)

// The erasure-coding benchmark (`cairn bench ec`): the figures of
// space, encoding, reads and rebuild, on data servers it starts itself in
// this process, each on a directory of its own under one parent and on a
// loopback listener served as `cairn server` serves it (gateway.Server),
// talking to each other over HTTP and the ranges streams as in a cluster.
// What it leaves out is meta (the benchmark tells the servers what meta
// would: which volume to encode where, which shard to rebuild) and the
// network: every server, and the reading client, shares this machine's
// CPUs and disk. Taking a running cluster instead would need a way to
// seal, encode and kill on cue there; the servers' own code is the same.

// ECConfig is what EC measures.
type ECConfig struct {
	Dir    string // parent of the servers' directories (removed after)
	Volume int64  // bytes of needles in the volume encoded
	Size   int64  // needle size of the reads (and of every needle)
	Reads  int    // reads of each kind, interleaved
	// Dead, if set, is the bytes of 4+2 shards a server holds when it
	// dies: volumes of Volume bytes are encoded onto six more servers
	// until one of them holds that much, it is stopped, and every shard
	// it held is rebuilt on a new server, one after the other as repair
	// does. Zero: the dead server's rebuild time is only extrapolated
	// from the one shard's.
	Dead int64
	// Progress, if set, is told of each step as it begins.
	Progress func(step string)
}

// ECResult is what EC measured. Ratios are the replicated read's time
// over the other's: 1 is as fast, 0.5 twice as slow.
type ECResult struct {
	StoredBytes int64 `json:"stored_bytes"` // needle bytes in the volume

	// Bytes on disk per byte stored: 3 replicas (each .dat and .idx),
	// and every shard file and needle index of each code.
	SpaceReplicated3 float64 `json:"space_replicated3"`
	Space4p2         float64 `json:"space_4p2"`
	Space8p4         float64 `json:"space_8p4"`
	// The same without the last row of cells' padding (up to K cells of
	// zeros and their parity, a share that fades as volumes grow: 4 MiB
	// cells against 8 GiB volumes): the codes' space at production size.
	Space4p2Full float64 `json:"space_4p2_unpadded"`
	Space8p4Full float64 `json:"space_8p4_unpadded"`

	// Encoding a sealed volume end to end (read, code, send, every
	// shard fsynced on its server), volume bytes per second; and the
	// codec alone over the same volume file, shards discarded.
	Encode4p2MBps      float64 `json:"encode_4p2_mb_per_sec"`
	Encode8p4MBps      float64 `json:"encode_8p4_mb_per_sec"`
	EncodeCodec4p2MBps float64 `json:"encode_codec_4p2_mb_per_sec"`
	EncodeCodec8p4MBps float64 `json:"encode_codec_8p4_mb_per_sec"`

	// Reads of one needle over HTTP (4+2), interleaved: from the
	// replicated volume, from the EC volume's server holding the needle's
	// shard (healthy), and with that shard's server down (degraded: the
	// range rebuilt from 4 others).
	ReadReplicated ReadStats `json:"read_replicated"`
	ReadHealthy    ReadStats `json:"read_healthy"`
	ReadDegraded   ReadStats `json:"read_degraded"`
	HealthyX       float64   `json:"healthy_x"`      // by mean
	DegradedX      float64   `json:"degraded_x"`     // by mean
	HealthyXP50    float64   `json:"healthy_x_p50"`  // by median
	DegradedXP50   float64   `json:"degraded_x_p50"` // by median

	// A lost 4+2 shard rebuilt on a new server from the other five.
	RebuildShardBytes int64         `json:"rebuild_shard_bytes"`
	Rebuild           time.Duration `json:"rebuild_ns"`
	RebuildMBps       float64       `json:"rebuild_mb_per_sec"`
	// Rebuild5GiB is the time that rate gives for the shards of a dead
	// server holding 5 GiB of them (repair rebuilds one at a time).
	Rebuild5GiB time.Duration `json:"rebuild_5gib_ns"`

	// With ECConfig.Dead: the dead server's shards rebuilt for real.
	DeadShards      int           `json:"dead_shards,omitempty"`
	DeadShardBytes  int64         `json:"dead_shard_bytes,omitempty"`
	DeadRebuild     time.Duration `json:"dead_rebuild_ns,omitempty"`
	DeadRebuildMBps float64       `json:"dead_rebuild_mb_per_sec,omitempty"`
}

// ReadStats are one kind of read's latencies.
type ReadStats struct {
	Reads int           `json:"reads"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
}

// ecServer is one data server of the benchmark.
type ecServer struct {
	dir   string
	store *chunk.Store
	srv   *http.Server
	addr  string
	r     *chunk.Remote
}

func (s *ecServer) stop() {
	if s.srv != nil {
		s.srv.Close()
		s.store.Close()
		s.srv = nil
	}
}

// ecKeys sign and verify the benchmark's capabilities, as meta's would.
var ecKeys = capability.NewKeyring(capability.NewKey(1))

func startECServer(dir string, maxVolume int64) (*ecServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	st, err := chunk.Open(chunk.Config{
		Dir: dir, Addr: addr, MaxVolumeSize: maxVolume,
		NoLocalReads: true, // the reads measured are over HTTP
		CompactRatio: -1, ScrubRate: -1,
		Caps:       ecKeys,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		lis.Close()
		return nil, err
	}
	srv := gateway.Server(st.Handler())
	go srv.Serve(lis)
	r := chunk.NewRemote(addr)
	r.SetCaps(capability.Signer{Keys: ecKeys})
	return &ecServer{dir: dir, store: st, srv: srv, addr: addr, r: r}, nil
}

// EC runs the erasure-coding benchmark (see above).
func EC(ctx context.Context, cfg ECConfig) (res ECResult, err error) {
	const op = errors.Op("bench.EC")
	progress := func(s string) {
		if cfg.Progress != nil {
			cfg.Progress(s)
		}
	}
	if cfg.Size < 1 || cfg.Reads < 1 || cfg.Volume < 8*cfg.Size {
		return res, errors.E(op, errors.Invalid, "need a needle size and reads of at least 1, and a volume of at least 8 needles")
	}
	parent, err := os.MkdirTemp(cfg.Dir, "cairn-bench-ec-")
	if err != nil {
		return res, errors.E(op, errors.IO, err)
	}
	defer os.RemoveAll(parent)
	maxVolume := cfg.Volume + 64<<20
	var servers []*ecServer
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for i := range 12 {
		s, err := startECServer(filepath.Join(parent, fmt.Sprintf("d%02d", i)), maxVolume)
		if err != nil {
			return res, errors.E(op, err)
		}
		servers = append(servers, s)
	}

	// Volume 1 on server 0, filled with distinct needles.
	const vid, gen = 1, 1
	progress(fmt.Sprintf("writing a %s volume of %s needles", FormatSize(cfg.Volume), FormatSize(cfg.Size)))
	if err := servers[0].store.CreateVolume(ctx, vid, gen); err != nil {
		return res, errors.E(op, err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, cfg.Size)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var keys []uint64
	for res.StoredBytes+cfg.Size <= cfg.Volume {
		data[len(keys)%len(data)]++ // needles differ
		k, err := servers[0].store.Put(ctx, vid, gen, data)
		if err != nil {
			return res, errors.E(op, err)
		}
		keys = append(keys, k)
		res.StoredBytes += cfg.Size
	}
	dat := filepath.Join(servers[0].dir, "1.dat")
	replica := fileSizes(servers[:1], "1.dat", "1.idx")
	res.SpaceReplicated3 = 3 * float64(replica) / float64(res.StoredBytes)
	datSize := fileSizes(servers[:1], "1.dat")

	var encoded int64 // the 4+2 layout's size
	// The codec alone, then end to end: 8+4 on all twelve servers, and
	// 4+2 on the first six (what the reads and the rebuild use).
	for _, c := range []struct {
		k, m            int
		codec, full     *float64
		space, unpadded *float64
	}{
		{8, 4, &res.EncodeCodec8p4MBps, &res.Encode8p4MBps, &res.Space8p4, &res.Space8p4Full},
		{4, 2, &res.EncodeCodec4p2MBps, &res.Encode4p2MBps, &res.Space4p2, &res.Space4p2Full},
	} {
		progress(fmt.Sprintf("encoding %d+%d", c.k, c.m))
		took, err := encodeCodec(dat, datSize, c.k, c.m)
		if err != nil {
			return res, errors.E(op, err)
		}
		*c.codec = mbps(datSize, took)
		to := servers[:c.k+c.m]
		start := time.Now()
		n, err := servers[0].r.EncodeVolume(ctx, vid, gen, c.k, c.m, ec.DefaultCell, addrs(to))
		if err != nil {
			return res, errors.E(op, err)
		}
		encoded = n
		*c.full = mbps(datSize, time.Since(start))
		onDisk := fileSizes(to, "1.ec[0-9]*", "1.ecx")
		*c.space = float64(onDisk) / float64(res.StoredBytes)
		cl := ec.Layout{K: c.k, M: c.m, Cell: ec.DefaultCell, Size: n}
		padding := (cl.ShardSize()*int64(c.k) - n) * int64(c.k+c.m) / int64(c.k)
		*c.unpadded = float64(onDisk-padding) / float64(res.StoredBytes)
		if c.k == 8 {
			// The 8+4 shards on servers 6-11 are done with: those
			// servers go, so that they cannot be mistaken for 4+2's.
			for _, s := range servers[6:] {
				s.stop()
			}
			servers = servers[:6]
		}
	}

	// Which data shard holds each needle (the index every shard server
	// keeps).
	b, err := os.ReadFile(filepath.Join(servers[1].dir, "1.ecx"))
	if err != nil {
		return res, errors.E(op, errors.IO, err)
	}
	_, idx, err := ec.ParseIndex(b)
	if err != nil {
		return res, errors.E(op, err)
	}
	l := ec.Layout{K: 4, M: 2, Cell: ec.DefaultCell, Size: encoded}
	// Needles of data shard 1 are read healthy from server 1,
	// those in shard 3 degraded from server 2 once server 3 is down; the
	// replicated read takes the first kind from server 0's replica, which
	// it keeps (read-only) after encoding it.
	var healthy, lost []uint64
	for _, n := range idx {
		switch l.Home(n) {
		case 1:
			healthy = append(healthy, n.Key)
		case 3:
			lost = append(lost, n.Key)
		}
	}
	if len(healthy) == 0 || len(lost) == 0 {
		return res, errors.E(op, errors.Invalid, "volume too small: no needle in data shard 1 or 3; raise --volume")
	}
	servers[3].stop()
	progress(fmt.Sprintf("reading %s needles: replicated, healthy 4+2, 4+2 with a shard's server down", FormatSize(cfg.Size)))
	paths := []struct {
		r    *chunk.Remote
		keys []uint64
		took []time.Duration
	}{{r: servers[0].r, keys: healthy}, {r: servers[1].r, keys: healthy}, {r: servers[2].r, keys: lost}}
	warm := max(cfg.Reads/10, 3)
	for i := range warm + cfg.Reads {
		for j := range paths {
			p := &paths[(i+j)%len(paths)] // each kind first in turn
			k := p.keys[rng.IntN(len(p.keys))]
			start := time.Now()
			n, err := p.r.ReadTo(ctx, vid, k, 0, cfg.Size, io.Discard)
			if err != nil {
				return res, errors.E(op, err)
			}
			if n != cfg.Size {
				return res, errors.Errorf(op, errors.IO, "read %d bytes of a %d-byte needle", n, cfg.Size)
			}
			if i >= warm {
				p.took = append(p.took, time.Since(start))
			}
		}
	}
	res.ReadReplicated = readStats(paths[0].took)
	res.ReadHealthy = readStats(paths[1].took)
	res.ReadDegraded = readStats(paths[2].took)
	res.HealthyX = ratio(res.ReadReplicated.Mean, res.ReadHealthy.Mean)
	res.DegradedX = ratio(res.ReadReplicated.Mean, res.ReadDegraded.Mean)
	res.HealthyXP50 = ratio(res.ReadReplicated.P50, res.ReadHealthy.P50)
	res.DegradedXP50 = ratio(res.ReadReplicated.P50, res.ReadDegraded.P50)

	// Shard 3, lost with its server, rebuilt on a new one.
	progress("rebuilding the lost shard on a new server")
	repl, err := startECServer(filepath.Join(parent, "replacement"), maxVolume)
	if err != nil {
		return res, errors.E(op, err)
	}
	servers = append(servers, repl)
	from := addrs(servers[:6])
	from[3] = ""
	start := time.Now()
	if err := repl.r.RebuildShard(ctx, vid, 3, l, from); err != nil {
		return res, errors.E(op, err)
	}
	res.Rebuild = time.Since(start)
	res.RebuildShardBytes = l.FileSize()
	res.RebuildMBps = mbps(res.RebuildShardBytes, res.Rebuild)
	res.Rebuild5GiB = time.Duration(float64(5<<30) / float64(res.RebuildShardBytes) * float64(res.Rebuild))
	if cfg.Dead > 0 {
		for _, s := range servers {
			s.stop() // done with: their files go now, the disk is needed
		}
		servers = nil
		ents, _ := os.ReadDir(parent)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(parent, e.Name()))
		}
		if err := rebuildDead(ctx, cfg, parent, maxVolume, &res, progress); err != nil {
			return res, errors.E(op, err)
		}
	}
	return res, nil
}

// rebuildDead measures ECConfig.Dead: six servers take the 4+2 shards of
// volumes of cfg.Volume bytes (1 MiB needles, written by 8 writers; each
// volume on a primary of its own, removed once encoded, so that only the
// shards take disk) until server 3 holds cfg.Dead bytes of them; server 3
// is stopped and a new server rebuilds each of its shards from the other
// five, one after the other.
func rebuildDead(ctx context.Context, cfg ECConfig, parent string, maxVolume int64, res *ECResult, progress func(string)) error {
	const k, m = 4, 2
	var group []*ecServer
	defer func() {
		for _, s := range group {
			s.stop()
		}
	}()
	for i := range k + m + 1 { // the last is the replacement
		s, err := startECServer(filepath.Join(parent, fmt.Sprintf("dead-d%02d", i)), maxVolume)
		if err != nil {
			return err
		}
		group = append(group, s)
	}
	to, repl := group[:k+m], group[k+m]
	type encoded struct {
		vid  uint32
		l    ec.Layout
		file int64
	}
	var vols []encoded
	var held int64
	for vid := uint32(100); held < cfg.Dead; vid++ {
		progress(fmt.Sprintf("dead server: encoding volume %d (%s of %s of shards on it)", vid, FormatSize(held), FormatSize(cfg.Dead)))
		src, err := startECServer(filepath.Join(parent, "dead-primary"), maxVolume)
		if err != nil {
			return err
		}
		err = fillVolume(ctx, src.store, vid, cfg.Volume)
		var size int64
		if err == nil {
			size, err = src.r.EncodeVolume(ctx, vid, 1, k, m, ec.DefaultCell, addrs(to))
		}
		src.stop()
		os.RemoveAll(src.dir)
		if err != nil {
			return err
		}
		l := ec.Layout{K: k, M: m, Cell: ec.DefaultCell, Size: size}
		vols = append(vols, encoded{vid, l, l.FileSize()})
		held += l.FileSize()
	}
	to[3].stop()
	from := addrs(to)
	from[3] = ""
	progress(fmt.Sprintf("dead server: rebuilding its %d shards (%s) on a new server", len(vols), FormatSize(held)))
	start := time.Now()
	for _, v := range vols {
		if err := repl.r.RebuildShard(ctx, v.vid, 3, v.l, from); err != nil {
			return err
		}
	}
	res.DeadRebuild = time.Since(start)
	res.DeadShards, res.DeadShardBytes = len(vols), held
	res.DeadRebuildMBps = mbps(held, res.DeadRebuild)
	return nil
}

// fillVolume creates volume vid on s and writes 1 MiB needles of random
// bytes into it, 8 at a time, until it holds n bytes of them.
func fillVolume(ctx context.Context, s *chunk.Store, vid uint32, n int64) error {
	const needle, writers = 1 << 20, 8
	if err := s.CreateVolume(ctx, vid, 1); err != nil {
		return err
	}
	count := max(1, n/needle)
	var next atomic.Int64
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(vid), uint64(w)))
			data := make([]byte, needle)
			for next.Add(1) <= count && errs[w] == nil {
				for i := 0; i < len(data); i += 8 {
					binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
				}
				_, errs[w] = s.Put(ctx, vid, 1, data)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// encodeCodec times ec.Encode of the file at path (size bytes) with the
// shards thrown away: the code's own rate, the disk and network aside.
func encodeCodec(path string, size int64, k, m int) (time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ws := make([]io.Writer, k+m)
	for i := range ws {
		ws[i] = io.Discard
	}
	start := time.Now()
	err = ec.Encode(f, 1, ec.Layout{K: k, M: m, Cell: ec.DefaultCell, Size: size}, ws)
	return time.Since(start), err
}

func addrs(ss []*ecServer) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.addr)
	}
	return out
}

// fileSizes is the bytes of the files matching the patterns in the
// servers' directories.
func fileSizes(ss []*ecServer, patterns ...string) int64 {
	var n int64
	for _, s := range ss {
		for _, p := range patterns {
			names, _ := filepath.Glob(filepath.Join(s.dir, p))
			for _, name := range names {
				if fi, err := os.Stat(name); err == nil {
					n += fi.Size()
				}
			}
		}
	}
	return n
}

func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds() / 1e6
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func readStats(ds []time.Duration) ReadStats {
	if len(ds) == 0 {
		return ReadStats{}
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return ReadStats{Reads: len(s), Mean: sum / time.Duration(len(s)), P50: s[len(s)/2], P99: s[len(s)*99/100]}
}
