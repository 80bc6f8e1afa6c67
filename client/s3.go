package client

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"hash"
	"io"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Stored is data uploaded as needles but not yet part of any file: the
// S3 layer checks what only the end of a body can tell (checksums in an
// aws-chunked trailer) before committing it, or keeps it as a multipart
// part.
type Stored struct {
	Size    int64
	Extents []*metapb.Extent
	MD5     []byte
}

// Store uploads r as needles of namespace ns. On error nothing stays
// stored.
func (c *Client) Store(ctx context.Context, ns string, r io.Reader, sizeHint int64) (*Stored, error) {
	return c.StoreHashed(ctx, ns, r, sizeHint, md5.New())
}

// StoreHashed is Store with the MD5 computed by sum, which must be an MD5
// (a multi-buffer one is much faster for many big uploads at once).
func (c *Client) StoreHashed(ctx context.Context, ns string, r io.Reader, sizeHint int64, sum hash.Hash) (*Stored, error) {
	size, exts, err := c.upload(ctx, ns, r, sizeHint, sum)
	if err != nil {
		c.discard(exts)
		return nil, errors.E(errors.Op("client.Store"), errors.Path(ns), err)
	}
	return &Stored{Size: size, Extents: exts, MD5: sum.Sum(nil)}, nil
}

// DiscardStored deletes stored needles that will not be committed.
func (c *Client) DiscardStored(s *Stored) {
	if s != nil {
		c.discard(s.Extents)
	}
}

// CommitOptions qualify CommitStored: PutOptions plus what S3 keeps.
type CommitOptions struct {
	PutOptions
	Headers map[string]string
	Tags    map[string]string
	// Object lock of the new version (a bucket with object lock only).
	Retention *metapb.S3Retention
	LegalHold bool
	// StorageClass is the class the needles were written in
	// (WithStorageClass); "": the namespace's.
	StorageClass string
}

// CommitStored makes s the content of ns/p (creating parents), like Put.
// On error the needles are discarded if meta refused the commit (Refused).
func (c *Client) CommitStored(ctx context.Context, ns, p string, s *Stored, o CommitOptions) (*metapb.Inode, error) {
	c.cache.invalidate(ns, p)
	ino, err := c.meta.Commit(ctx, &metapb.CommitRequest{
		Ns: ns, Path: p, Size: uint64(s.Size), Extents: s.Extents,
		Etag: hex.EncodeToString(s.MD5), ContentType: o.ContentType,
		UserMeta: o.UserMeta, Mode: o.Mode, IfMatch: o.IfMatch,
		IfNoneMatch: o.IfNoneMatch, Parents: true, Headers: o.Headers, Tags: o.Tags,
		S3Retention: o.Retention, S3LegalHold: o.LegalHold, StorageClass: o.StorageClass,
	})
	if err != nil {
		c.cache.invalidate(ns, p)
		c.discardRefused(err, s.Extents)
		return nil, err
	}
	c.cache.putWritten(&File{NS: ns, Path: p, Inode: ino, Extents: s.Extents}, ino.Seq)
	return ino, nil
}

// Copy makes req.DstPath share req.SrcPath's data (no byte is copied).
func (c *Client) Copy(ctx context.Context, req *metapb.S3CopyRequest) (*metapb.Inode, error) {
	defer c.cache.invalidate(req.DstNs, req.DstPath)
	return c.meta.S3Copy(ctx, req)
}

// SetTags replaces a file's S3 tags.
func (c *Client) SetTags(ctx context.Context, ns, p string, tags map[string]string) (*metapb.Inode, error) {
	defer c.cache.invalidate(ns, p)
	return c.meta.S3SetTags(ctx, &metapb.S3TagsRequest{Ns: ns, Path: p, Tags: tags})
}

// CompleteUpload commits a multipart upload's parts as one file.
func (c *Client) CompleteUpload(ctx context.Context, req *metapb.S3CompleteRequest) (*metapb.Inode, error) {
	defer c.cache.invalidate(req.Upload.Bucket, req.Upload.Key)
	return c.meta.S3CompleteUpload(ctx, req)
}

// PutPart records a stored part of a multipart upload; if meta refused it
// (Refused), the part's needles are discarded (unless shared with a file).
func (c *Client) PutPart(ctx context.Context, up *metapb.S3UploadRequest, num uint32, s *Stored, shared bool) (*metapb.S3Part, error) {
	p := &metapb.S3Part{Number: num, Size: uint64(s.Size), Etag: hex.EncodeToString(s.MD5), Extents: s.Extents}
	out, err := c.meta.S3PutPart(ctx, &metapb.S3PutPartCommand{Upload: up, Part: p, Shared: shared})
	if err != nil && !shared {
		c.discardRefused(err, s.Extents)
	}
	return out, err
}

// S3 versioning (meta/versions.go). Each call that changes what a path
// resolves to drops it from the cache, as Delete does.

// SetVersioning sets a bucket's versioning or object lock configuration.
func (c *Client) SetVersioning(ctx context.Context, req *metapb.S3VersioningRequest) (*metapb.Namespace, error) {
	defer c.cache.invalidateNS(req.Ns)
	return c.meta.S3SetVersioning(ctx, req)
}

// DeleteS3 is S3's DeleteObject: a delete marker in a versioned bucket.
func (c *Client) DeleteS3(ctx context.Context, ns, p string) (*metapb.S3Version, error) {
	defer c.cache.invalidate(ns, p)
	return c.meta.S3Delete(ctx, &metapb.S3VersionRequest{Ns: ns, Path: p})
}

// DeleteVersion removes one version of an object for good.
func (c *Client) DeleteVersion(ctx context.Context, req *metapb.S3VersionRequest) (*metapb.S3Version, error) {
	defer c.cache.invalidate(req.Ns, req.Path)
	return c.meta.S3DeleteVersion(ctx, req)
}

// SetLock sets a version's retention or legal hold.
func (c *Client) SetLock(ctx context.Context, req *metapb.S3LockRequest) (*metapb.S3Version, error) {
	defer c.cache.invalidate(req.Ns, req.Path)
	return c.meta.S3SetLock(ctx, req)
}
