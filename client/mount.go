package client

import (
	"bytes"
	"context"
	"io"

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

// Discard deletes needles that will never be committed (best effort).
func (c *Client) Discard(exts []*metapb.Extent) { c.discard(exts) }
