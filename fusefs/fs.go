package fusefs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"cairn/client"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/vfs"
)

// Config configures a mount. Meta, Client and Mountpoint are required.
type Config struct {
	Meta   metapb.MetaClient // dial it with CountCalls so that server ops are counted
	Client *client.Client    // the data plane (its own metadata cache is not used)
	// Namespace is the namespace mounted at the mount point; "" mounts
	// every namespace Visible allows, one directory each.
	Namespace  string
	Visible    func(*metapb.Namespace) bool // nil: all
	Mountpoint string

	ReadOnly   bool
	AllowOther bool
	Debug      bool

	// BlockSize is the unit of the block cache and of readahead
	// (default 1 MiB); CacheSize bounds the block cache (default 512 MiB).
	BlockSize int64
	CacheSize int64
	// DiskCache, if set, is a directory for the block cache's second
	// tier: blocks evicted from memory are kept there, up to
	// DiskCacheSize bytes (default 10 GiB), and read back instead of
	// fetched. The mount uses DiskCache/cairn-blocks/<cluster id>, kept
	// across mounts (one mount process at a time; see diskcache.go).
	DiskCache     string
	DiskCacheSize int64
	// DiskCacheFS is the file system the disk tier's block files are
	// read and written through (nil: the operating system's); tests put
	// a failing disk here.
	DiskCacheFS vfs.FS
	// Readahead is how many blocks sequential reading fetches ahead
	// (default 8); Parallel bounds concurrent block fetches (default 8).
	Readahead int
	Parallel  int
	// DirtyMax is the write-back buffer of one file before it is flushed
	// without waiting for close (default 64 MiB).
	DirtyMax int64
	// Timeout is how long the kernel keeps entries and attributes while
	// the session is live (default 10 min). Invalidations make it safe.
	Timeout time.Duration
	// SyncClose makes close() and attribute changes commit before they
	// return, instead of behind (see writeback.go).
	SyncClose bool
	// WritebackMaxEntries and WritebackMaxBytes bound the work left
	// behind: the files and directories with commits queued, and the
	// written bytes those commits hold. Past either bound, close(),
	// create, mkdir and attribute changes commit synchronously until the
	// queue has room again, so that a recall (which meta waits for only
	// meta.RecallTimeout) has a bounded amount to commit, and memory stays
	// bounded. Defaults: 1,024 entries and 64 MiB (writeback.go: room).
	WritebackMaxEntries int
	WritebackMaxBytes   int64
	// MaxFiles bounds the files the kernel keeps looked up (and the
	// mount a node for each), open ones aside: past it the least
	// recently used are dropped from the kernel's cache (forget.go).
	// Default 10,000.
	MaxFiles int
	// MaxListing bounds the entries of a directory's listing the mount
	// keeps to answer lookups and readdir itself (default 10,000); a
	// larger directory is listed by meta each time.
	MaxListing int
	// NoAtime keeps atime as it is on reads (-o noatime); by default it
	// follows relatime, written behind (posix.go: accessed).
	NoAtime bool

	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Meta == nil || c.Client == nil || c.Mountpoint == "" {
		return errors.E(errors.Op("fusefs.Mount"), errors.Invalid, "Config.Meta, Config.Client and Config.Mountpoint are required")
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 1 << 20
	}
	if c.CacheSize <= 0 {
		c.CacheSize = 512 << 20
	}
	if c.DiskCacheSize <= 0 {
		c.DiskCacheSize = 10 << 30
	}
	if c.Readahead <= 0 {
		c.Readahead = 8
	}
	if c.Parallel <= 0 {
		c.Parallel = 8
	}
	if c.DirtyMax <= 0 {
		c.DirtyMax = 64 << 20
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.WritebackMaxEntries <= 0 {
		c.WritebackMaxEntries = 1024
	}
	if c.WritebackMaxBytes <= 0 {
		c.WritebackMaxBytes = 64 << 20
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = 10_000
	}
	if c.MaxListing <= 0 {
		c.MaxListing = 10_000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Mount is a mounted file system.
type Mount struct {
	cfg    Config
	meta   metapb.MetaClient
	cl     *client.Client
	server *fuse.Server
	log    *slog.Logger
	stats  *Stats
	blocks *blockCache
	sess   *session
	wb     *writeBehind
	root   *fs.Inode

	mu     sync.Mutex
	nsRoot map[string]*node // namespace -> its root directory node
	opened map[uint64]*node // files open here, by inode number (open.go)

	locks   heldLocks   // the file locks meta granted here (lock.go)
	flushes flushOwners // the lock owner of each flush in progress (lock.go)

	// live holds the file nodes the kernel knows, by inode number, so
	// that an event naming an inode (another mount's write to an open
	// file by inode) reaches the node whatever name this mount knows it
	// by (open.go).
	// It also bounds them (forget.go).
	liveMu sync.Mutex
	live   liveSet
	trim   chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New mounts cfg.Mountpoint and serves it in the background. A stale
// mount left there by a process that died is unmounted first.
func New(cfg Config) (*Mount, error) {
	const op = errors.Op("fusefs.Mount")
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ClearStale(cfg.Mountpoint)
	ctx, cancel := context.WithCancel(context.Background())
	m := &Mount{
		cfg: cfg, meta: cfg.Client.WithCaps(cfg.Meta), cl: cfg.Client, log: cfg.Logger.With("role", "mount"),
		stats: newStats(), nsRoot: map[string]*node{}, trim: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
	}
	m.blocks = newBlockCache(m, cfg.CacheSize)
	m.sess = newSession(m)
	m.wb = newWriteBehind(m)
	m.stats.gauges = m.wb.gauges
	var root fs.InodeEmbedder
	if cfg.Namespace != "" {
		ns, err := m.meta.GetNamespace(ctx, &metapb.NamespaceRequest{Name: cfg.Namespace})
		if err != nil {
			cancel()
			return nil, errors.E(op, err)
		}
		r, err := m.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: ns.Name})
		if err != nil {
			cancel()
			return nil, errors.E(op, err)
		}
		n := m.newNode(ns.Name, r.Inode)
		m.nsRoot[ns.Name] = n
		root = n
	} else {
		root = &nsList{m: m}
	}
	zero := time.Duration(0)
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:    cfg.AllowOther,
			FsName:        "cairn",
			Name:          "cairn",
			MaxWrite:      1 << 20,
			MaxReadAhead:  1 << 20,
			MaxBackground: 64,
			// Splicing a 1 MiB read and its header needs a pipe larger
			// than the system's 1 MiB maximum: go-fuse tried, failed and
			// logged on every read before falling back to a copy.
			DisableSplice: true,
			Debug:         cfg.Debug,
			Options:       []string{"default_permissions"},
			DisableXAttrs: false,
			// Dropping set-ID bits on chown, truncate and unprivileged
			// writes is ours (node.go: setIDDropped): otherwise the
			// kernel asks for the attributes before every chown and
			// for security.capability on writes, a tenth of an
			// untar's round trips.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2,
			// flock and fcntl locks are meta's, across mounts (lock.go).
			EnableLocks: true,
		},
		// Timeouts are set per reply (long while the session is live).
		EntryTimeout: nil, AttrTimeout: nil, NegativeTimeout: &zero,
		// Mode 0 is a mode (open(O_CREAT, 0), chmod 0), not "unset".
		NullPermissions: true,
		UID:             uint32(os.Getuid()), GID: uint32(os.Getgid()),
	}
	if cfg.ReadOnly {
		opts.MountOptions.Options = append(opts.MountOptions.Options, "ro")
	}
	if cfg.DiskCache != "" {
		d, err := m.openDiskCache(ctx)
		if err != nil {
			cancel()
			return nil, errors.E(op, errors.Path(cfg.DiskCache), err)
		}
		m.blocks.disk = d
	}
	srv, err := m.serve(root, opts)
	if err != nil {
		if m.blocks.disk != nil {
			m.blocks.disk.close()
		}
		cancel()
		return nil, errors.E(op, errors.IO, errors.Path(cfg.Mountpoint), err)
	}
	m.server = srv
	SetReadahead(cfg.Mountpoint, 1<<20)
	if ri, ok := root.(interface{ EmbeddedInode() *fs.Inode }); ok {
		m.root = ri.EmbeddedInode()
	}
	go m.trimmer(ctx)
	sessDone := make(chan struct{})
	go func() {
		m.sess.run(ctx)
		close(sessDone)
	}()
	// Serve from caches from the start: wait (briefly) for the session.
	for t := time.Now(); !m.sess.live() && time.Since(t) < 2*time.Second; {
		time.Sleep(5 * time.Millisecond)
	}
	go func() {
		// However the file system went away (Unmount, umount(8) or
		// fusermount -u from outside), commit what close() left behind
		// while meta can still recall this mount, then end the session.
		srv.Wait()
		m.wb.drain()
		m.cancel()
		<-sessDone
		if m.blocks.disk != nil {
			m.blocks.disk.close()
		}
		close(m.done)
	}()
	return m, nil
}

