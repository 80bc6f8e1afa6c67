package chunk

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
	"cairn/vfs"
	"cairn/volume"
)

// Config configures a data server. Open fills zero fields with defaults.
type Config struct {
	// Dir holds the volumes ({id}.dat, {id}.idx) and server.id.
	Dir string
	// Addr is the data-plane address (host:port) advertised to meta.
	Addr string
	// MaxVolumeSize is the size past which a volume takes no new needles
	// (errors.ReadOnly). Default 8 GiB.
	MaxVolumeSize int64
	// MaxNeedle bounds one needle; a larger PUT is errors.TooLarge (413).
	// Default 64 MiB.
	MaxNeedle int64
	// Labels are sent with heartbeats (rack, zone, disk type) for placement.
	Labels map[string]string
	// Meta receives heartbeats. Nil: the server runs alone (tests).
	Meta metapb.MetaClient
	// HeartbeatInterval is the time between heartbeats (shorter when
	// meta's lease is: see leaseRenewals), and between checks for volumes
	// to compact. Default 1s.
	HeartbeatInterval time.Duration
	// CompactRatio is the garbage ratio (garbage bytes / record bytes) past
	// which the background compactor rewrites a volume. Default 0.5;
	// negative disables background compaction.
	CompactRatio float64
	// ReplicaTimeout bounds a primary's wait for one replica's write
	// (plus a second per 16 MiB of data); past it the replica counts as
	// failed and the volume turns read-only. Default 2s.
	ReplicaTimeout time.Duration
	// ScrubRate caps the bytes per second the background scrub re-reads
	// and verifies (a corrupt needle is restored from a replica). Default
	// 4 MiB/s, under 5% of a disk that streams 100 MB/s; negative disables
	// the scrub.
	ScrubRate int64
	// ScrubPeriod is how often every needle is verified: the scrub runs
	// continuously at the pace that covers the server's data in 90% of it,
	// up to ScrubRate. Default 14 days.
	ScrubPeriod time.Duration
	// FS is the file system under the volumes. Default the operating
	// system's; tests put a failing disk here (vfs/errorfs).
	FS vfs.FS
	// NoLocalReads turns off the local-read socket (local.go): clients on
	// this host then read over HTTP like everyone else.
	NoLocalReads bool
	// TLS, when set, is how this server dials its peers (replication,
	// copies): the cluster CA and this server's data certificate. Nil
	// dials them over plain HTTP.
	TLS *tls.Config
	// Caps verifies the data plane's capabilities (package capability).
	// Nil: a keyring that meta's heartbeat answers fill; until the first,
	// every HTTP request is refused. A server without meta (tests) sets
	// its own.
	Caps *capability.Keyring
	// Revoked is the certificate revocation list, filled from meta's
	// heartbeat answers: peers presenting a revoked certificate are
	// refused per request, and the embedder guards the listener's TLS
	// config with it (Revoked.Guard) so their handshakes fail. Nil: the
	// server makes its own.
	Revoked *pki.Revocations
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics; nil is prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Revoked == nil {
		c.Revoked = &pki.Revocations{}
	}
	if c.TLS != nil {
		c.TLS = c.Revoked.Guard(c.TLS) // no replication to a revoked peer
	}
	if c.MaxVolumeSize == 0 {
		c.MaxVolumeSize = volume.DefaultMaxSize
	}
	if c.MaxNeedle == 0 {
		c.MaxNeedle = volume.DefaultMaxNeedle
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.CompactRatio == 0 {
		c.CompactRatio = 0.5
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = 2 * time.Second
	}
	if c.ScrubRate == 0 {
		c.ScrubRate = 4 << 20
	}
	if c.ScrubPeriod == 0 {
		c.ScrubPeriod = 14 * 24 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	const op errors.Op = "chunk.Config"
	if c.Dir == "" {
		return errors.E(op, errors.Invalid, "Dir is required")
	}
	if c.HeartbeatInterval < 0 {
		return errors.E(op, errors.Invalid, fmt.Sprintf("HeartbeatInterval %v is negative", c.HeartbeatInterval))
	}
	if c.CompactRatio > 1 {
		return errors.E(op, errors.Invalid, fmt.Sprintf("CompactRatio %v is over 1", c.CompactRatio))
	}
	if err := c.volumeOptions().Validate(); err != nil {
		return errors.E(op, err)
	}
	return nil
}

func (c *Config) volumeOptions() volume.Options {
	return volume.Options{MaxSize: c.MaxVolumeSize, MaxNeedle: c.MaxNeedle, FS: c.FS}
}
