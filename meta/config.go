package meta

import (
	"context"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"cairn"
	"cairn/capability"
	"cairn/ec"
	"cairn/errors"
	"cairn/pki"
)

// Config configures a Service. The zero value of each field except Dir is
// replaced by its default in Open.
type Config struct {
	// Dir holds the Pebble store and root.credentials. Required.
	Dir string

	// DefaultReplication is the replicas per volume of a namespace created
	// without one. Default 1.
	DefaultReplication uint32

	// MaxVolumeSize is the size at which a volume is full and turns
	// read-only; data servers learn it from the heartbeat. Default 8 GiB.
	MaxVolumeSize uint64

	// DeadAfter is how long a data server may stay silent before placement
	// stops choosing it. Default 10s.
	DeadAfter time.Duration

	// RootUser and RootPassword are the root access key and secret (the
	// caller fills them from CAIRN_ROOT_USER and CAIRN_ROOT_PASSWORD). Given,
	// they replace the stored root; both empty with no stored root, Open
	// generates a pair (see GeneratedRoot). One without the other is invalid.
	RootUser     string
	RootPassword string

	// Chunks returns the data plane of the server at addr. Meta uses it to
	// create volumes and to delete garbage needles. Nil: placement cannot
	// create volumes and garbage stays queued.
	Chunks func(addr string) cairn.Chunks

	// CA is the cluster CA (pki.LoadOrCreateCA in Dir), with its key: Join
	// signs new servers' certificates with it. Nil: no one can join.
	CA *pki.CA
	// CapTTL is how long a data-plane capability meta signs is good
	// (package capability): hours, so that caches and mounts rarely renew.
	// Default 10h.
	CapTTL time.Duration
	// CapRotate is how often the capability signing key changes; data
	// servers accept the previous key too, so it must exceed CapTTL.
	// Default 24h.
	CapRotate time.Duration
	// Revoked is the certificate revocation list (pki.Revocations), kept
	// up to date by meta from its store. The embedder guards meta's TLS
	// listener with it (Revoked.Guard) so a revoked certificate fails the
	// handshake. Nil: meta makes its own (calls are still checked).
	Revoked *pki.Revocations
	// CapRenewFor decides whether the caller may have a capability of
	// namespace ns for ops renewed; nil: anyone holding one.
	CapRenewFor func(ctx context.Context, ns string, ops capability.Op) bool

	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// Registerer receives the metrics. Nil: the Prometheus default registry.
	Registerer prometheus.Registerer

	// GCInterval is how often the garbage queue is swept even without new
	// garbage. Default 30s.
	GCInterval time.Duration

	// RepairRate is the bytes per second a re-replication, drain or
	// rebalance copy may move. Default 64 MiB/s; negative: unthrottled.
	RepairRate int64

	// RebalanceOnJoin moves volumes to a server that joins a running
	// cluster, so that usage evens out. `cairn admin rebalance` does it on
	// demand either way.
	RebalanceOnJoin bool

	// ReadCacheEntries bounds the in-memory cache of store reads behind
	// Resolve (namespaces, dirents, inodes, extent lists). Default 1,000,000.
	ReadCacheEntries int

	// ReadCacheBytes bounds the same cache in bytes (keys, values and a
	// fixed overhead per entry), so that large extent lists cannot grow it
	// past what the operator planned for. Default 64 MiB.
	ReadCacheBytes int64

	// BlockCacheSize is the bytes of Pebble's block cache. A warm cache keeps
	// the point reads of a mutation (does the name exist, the parent's
	// inode) off the disk and out of the decompressor. Default 256 MiB.
	BlockCacheSize int64

	// MemTableSize is the largest of Pebble's memtables, the write buffer
	// in front of L0 (a full one is flushed while the next fills, and one
	// more is kept for reuse). Pebble starts at 256 KiB and doubles at each
	// flush, so under writes meta's memory rises for a while until they
	// reach this size. Their memory is reserved from the block cache, so
	// Pebble holds about the larger of BlockCacheSize and its memtables.
	// Default 64 MiB.
	MemTableSize int64

	// TrustPlaintext treats a caller on a connection without TLS as a
	// member of the cluster (role meta: every call allowed), as on the
	// trusted network Cairn assumed before mutual TLS. Off, such a caller
	// is anonymous unless an in-process embedder names it (Local). Calls
	// over TLS are authorised by the peer's certificate or the user's
	// credentials either way. Only meta's own tests of the API over
	// plaintext set it: no command does, and meta's listener speaks TLS.
	TrustPlaintext bool

	// StoreReserve is the bytes meta keeps in reserve on its store's disk
	// (DIR/store.reserve, storespace.go): a full disk then turns changes
	// away with NoSpace and recovers by itself when space returns, instead
	// of stopping meta at its next log write. 0: no reserve (cairn meta and
	// cairn server keep DefaultStoreReserve; meta's own tests leave it off).
	StoreReserve int64

	space *storeSpace // made by setDefaults; Pebble's hook and serve share it
	// wrapStoreFS, when set (tests), wraps the file system under Pebble.
	wrapStoreFS func(vfs.FS) vfs.FS

	// Group, when set, makes this meta one member of a Raft group
	// (raft.go). Nil: meta alone, every command applied and synced
	// directly, as `cairn server` runs it.
	Group *GroupConfig

	// Classes are the storage classes namespaces may take besides
	// "replicated" (meta/classes.go); "ec-K+M" names work unconfigured.
	Classes []Class
	// ECCell is the cell size sealed volumes are encoded with (package
	// ec). Default ec.DefaultCell (4 MiB).
	ECCell int64
	// ECRate is the bytes per second an encoding or shard rebuild may
	// read. Default 256 MiB/s; negative: unthrottled.
	ECRate int64

	// LifecycleClock is the time S3 lifecycle rules compare ages with
	// (meta/lifecycle.go). Nil: time.Now. Tests move it ahead to expire
	// objects without waiting days.
	LifecycleClock func() time.Time
	// LifecycleInterval is how often (by LifecycleClock) the leader runs
	// the lifecycle rules. Default 1h.
	LifecycleInterval time.Duration
	// LifecycleRate bounds the deletions and aborts lifecycle makes per
	// second. Default 100.
	LifecycleRate int
	// TierInterval is how often the tiering mover scans the tree for
	// files its policies move (meta/tier.go); reads are recorded at this
	// granularity too. Default 1 minute.
	TierInterval time.Duration
}