// ClearStale lazily unmounts every mount at dir whose server is gone
// ("transport endpoint is not connected"), so that a remount after a
// crash replaces it instead of stacking on it. statfs, not stat: the
// kernel answers stat of a dead FUSE mount's root from its attribute
// cache (the mount looks alive), while statfs always asks the server.
func ClearStale(dir string) {
	for range 8 { // mounts stacked by earlier attempts
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err != unix.ENOTCONN && err != unix.ECONNABORTED {
			return
		}
		if unix.Unmount(dir, unix.MNT_DETACH) != nil {
			return
		}
	}
}

// SetReadahead raises the kernel's readahead for the FUSE file system
// mounted at dir (the kernel offers FUSE 128 KiB at mount time; 1 MiB
// READs cost an eighth of the requests). Best effort: it needs root.
func SetReadahead(dir string, bytes int) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	_ = os.WriteFile(p, []byte(fmt.Sprint(bytes>>10)), 0o644)
}

// Wait blocks until the file system is unmounted, every change left
// behind is committed and the session with meta has ended.
func (m *Mount) Wait() { <-m.done }

// Unmount commits what close left behind and unmounts. The session
// ends once the kernel lets go of the file system (see New), so that a
// detached mount's last users still get coherent caches and recalls.
func (m *Mount) Unmount() error {
	var err error
	m.once.Do(func() {
		m.wb.drain()
		err = m.server.Unmount()
		if err != nil {
			// Busy: detach now, the kernel finishes when the last user goes.
			err = unix.Unmount(m.cfg.Mountpoint, unix.MNT_DETACH)
		}
	})
	return err
}

