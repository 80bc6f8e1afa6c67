// Package cairn holds the interfaces that join Cairn's roles, in one place.
//
// The roles, each a package:
//
//	meta     the metadata service: namespaces, the directory tree, extents,
//	         placement, data-server membership (gRPC, state in Pebble)
//	volume   the on-disk format of one append-only volume file
//	chunk    a data server: a directory of volumes behind an HTTP data plane
//	client   the library every front end uses: cached metadata, direct reads
//	gateway  the native HTTP API on top of client; gateway/s3 the S3 API
//	cli      the cairn command
//
// The metadata API is defined by proto/meta.proto; the data plane by the
// Chunks interface below and its HTTP form in docs/architecture.md.
package cairn

import (
	"context"
	"io"

	"cairn/ec"
)

// Chunks is the data plane of one data server: needles inside volumes.
// Implemented in-process by *chunk.Store and over the network by
// *chunk.Remote; chunk/chunktest is the suite both must pass.
type Chunks interface {
	// Put stores data as a new needle of volume vid and returns the key the
	// server chose. It returns only once the needle is fsynced. A gen that
	// is not the volume's generation is errors.Stale; a full or read-only
	// volume is errors.ReadOnly (the caller asks meta for another volume).
	Put(ctx context.Context, vid uint32, gen uint64, data []byte) (key uint64, err error)

	// ReadTo copies length bytes of needle key, starting at off, to w. Each
	// byte is verified against its checksum before it is written, so a
	// corrupt needle is errors.Corrupt and never wrong bytes. A range past
	// the needle's end is errors.Range; a missing needle errors.NotExist.
	ReadTo(ctx context.Context, vid uint32, key uint64, off, length int64, w io.Writer) (int64, error)

	// Delete removes a needle by appending a tombstone. Deleting a needle
	// that does not exist is not an error (deletes are retried).
	Delete(ctx context.Context, vid uint32, gen uint64, key uint64) error

	// CreateVolume creates an empty volume; creating one that exists with
	// the same generation is not an error.
	CreateVolume(ctx context.Context, vid uint32, gen uint64) error
}

// Replicas is what meta asks of a data server in a cluster, beyond
// Chunks. Implemented by *chunk.Store and *chunk.Remote.
type Replicas interface {
	// SetReplicas creates volume vid if missing and records its replica
	// set at generation gen: addrs are data-plane addresses, primary
	// first. The primary forwards every needle to the others and
	// acknowledges only once all have it on disk.
	SetReplicas(ctx context.Context, vid uint32, gen uint64, addrs []string) error

	// CopyFrom makes this server's copy of volume vid equal to the copy on
	// the data server at from, at generation gen: needles it lacks are
	// fetched (verified, at most rate bytes/s; 0 is unthrottled), needles
	// the source no longer has are deleted. Calling it again copies only
	// what changed since.
	CopyFrom(ctx context.Context, vid uint32, gen uint64, from string, rate int64) error

	// Seal turns this server's copy of volume vid (at generation gen)
	// read-only and returns once every needle written to it before is
	// durable and listed: from then on it takes no needle, so no write
	// through a replica set it belongs to is acknowledged. A repair seals
	// its source before the final copy pass, which then has every needle
	// the old set ever acknowledged.
	Seal(ctx context.Context, vid uint32, gen uint64) error
}

// Shards is what meta asks of a data server for erasure-coded volumes
// (storage classes; package ec, chunk/ec.go). Implemented by *chunk.Store
// and *chunk.Remote.
type Shards interface {
	// EncodeVolume encodes this server's copy of sealed volume vid (at
	// generation gen; it turns read-only first) with a k+m code in cells
	// of cell bytes, and stores shard i on the server at to[i], with the
	// volume's needle index beside each. It returns once every shard is
	// durable, with the size of the encoded file.
	EncodeVolume(ctx context.Context, vid uint32, gen uint64, k, m int, cell int64, to []string) (size int64, err error)

	// RebuildShard makes shard idx of volume vid on this server from the
	// other shards (servers[i] holds shard i; "" is lost), durable when it
	// returns.
	RebuildShard(ctx context.Context, vid uint32, idx int, l ec.Layout, servers []string) error
}
