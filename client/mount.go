package client

import (
	"bytes"
	"context"
	"io"

	"cairn/errors"
	"cairn/proto/metapb"
)

// The methods below expose the data plane below whole-file Put and Read,
// for front ends that manage extents themselves (the FUSE mount packs
// dirty ranges into needles and commits extent lists of its own).

// Upload stores data as needles of namespace ns (cut at Config.ExtentSize,
// Config.Parallel at a time) and returns their extents, offsets from 0.
// Nothing is committed: the caller commits the extents or discards them.
func (c *Client) Upload(ctx context.Context, ns string, data []byte) ([]*metapb.Extent, error) {
	_, exts, err := c.upload(ctx, ns, bytes.NewReader(data), int64(len(data)), nil)
	if err != nil {
		c.discard(exts)
		return nil, err
	}
	return exts, nil
}

// ReadNeedle copies n bytes of needle (vid, key) from off to w, from the
// volume's servers in order.
func (c *Client) ReadNeedle(ctx context.Context, vid uint32, key uint64, off, n int64, w io.Writer) (int64, error) {
	return c.readNeedle(ctx, vid, key, off, n, w)
}

// localReaderAt is a data server client that can read a needle straight
// from the server's files when they are on this host (chunk.Remote).
type localReaderAt interface {
	ReadLocal(ctx context.Context, vid uint32, key uint64, p []byte, off int64) (n int, local bool, err error)
}

// Local says whether volume vid has a replica on this host that reads
// take in place (known after the first read from that server).
func (c *Client) Local(ctx context.Context, vid uint32) bool {
	v, err := c.volume(ctx, vid, false)
	if err != nil {
		return false
	}
	for _, addr := range v.Servers {
		if c.isLocal(addr) {
			return true
		}
	}
	return false
}

// isLocal says whether reads from the data server at addr take the local
// path (chunk.Remote, once it has found the server on this host).
func (c *Client) isLocal(addr string) bool {
	l, ok := c.chunkFor(addr).(interface{ Local() bool })
	return ok && l.Local()
}

// ReadNeedleAt fills p with bytes of needle (vid, key) from off. A replica
// on this host is read in place (its files, no network); otherwise, or if
// that fails, the replicas are read as ReadNeedle does.
func (c *Client) ReadNeedleAt(ctx context.Context, vid uint32, key uint64, p []byte, off int64) error {
	if v, err := c.volume(ctx, vid, false); err == nil && len(v.Servers) > 0 {
		first := c.firstReplica(v.Servers, key)
		for i := range v.Servers {
			addr := v.Servers[(first+i)%len(v.Servers)]
			l, ok := c.chunkFor(addr).(localReaderAt)
			if !ok {
				continue
			}
			n, local, err := l.ReadLocal(ctx, vid, key, p, off)
			if local && err == nil && n == len(p) {
				return nil
			}
			if errors.Is(errors.Corrupt, err) {
				c.reportCorrupt(addr, vid, key)
			}
		}
	}
	w := fill{p: p[:0]}
	_, err := c.readNeedle(ctx, vid, key, off, int64(len(p)), &w)
	return err
}

// fill is a writer into a buffer of fixed size.
type fill struct{ p []byte }

func (f *fill) Write(b []byte) (int, error) {
	if len(b) > cap(f.p)-len(f.p) {
		return 0, io.ErrShortBuffer
	}
	f.p = append(f.p, b...)
	return len(b), nil
}

// Discard deletes needles that will never be committed (best effort).
func (c *Client) Discard(exts []*metapb.Extent) { c.discard(exts) }