func (m *Mount) rootOps() fs.InodeEmbedder {
	if m.root == nil {
		return nil
	}
	return m.root.Operations()
}

// Sync returns once every change left behind (close, attributes, creates)
// is committed.
func (m *Mount) Sync() { m.wb.drain() }

// Live reports whether the session with meta is live (caches trusted).
func (m *Mount) Live() bool { return m.sess.live() }

// Stats returns the per-operation counters.
func (m *Mount) Stats() *Stats { return m.stats }

// timeout is how long the kernel may keep what a reply carries.
func (m *Mount) timeout() time.Duration {
	if m.sess.live() {
		return m.cfg.Timeout
	}
	return 0
}

func (m *Mount) readOnly() error {
	if m.cfg.ReadOnly {
		return syscall.EROFS
	}
	return nil
}

// ---- server-op accounting ----------------------------------------------

// Stats counts, per FUSE operation, calls and the server operations they
// cost (meta RPCs and data-plane requests), so that "a warm open costs no
// meta call" can be checked and shown (the .cairn-stats file at the root).
type Stats struct {
	mu  sync.Mutex
	ops map[string]*OpStats
	// gauges, if set, adds lines below the table, each starting with
	// "#" (the write-behind queue's size and peaks).
	gauges func() string
}

// OpStats is one FUSE operation's counters.
type OpStats struct {
	Calls, Meta, Data atomic.Int64
	Nanos             atomic.Int64 // time spent serving, summed
}

func newStats() *Stats { return &Stats{ops: map[string]*OpStats{}} }

// Op returns the counters of a FUSE operation ("lookup", "read", ...).
func (s *Stats) Op(name string) *OpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops[name]
	if o == nil {
		o = &OpStats{}
		s.ops[name] = o
	}
	return o
}

