package client

import (
	"context"

	"cairn/proto/metapb"
)

// Mkdir creates a directory and any missing parents.
func (c *Client) Mkdir(ctx context.Context, ns, p string, mode uint32) (*metapb.Inode, error) {
	defer c.cache.invalidate(ns, p)
	return c.meta.Mkdir(ctx, &metapb.MkdirRequest{Ns: ns, Path: p, Mode: mode, Parents: true})
}

// Delete removes a file or directory (recursive: with everything in it).
func (c *Client) Delete(ctx context.Context, ns, p string, recursive bool, ifMatch string) error {
	defer c.cache.invalidate(ns, p)
	_, err := c.meta.Delete(ctx, &metapb.DeleteRequest{Ns: ns, Path: p, Recursive: recursive, IfMatch: ifMatch})
	return err
}

// Rename moves a file or directory atomically inside a namespace.
func (c *Client) Rename(ctx context.Context, ns, from, to string, noReplace bool) (*metapb.Inode, error) {
	defer c.cache.invalidate(ns, from)
	defer c.cache.invalidate(ns, to)
	return c.meta.Rename(ctx, &metapb.RenameRequest{Ns: ns, From: from, To: to, NoReplace: noReplace, Parents: true})
}

// List returns one page of a listing; see metapb.ListRequest.
func (c *Client) List(ctx context.Context, req *metapb.ListRequest) (*metapb.ListResponse, error) {
	return c.meta.List(ctx, req)
}

// SetAttr changes attributes (and truncates when Size is set).
func (c *Client) SetAttr(ctx context.Context, req *metapb.SetAttrRequest) (*metapb.Inode, error) {
	defer c.cache.invalidate(req.Ns, req.Path)
	return c.meta.SetAttr(ctx, req)
}