const (
	defaultMaxVolumeSize = 8 << 30
	defaultDeadAfter     = 10 * time.Second
	defaultGCInterval    = 30 * time.Second
)

func (c *Config) setDefaults() {
	if c.space == nil {
		log := c.Logger
		if log == nil {
			log = slog.Default()
		}
		c.space = newStoreSpace(c.Dir, c.StoreReserve, log.With("role", "meta"))
	}
	if c.DefaultReplication == 0 {
		c.DefaultReplication = 1
	}
	if c.MaxVolumeSize == 0 {
		c.MaxVolumeSize = defaultMaxVolumeSize
	}
	if c.DeadAfter == 0 {
		c.DeadAfter = defaultDeadAfter
	}
	if c.GCInterval == 0 {
		c.GCInterval = defaultGCInterval
	}
	if c.RepairRate == 0 {
		c.RepairRate = 64 << 20
	}
	if c.ReadCacheEntries <= 0 {
		c.ReadCacheEntries = 1_000_000
	}
	if c.ReadCacheBytes <= 0 {
		c.ReadCacheBytes = 64 << 20
	}
	if c.BlockCacheSize <= 0 {
		c.BlockCacheSize = 256 << 20
	}
	if c.MemTableSize <= 0 {
		c.MemTableSize = 64 << 20
	}
	if c.Revoked == nil {
		c.Revoked = &pki.Revocations{}
	}
	if c.CapTTL == 0 {
		c.CapTTL = 10 * time.Hour
	}
	if c.CapRotate == 0 {
		c.CapRotate = 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ECCell == 0 {
		c.ECCell = ec.DefaultCell
	}
	if c.ECRate == 0 {
		c.ECRate = 256 << 20
	}
	if c.LifecycleClock == nil {
		c.LifecycleClock = time.Now
	}
	if c.LifecycleInterval <= 0 {
		c.LifecycleInterval = time.Hour
	}
	if c.LifecycleRate <= 0 {
		c.LifecycleRate = 100
	}
	if c.TierInterval == 0 {
		c.TierInterval = time.Minute
	}
}

// Validate reports a configuration Open would refuse.
func (c *Config) Validate() error {
	const op = errors.Op("meta.Config")
	switch {
	case c.Dir == "":
		return errors.E(op, errors.Invalid, "Dir is required")
	case (c.RootUser == "") != (c.RootPassword == ""):
		return errors.E(op, errors.Invalid, "RootUser and RootPassword must be given together")
	case c.RootUser != "" && len(c.RootPassword) < 8:
		return errors.E(op, errors.Invalid, "RootPassword must be at least 8 characters")
	case c.DefaultReplication > 16:
		return errors.E(op, errors.Invalid, "DefaultReplication over 16")
	case c.DeadAfter < 0 || c.GCInterval < 0 || c.CapTTL < 0 || c.CapRotate < 0:
		return errors.E(op, errors.Invalid, "negative duration")
	case c.CapTTL != 0 && c.CapRotate != 0 && c.CapRotate <= c.CapTTL,
		c.CapTTL > 24*time.Hour && c.CapRotate == 0:
		return errors.E(op, errors.Invalid, "CapRotate must exceed CapTTL (a capability must outlive no more than one rotation)")
	}
	return validateClasses(c.Classes)
}