// Totals sums the counters of every operation.
func (s *Stats) Totals() (calls, meta, data int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.ops {
		calls += o.Calls.Load()
		meta += o.Meta.Load()
		data += o.Data.Load()
	}
	return
}

// String is the table the stats file shows.
func (s *Stats) String() string {
	s.mu.Lock()
	names := make([]string, 0, len(s.ops))
	for k := range s.ops {
		names = append(names, k)
	}
	s.mu.Unlock()
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %10s %10s %10s %10s %10s\n", "op", "calls", "meta", "data", "meta/call", "avg-us")
	for _, k := range names {
		o := s.Op(k)
		c, mt, d := o.Calls.Load(), o.Meta.Load(), o.Data.Load()
		per, avg := 0.0, 0.0
		if c > 0 {
			per = float64(mt) / float64(c)
			avg = float64(o.Nanos.Load()) / float64(c) / 1e3
		}
		fmt.Fprintf(&b, "%-12s %10d %10d %10d %10.3f %10.1f\n", k, c, mt, d, per, avg)
	}
	if s.gauges != nil {
		b.WriteString(s.gauges())
	}
	return b.String()
}

// CallTimeout bounds one attempt of a meta call, including the wait for an
// unreachable meta to come back; retry makes further attempts. A data
// call (one that reads or changes namespace data) may also wait in meta
// for other mounts to commit what they left behind, which meta bounds by
// meta.RecallTimeout: its attempt gets that much more, so that it is not
// cut (and retried, recalling afresh) while meta is still waiting.
const CallTimeout = 5 * time.Second

type opKey struct{}

// call is what a FUSE operation's context carries for the meta calls it
// makes: the counters to charge and the mount's session (meta does not
// wait for a mount's own acknowledgement of its own mutations).
type call struct {
	op      *OpStats
	name    string       // the FUSE operation
	log     *slog.Logger // the mount's (errno reports an EIO there)
	session string
	start   time.Time
	mkdirs  *mkdirGate // data calls wait for mkdirs answered before them
}

// begin marks ctx as serving FUSE operation name; meta calls made with the
// returned context are charged to it, and end(ctx) charges the time.
func (m *Mount) begin(ctx context.Context, name string) context.Context {
	o := m.stats.Op(name)
	o.Calls.Add(1)
	return context.WithValue(ctx, opKey{}, call{op: o, name: name, log: m.log, session: m.sess.id, start: time.Now(), mkdirs: &m.wb.mkdirs})
}

// end charges the time since begin to the operation.
func end(ctx context.Context) {
	if c, ok := ctx.Value(opKey{}).(call); ok && c.op != nil {
		c.op.Nanos.Add(int64(time.Since(c.start)))
	}
}

func opOf(ctx context.Context) *OpStats {
	c, _ := ctx.Value(opKey{}).(call)
	return c.op
}

// CountCalls is a gRPC dial option that charges each meta call to the FUSE
// operation in its context and names the mount's session to meta. Calls
// wait up to CallTimeout for meta to be reachable instead of failing at
// once, so a meta restart is ridden through (a call that never left
// cannot have applied, so this is safe for mutations too).
func CountCalls() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			d := CallTimeout
			if meta.DataMethod(method) {
				d += meta.RecallTimeout
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		opts = append(opts, grpc.WaitForReady(true))
		if c, ok := ctx.Value(opKey{}).(call); ok {
			if c.mkdirs != nil && meta.DataMethod(method) && ctx.Value(mkdirKey{}) == nil {
				c.mkdirs.wait()
			}
			if c.op != nil {
				c.op.Meta.Add(1)
			}
			if c.session != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, meta.SessionHeader, c.session)
			}
		}
		return inv(ctx, method, req, reply, cc, opts...)
	})
}

// retry runs f until it succeeds, fails for a reason other than an
// unreachable server, or about 30 s have passed: a meta or data server
// restart is ridden through rather than turned into EIO. Only reads and
// idempotent calls go through it.
func retry(ctx context.Context, f func() error) error {
	delay := 20 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || !errors.Is(errors.Unavailable, err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}
