package client

import (
	"context"

	"cairn/ec"
	"cairn/proto/metapb"
)

// Reads of erasure-coded volumes (storage classes): any shard server
// serves any needle (it rebuilds what it lacks from the others), but the
// one holding the needle's data shard serves it from its own disk in one
// request. The client finds that shard from the volume's needle index,
// fetched once per volume generation from a shard server (with the read
// capability of the needle wanted) and kept: an encoded volume's index
// changes only by deletes, which its servers check themselves, and by a
// compaction, which moves the volume to a new generation.

// ecIndexer is the data plane's way to fetch an encoded volume's index.
type ecIndexer interface {
	NeedleIndex(ctx context.Context, vid uint32, key uint64) ([]byte, error)
}

// ecServers is the order to ask v's shard servers for needle key: the
// home data shard's server first (if the index is known), then the other
// data shards', then the parity shards'; lost shards left out.
func (c *Client) ecServers(ctx context.Context, v *metapb.Volume, key uint64) []string {
	e := v.Ec
	l := ec.Layout{K: int(e.K), M: int(e.M), Cell: int64(e.Cell), Size: int64(e.Size)}
	home := -1
	if idx := c.ecIndex(ctx, v, key); idx != nil {
		if n, ok := ec.Find(idx, key); ok && l.Validate() == nil {
			home = l.Home(n)
		}
	}
	var out []string
	add := func(i int) {
		if i >= 0 && i < len(e.ShardServers) && e.ShardServers[i] != "" {
			for _, a := range out {
				if a == e.ShardServers[i] {
					return
				}
			}
			out = append(out, e.ShardServers[i])
		}
	}
	add(home)
	for i := range e.ShardServers {
		add(i)
	}
	return out
}

// ecCachedIndex is a volume's index as of its generation: a compaction
// (chunk/ec_compact.go) moves every needle and moves the volume on.
type ecCachedIndex struct {
	gen uint64
	idx []ec.Needle
}

// ecIndex returns v's needle index, fetching it on first use; nil if no
// shard server gave it (reads then go to any shard server).
func (c *Client) ecIndex(ctx context.Context, v *metapb.Volume, key uint64) []ec.Needle {
	if x, ok := c.ecIdx.Load(v.Id); ok && x.(ecCachedIndex).gen == v.Generation {
		return x.(ecCachedIndex).idx
	}
	for _, addr := range v.Ec.ShardServers {
		if addr == "" {
			continue
		}
		f, ok := c.chunkFor(addr).(ecIndexer)
		if !ok {
			return nil
		}
		b, err := f.NeedleIndex(ctx, v.Id, key)
		if err != nil {
			continue
		}
		vid, idx, err := ec.ParseIndex(b)
		if err != nil || vid != v.Id {
			continue
		}
		c.ecIdx.Store(v.Id, ecCachedIndex{gen: v.Generation, idx: idx})
		return idx
	}
	return nil
}

type classKey struct{}

// WithStorageClass makes the writes made with ctx go to volumes of the
// storage class named (meta/classes.go) instead of the namespace's: how
// an S3 PUT's x-amz-storage-class places its object.
func WithStorageClass(ctx context.Context, class string) context.Context {
	return context.WithValue(ctx, classKey{}, class)
}

func storageClassOf(ctx context.Context) string {
	c, _ := ctx.Value(classKey{}).(string)
	return c
}

// assignSlot keys the writable volume cached for a namespace and class.
func assignSlot(ns, class string) string {
	if class == "" {
		return ns
	}
	return ns + "\x00" + class
}
