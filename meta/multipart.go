package meta

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// S3 multipart uploads. A part's data is stored as needles when it is
// uploaded, and the part record keeps their extents; completion commits
// the parts' extents, shifted to their place, as the file's extent list in
// one command. No byte is copied. Parts that completion leaves out, and
// every part of an aborted upload, are released like a deleted file's
// extents.
//
//	sM/{bucket} 0 {key} 0 {upload id}   metapb.S3Upload (S3 lists uploads by key)
//	sP/{upload id}{part number:4}       metapb.S3Part

const (
	pS3Upload = "sM/"
	pS3Part   = "sP/"
)

func uploadKey(bucket, key, id string) []byte {
	return []byte(pS3Upload + bucket + "\x00" + key + "\x00" + id)
}

func partPrefix(id string) []byte { return []byte(pS3Part + id + "\x00") }

func partKey(id string, n uint32) []byte { return binary.BigEndian.AppendUint32(partPrefix(id), n) }

func (t *txn) upload(r *metapb.S3UploadRequest) (*metapb.S3Upload, error) {
	u := &metapb.S3Upload{}
	found, err := t.v.getProto(uploadKey(r.Bucket, r.Key, r.UploadId), u)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.E(errors.NotExist, "no such upload")
	}
	return u, nil
}

func (t *txn) putUpload(u *metapb.S3Upload) error {
	if _, err := t.v.namespace(u.Bucket); err != nil {
		return err
	}
	if p, dir, err := pathname.Clean(u.Key); err != nil || p == "" || dir {
		return errors.E(errors.Invalid, "an upload needs a file path")
	}
	if len(u.UploadId) < 16 || strings.IndexByte(u.UploadId, 0) >= 0 {
		return errors.E(errors.Invalid, "bad upload id")
	}
	u.InitiatedNs = t.now
	return t.put(uploadKey(u.Bucket, u.Key, u.UploadId), u)
}

// parts calls fn for each part of upload id in number order.
func (v *view) parts(id string, after uint32, fn func(*metapb.S3Part) bool) error {
	return v.scanFrom(partPrefix(id), partKey(id, after+1), func() proto.Message { return &metapb.S3Part{} },
		func(m proto.Message) bool { return fn(m.(*metapb.S3Part)) })
}

func (t *txn) releaseAll(exts []*metapb.Extent) error {
	for _, nd := range distinctNeedles(exts) {
		if err := t.release(nd); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) putPart(c *metapb.S3PutPartCommand) error {
	if _, err := t.upload(c.Upload); err != nil {
		return err
	}
	p := c.Part
	if p.Number < 1 || p.Number > 10000 {
		return errors.E(errors.Invalid, "part numbers are 1 to 10000")
	}
	if _, _, err := tile(p.Extents, p.Size, true); err != nil {
		return err
	}
	old := &metapb.S3Part{}
	k := partKey(c.Upload.UploadId, p.Number)
	found, err := t.v.getProto(k, old)
	if err != nil {
		return err
	}
	if c.Shared {
		for _, nd := range distinctNeedles(p.Extents) {
			if err := t.acquire(nd); err != nil {
				return err
			}
		}
	}
	if found {
		if err := t.releaseAll(old.Extents); err != nil {
			return err
		}
	}
	p.MtimeNs = t.now
	return t.put(k, p)
}

// dropUpload deletes the upload record and its parts, releasing the
// needles of the parts not in kept.
func (t *txn) dropUpload(r *metapb.S3UploadRequest, kept map[uint32]bool) error {
	var parts []*metapb.S3Part
	if err := t.v.parts(r.UploadId, 0, func(p *metapb.S3Part) bool { parts = append(parts, p); return true }); err != nil {
		return err
	}
	for _, p := range parts {
		if !kept[p.Number] {
			if err := t.releaseAll(p.Extents); err != nil {
				return err
			}
		}
		if err := t.del(partKey(r.UploadId, p.Number)); err != nil {
			return err
		}
	}
	return t.del(uploadKey(r.Bucket, r.Key, r.UploadId))
}

func (t *txn) abortUpload(r *metapb.S3UploadRequest) error {
	if _, err := t.upload(r); err != nil {
		return err
	}
	return t.dropUpload(r, nil)
}

// MultipartETag is the ETag S3 gives a multipart object: the MD5 of the
// concatenated binary MD5s of its parts, then "-" and the part count.
func MultipartETag(partMD5s [][]byte) string {
	h := md5.New()
	for _, s := range partMD5s {
		h.Write(s)
	}
	return fmt.Sprintf("%x-%d", h.Sum(nil), len(partMD5s))
}

func (t *txn) completeUpload(r *metapb.S3CompleteRequest) error {
	u, err := t.upload(r.Upload)
	if err != nil {
		return err
	}
	if len(r.Parts) == 0 {
		return errors.E(errors.Invalid, "a multipart upload needs at least one part")
	}
	var (
		exts  []*metapb.Extent
		sums  [][]byte
		sizes []uint64
		size  uint64
		kept  = map[uint32]bool{}
		owned = map[needle]int{} // parts holding each needle
	)
	for i, cp := range r.Parts {
		if i > 0 && cp.Number <= r.Parts[i-1].Number {
			return errors.E(errors.Invalid, "parts must be listed in ascending order")
		}
		p := &metapb.S3Part{}
		found, err := t.v.getProto(partKey(u.UploadId, cp.Number), p)
		if err != nil {
			return err
		}
		if !found || p.Etag != cp.Etag {
			return errors.E(errors.Invalid, fmt.Sprintf("part %d is not uploaded or its ETag differs", cp.Number))
		}
		if i < len(r.Parts)-1 && p.Size < r.MinPartSize {
			return errors.E(errors.Invalid, fmt.Sprintf("part %d is smaller than the minimum part size", cp.Number))
		}
		sum, err := hex.DecodeString(p.Etag)
		if err != nil {
			return errors.E(errors.Corrupt, "part etag is not hex")
		}
		sums = append(sums, sum)
		for _, e := range p.Extents {
			c := proto.Clone(e).(*metapb.Extent)
			c.Offset += size
			exts = append(exts, c)
		}
		for _, nd := range distinctNeedles(p.Extents) {
			owned[nd]++
		}
		size += p.Size
		sizes = append(sizes, p.Size)
		kept[cp.Number] = true
	}
	// The file is one owner of each needle, however many parts held it.
	for nd, n := range owned {
		for ; n > 1; n-- {
			if err := t.release(nd); err != nil {
				return err
			}
		}
	}
	if err := t.dropUpload(r.Upload, kept); err != nil {
		return err
	}
	return t.commitKeep(&metapb.CommitRequest{
		Ns: u.Bucket, Path: u.Key, Size: size, Extents: exts, Etag: MultipartETag(sums),
		ContentType: u.ContentType, UserMeta: u.UserMeta, Headers: u.Headers, Tags: u.Tags, Parents: true,
		IfNoneMatch: r.IfNoneMatch, IfMatch: r.IfMatch, PartSizes: sizes, StorageClass: u.StorageClass,
	}, false)
}

// ---- RPCs -----------------------------------------------------------------------

func (s *Service) S3CreateUpload(ctx context.Context, req *metapb.S3Upload) (*metapb.S3Upload, error) {
	if err := s.validClass("meta.S3CreateUpload", req.StorageClass); err != nil { // tier_apply.go
		return nil, err
	}
	u := proto.Clone(req).(*metapb.S3Upload)
	if u.UploadId == "" {
		u.UploadId = randomFrom(32, "0123456789abcdef")
	}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_PutS3Upload{PutS3Upload: u}}); err != nil {
		return nil, err
	}
	return u, nil
}

