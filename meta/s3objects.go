package meta

import (
	"context"
	"encoding/binary"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// Shared needles. S3 CopyObject and UploadPartCopy reuse the source's
// needles instead of copying data, so one needle may belong to several
// owners (files, multipart parts). r/{volume:4}{key:8} counts the owners
// beyond the first; a needle without the key has one owner. An owner that
// lets go of a needle (overwrite, truncate, delete) decrements the count,
// and only the last owner queues it as garbage. A needle is counted once
// per owner, however many of the owner's extents point into it.

const pRef = 'r'

func refKey(nd needle) []byte {
	k := []byte{pRef, '/'}
	k = binary.BigEndian.AppendUint32(k, nd.vol)
	return binary.BigEndian.AppendUint64(k, nd.key)
}

// acquire makes one more owner of nd.
func (t *txn) acquire(nd needle) error {
	val, _, err := t.v.get(refKey(nd))
	if err != nil {
		return err
	}
	return t.b.Set(refKey(nd), be64(u64(val)+1), nil)
}

// release drops one owner of nd; the last one queues it as garbage.
func (t *txn) release(nd needle) error {
	val, found, err := t.v.get(refKey(nd))
	if err != nil {
		return err
	}
	if n := u64(val); found && n > 0 {
		if n == 1 {
			return t.del(refKey(nd))
		}
		return t.b.Set(refKey(nd), be64(n-1), nil)
	}
	t.res.garbage = true
	return t.b.Set(garbageKey(nd.vol, nd.key), nil, nil)
}

func distinctNeedles(exts []*metapb.Extent) []needle {
	seen := map[needle]bool{}
	var out []needle
	for _, e := range exts {
		if nd := (needle{e.Volume, e.Key}); !seen[nd] {
			seen[nd] = true
			out = append(out, nd)
		}
	}
	return out
}

// applyS3 executes the S3 commands; known is false for any other command.
func (t *txn) applyS3(cmd *metapb.Command) (op errors.Op, p errors.Path, known bool, err error) {
	known = true
	switch c := cmd.Op.(type) {
	case *metapb.Command_PutS3User:
		op, p = "meta.S3CreateUser", errors.Path(c.PutS3User.Name)
		err = t.putS3User(c.PutS3User)
	case *metapb.Command_DeleteS3User:
		op, p = "meta.S3DeleteUser", errors.Path(c.DeleteS3User.Name)
		err = t.deleteS3User(c.DeleteS3User.Name)
	case *metapb.Command_PutS3Key:
		op = "meta.S3PutKey"
		err = t.putS3Key(c.PutS3Key)
	case *metapb.Command_DeleteS3Key:
		op = "meta.S3DeleteKey"
		err = t.deleteS3Key(c.DeleteS3Key.AccessKey)
	case *metapb.Command_PutS3BucketConfig:
		op, p = "meta.S3PutBucketConfig", errors.Path(c.PutS3BucketConfig.Bucket)
		err = t.putBucketConfig(c.PutS3BucketConfig)
	case *metapb.Command_S3Copy:
		op, p = "meta.S3Copy", fullPath(c.S3Copy.DstNs, c.S3Copy.DstPath)
		err = t.s3Copy(c.S3Copy)
	case *metapb.Command_SetS3Tags:
		op, p = "meta.S3SetTags", fullPath(c.SetS3Tags.Ns, c.SetS3Tags.Path)
		err = t.setS3Tags(c.SetS3Tags)
	case *metapb.Command_PutS3Upload:
		op, p = "meta.S3CreateUpload", fullPath(c.PutS3Upload.Bucket, c.PutS3Upload.Key)
		err = t.putUpload(c.PutS3Upload)
	case *metapb.Command_PutS3Part:
		op, p = "meta.S3PutPart", fullPath(c.PutS3Part.GetUpload().GetBucket(), c.PutS3Part.GetUpload().GetKey())
		err = t.putPart(c.PutS3Part)
	case *metapb.Command_CompleteS3Upload:
		op, p = "meta.S3CompleteUpload", fullPath(c.CompleteS3Upload.GetUpload().GetBucket(), c.CompleteS3Upload.GetUpload().GetKey())
		err = t.completeUpload(c.CompleteS3Upload)
	case *metapb.Command_AbortS3Upload:
		op, p = "meta.S3AbortUpload", fullPath(c.AbortS3Upload.Bucket, c.AbortS3Upload.Key)
		err = t.abortUpload(c.AbortS3Upload)
	default:
		known = false
	}
	return op, p, known, err
}

// fileAt returns the regular file at ns/p.
func (t *txn) fileAt(ns, p string) (*metapb.Inode, string, error) {
	n, err := t.v.namespace(ns)
	if err != nil {
		return nil, "", err
	}
	clean, _, err := pathname.Clean(p)
	if err != nil {
		return nil, "", err
	}
	ino, dir, err := t.v.walk(n.RootIno, clean)
	if err != nil {
		return nil, "", err
	}
	if dir {
		return nil, "", errors.E(errors.IsDir, fullPath(ns, clean), "a directory, not a file")
	}
	in, err := t.v.inode(ino)
	return in, clean, err
}

func (t *txn) s3Copy(r *metapb.S3CopyRequest) error {
	src, exts, err := t.copySource(r)
	if err != nil {
		return errors.E(fullPath(r.SrcNs, r.SrcPath), err)
	}
	if r.SrcIfMatch != "" && r.SrcIfMatch != src.Etag || r.SrcVersion != 0 && r.SrcVersion != src.Version {
		return errors.E(errors.Precondition, fullPath(r.SrcNs, r.SrcPath), "the source changed")
	}
	// Acquire before the destination lets go of its old content: copying
	// a file onto itself then nets out to no change in ownership.
	for _, nd := range distinctNeedles(exts) {
		if err := t.acquire(nd); err != nil {
			return err
		}
	}
	c := &metapb.CommitRequest{
		Ns: r.DstNs, Path: r.DstPath, Size: src.Size, Extents: exts, Etag: src.Etag,
		ContentType: src.ContentType, UserMeta: src.UserMeta, Headers: src.Headers, Tags: src.Tags,
		Mode: src.Mode, Parents: true, PartSizes: src.PartSizes,
	}
	if c.Etag == "" {
		c.Etag = syntheticETag(src)
	}
	// The shared needles stay where they are: the copy is in the
	// source's class (tier_apply.go: commitClass).
	if c.StorageClass, err = t.effectiveClass(r.SrcNs, src); err != nil {
		return err
	}
	if r.ReplaceMetadata {
		c.ContentType, c.UserMeta, c.Headers = r.ContentType, r.UserMeta, r.Headers
	}
	if r.ReplaceTags {
		c.Tags = r.Tags
	}
	return t.commitKeep(c, false)
}

func (t *txn) setS3Tags(r *metapb.S3TagsRequest) error {
	n, clean, err := t.fileAt(r.Ns, r.Path)
	if err != nil {
		return err
	}
	n.Tags = r.Tags
	t.touch(n, false)
	t.res.inode = n
	t.event(r.Ns, clean, false)
	return t.put(inodeKey(n.Ino), n)
}

// ---- bucket configuration -----------------------------------------------------

func s3BucketKey(b string) []byte { return []byte("sB/" + b) }

func (t *txn) putBucketConfig(c *metapb.S3BucketConfig) error {
	if _, err := t.v.namespace(c.Bucket); err != nil {
		return err
	}
	if len(c.Cors) == 0 && len(c.Tags) == 0 && len(c.Lifecycle) == 0 && c.Policy == "" && c.PublicAccessBlock == nil && c.ObjectOwnership == "" {
		return t.del(s3BucketKey(c.Bucket))
	}
	return t.put(s3BucketKey(c.Bucket), c)
}

func (s *Service) S3GetBucketConfig(ctx context.Context, req *metapb.NamespaceRequest) (*metapb.S3BucketConfig, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	if _, err := v.namespace(req.Name); err != nil {
		return nil, errors.E(errors.Op("meta.S3GetBucketConfig"), err)
	}
	c := &metapb.S3BucketConfig{}
	if _, err := v.getProto(s3BucketKey(req.Name), c); err != nil {
		return nil, err
	}
	c.Bucket = req.Name
	return c, nil
}

func (s *Service) S3PutBucketConfig(ctx context.Context, req *metapb.S3BucketConfig) (*metapb.S3BucketConfig, error) {
	if err := pathname.ValidNamespace(req.Bucket); err != nil {
		return nil, errors.E(errors.Op("meta.S3PutBucketConfig"), err)
	}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutS3BucketConfig{PutS3BucketConfig: req}}); err != nil {
		return nil, err
	}
	return req, nil
}

func (s *Service) S3Copy(ctx context.Context, req *metapb.S3CopyRequest) (*metapb.Inode, error) {
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_S3Copy{S3Copy: req}}))
	if err != nil {
		return nil, err
	}
	return res.inode, nil
}

func (s *Service) S3SetTags(ctx context.Context, req *metapb.S3TagsRequest) (*metapb.Inode, error) {
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_SetS3Tags{SetS3Tags: req}}))
	if err != nil {
		return nil, err
	}
	return res.inode, nil
}