func (s *Service) S3GetUpload(ctx context.Context, req *metapb.S3UploadRequest) (*metapb.S3Upload, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	return (&txn{v: v}).upload(req)
}

func (s *Service) S3PutPart(ctx context.Context, req *metapb.S3PutPartCommand) (*metapb.S3Part, error) {
	if _, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_PutS3Part{PutS3Part: req}})); err != nil {
		return nil, err
	}
	return req.Part, nil
}

func (s *Service) S3CompleteUpload(ctx context.Context, req *metapb.S3CompleteRequest) (*metapb.Inode, error) {
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_CompleteS3Upload{CompleteS3Upload: req}}))
	if err != nil {
		return nil, err
	}
	return res.inode, nil
}

func (s *Service) S3AbortUpload(ctx context.Context, req *metapb.S3UploadRequest) (*metapb.Empty, error) {
	_, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_AbortS3Upload{AbortS3Upload: req}}))
	return &metapb.Empty{}, err
}

func (s *Service) S3ListParts(ctx context.Context, req *metapb.S3ListPartsRequest) (*metapb.S3PartList, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	u, err := (&txn{v: v}).upload(req.Upload)
	if err != nil {
		return nil, errors.E(errors.Op("meta.S3ListParts"), err)
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	out := &metapb.S3PartList{Upload: u}
	err = v.parts(u.UploadId, req.After, func(p *metapb.S3Part) bool {
		if len(out.Parts) == limit {
			out.Truncated = true
			return false
		}
		p.Extents = nil
		out.Parts = append(out.Parts, p)
		return true
	})
	return out, err
}

// S3ListUploads lists uploads in (key, upload id) order; an empty bucket
// lists every bucket's (for the gateway's clean-up of abandoned uploads).
func (s *Service) S3ListUploads(ctx context.Context, req *metapb.S3ListUploadsRequest) (*metapb.S3UploadList, error) {
	prefix := []byte(pS3Upload)
	from := prefix
	if req.Bucket != "" {
		prefix = []byte(pS3Upload + req.Bucket + "\x00" + req.Prefix)
		from = prefix
		if req.KeyMarker != "" {
			// After the marker key's uploads (or, with an upload id
			// marker, after that upload of the marker key).
			from = append([]byte(pS3Upload+req.Bucket+"\x00"+req.KeyMarker+"\x00"+req.UploadIdMarker), 0xff)
		}
	}
	if req.Bucket == "" && req.KeyMarker != "" {
		// Across buckets the marker is "bucket 0 key 0 upload id".
		from = append([]byte(pS3Upload+req.KeyMarker), 0xff)
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	out := &metapb.S3UploadList{}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	err = v.scanFrom(prefix, from, func() proto.Message { return &metapb.S3Upload{} }, func(m proto.Message) bool {
		if len(out.Uploads) == limit {
			out.Truncated = true
			return false
		}
		out.Uploads = append(out.Uploads, m.(*metapb.S3Upload))
		return true
	})
	return out, err
}
