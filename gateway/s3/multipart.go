package s3

import (
	"crypto/md5"
	"io"
	"net/http"
	"strconv"
	"strings"

	"cairn/byterange"
	"cairn/client"
	"cairn/errors"
	"cairn/proto/metapb"
)

// Multipart uploads: each part is stored as needles when it arrives and
// recorded in meta; completion commits the parts' extents as the file's
// extent list in one meta command, so no byte is copied. UploadPartCopy
// shares the source's needles the same way (see meta/multipart.go).

func (s *Server) uploadRef(q *request) (*metapb.S3UploadRequest, error) {
	p, dir, err := cleanKey(q.key)
	if err != nil {
		return nil, err
	}
	if dir {
		return nil, errInvalidRequest("a multipart upload needs an object key, not a directory")
	}
	return &metapb.S3UploadRequest{Bucket: q.bucket, Key: p, UploadId: q.query.Get("uploadId")}, nil
}

func (s *Server) createUpload(q *request) error {
	if err := s.authorizeObjectWrite(q); err != nil {
		return err
	}
	ref, err := s.uploadRef(q)
	if err != nil {
		return err
	}
	ct, user, std, err := objectMeta(q.r.Header)
	if err != nil {
		return err
	}
	tags, err := parseTagging(q.r.Header.Get("X-Amz-Tagging"))
	if err != nil {
		return err
	}
	u, err := s.meta.S3CreateUpload(q.ctx(), &metapb.S3Upload{
		Bucket: q.bucket, Key: ref.Key, Owner: q.p.access,
		ContentType: ct, UserMeta: user, Headers: std, Tags: tags,
	})
	if err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	writeXML(q.w, http.StatusOK, initiateMultipartUploadResult{Xmlns: s3NS, Bucket: q.bucket, Key: q.key, UploadID: u.UploadId})
	return nil
}

func partNumber(q *request) (uint32, error) {
	n, err := strconv.Atoi(q.query.Get("partNumber"))
	if err != nil || n < 1 || n > 10000 {
		return 0, apiErr(http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
	}
	return uint32(n), nil
}

// partTarget checks that the caller may write the bucket and returns the
// upload and part number an UploadPart or UploadPartCopy names.
func (s *Server) partTarget(q *request) (ref *metapb.S3UploadRequest, num uint32, err error) {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, write); err != nil {
		return ref, 0, err
	}
	if ref, err = s.uploadRef(q); err != nil {
		return ref, 0, err
	}
	num, err = partNumber(q)
	return ref, num, err
}

func (s *Server) uploadPart(q *request) error {
	ref, num, err := s.partTarget(q)
	if err != nil {
		return err
	}
	st, err := s.store(q, q.bucket)
	if err != nil {
		return err
	}
	part, err := s.client.PutPart(q.ctx(), ref, num, st, false)
	if err != nil {
		return notExistAs(err, errNoSuchUpload())
	}
	q.w.Header().Set("ETag", `"`+part.Etag+`"`)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// sliceExtents returns the extents of bytes [off, off+n) of f, offsets
// from 0, pointing into the same needles. ok is false if the range has a
// hole (a sparse file), which extents cannot describe.
func sliceExtents(f *client.File, off, n int64) ([]*metapb.Extent, bool) {
	var out []*metapb.Extent
	pos, end := off, off+n
	for _, e := range f.Extents {
		es, ee := int64(e.Offset), int64(e.Offset+e.Length)
		if ee <= pos || es >= end {
			continue
		}
		if es > pos {
			return nil, false
		}
		l := min(ee, end) - pos
		out = append(out, &metapb.Extent{
			Offset: uint64(pos - off), Length: uint64(l), Volume: e.Volume, Key: e.Key,
			NeedleOffset: e.NeedleOffset + uint64(pos-es),
		})
		pos += l
	}
	return out, pos == end
}

func (s *Server) uploadPartCopy(q *request) error {
	ref, num, err := s.partTarget(q)
	if err != nil {
		return err
	}
	f, _, _, err := s.copyFrom(q, false)
	if err != nil {
		return err
	}
	size := f.Size()
	off, n := int64(0), size
	if h := q.r.Header.Get("X-Amz-Copy-Source-Range"); h != "" {
		rg, ok, err := byterange.Parse(h, size)
		if err != nil || !ok || !strings.HasPrefix(h, "bytes=") || strings.HasPrefix(h, "bytes=-") {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
		}
		off, n = rg.Start, rg.Length
	}
	// The part's ETag is the MD5 of its bytes, which must be read; the
	// bytes themselves are not written again.
	h := md5.New()
	if _, err := s.client.ReadTo(q.ctx(), f, off, n, h); err != nil {
		return err
	}
	st := &client.Stored{Size: n, MD5: h.Sum(nil)}
	exts, shared := sliceExtents(f, off, n)
	if shared {
		st.Extents = exts
	} else {
		// A sparse source: store the range as new data.
		pr, pw := io.Pipe()
		go func() { _, err := s.client.ReadTo(q.ctx(), f, off, n, pw); pw.CloseWithError(err) }()
		if st, err = s.client.Store(q.ctx(), q.bucket, pr, n); err != nil {
			return err
		}
	}
	part, err := s.client.PutPart(q.ctx(), ref, num, st, shared)
	if err != nil {
		return notExistAs(err, errNoSuchUpload())
	}
	writeXML(q.w, http.StatusOK, copyPartResult{Xmlns: s3NS, ETag: `"` + part.Etag + `"`, LastModified: isoTime(part.MtimeNs)})
	return nil
}

func (s *Server) completeUpload(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, write); err != nil {
		return err
	}
	ref, err := s.uploadRef(q)
	if err != nil {
		return err
	}
	var in completeMultipartUpload
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	if len(in.Parts) == 0 || len(in.Parts) > 10000 {
		return errMalformedXML()
	}
	req := &metapb.S3CompleteRequest{Upload: ref, MinPartSize: uint64(s.cfg.MinPartSize)}
	for i, p := range in.Parts {
		if p.PartNumber < 1 || p.PartNumber > 10000 {
			return apiErr(http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found.")
		}
		if i > 0 && p.PartNumber <= in.Parts[i-1].PartNumber {
			return apiErr(http.StatusBadRequest, "InvalidPartOrder", "The list of parts was not in ascending order. The parts list must be specified in order by part number.")
		}
		req.Parts = append(req.Parts, &metapb.S3CompletePart{Number: uint32(p.PartNumber), Etag: strings.Trim(p.ETag, `" `)})
	}
	// Check first, for S3's precise errors; meta checks again atomically.
	if err := s.checkParts(q, ref, req); err != nil {
		return err
	}
	ino, err := s.client.CompleteUpload(q.ctx(), req)
	if err != nil {
		if errors.Is(errors.Invalid, err) {
			return apiErr(http.StatusBadRequest, "InvalidPart", err.Error())
		}
		return s.keyError(notExistAs(err, errNoSuchUpload()))
	}
	writeXML(q.w, http.StatusOK, completeMultipartUploadResult{
		Xmlns: s3NS, Location: "/" + q.bucket + "/" + q.key, Bucket: q.bucket, Key: q.key, ETag: etagOf(ino),
	})
	return nil
}

// checkParts compares the completion list with the uploaded parts.
func (s *Server) checkParts(q *request, ref *metapb.S3UploadRequest, req *metapb.S3CompleteRequest) error {
	have := map[uint32]*metapb.S3Part{}
	var after uint32
	for {
		l, err := s.meta.S3ListParts(q.ctx(), &metapb.S3ListPartsRequest{Upload: ref, After: after, Limit: 1000})
		if err != nil {
			return notExistAs(err, errNoSuchUpload())
		}
		for _, p := range l.Parts {
			have[p.Number] = p
			after = p.Number
		}
		if !l.Truncated || len(l.Parts) == 0 {
			break
		}
	}
	for i, cp := range req.Parts {
		p := have[cp.Number]
		if p == nil || p.Etag != cp.Etag {
			return apiErr(http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.")
		}
		if i < len(req.Parts)-1 && int64(p.Size) < s.cfg.MinPartSize {
			return apiErr(http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.")
		}
	}
	return nil
}

func (s *Server) abortUpload(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, write); err != nil {
		return err
	}
	ref, err := s.uploadRef(q)
	if err != nil {
		return err
	}
	if _, err := s.meta.S3AbortUpload(q.ctx(), ref); err != nil {
		return notExistAs(err, errNoSuchUpload())
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listParts(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, read); err != nil {
		return err
	}
	ref, err := s.uploadRef(q)
	if err != nil {
		return err
	}
	v := q.query
	marker, _ := strconv.Atoi(v.Get("part-number-marker"))
	maxParts := 1000
	if m, err := strconv.Atoi(v.Get("max-parts")); err == nil && m >= 0 && m < 1000 {
		maxParts = m
	}
	l, err := s.meta.S3ListParts(q.ctx(), &metapb.S3ListPartsRequest{Upload: ref, After: uint32(max(marker, 0)), Limit: uint32(max(maxParts, 1))})
	if err != nil {
		return notExistAs(err, errNoSuchUpload())
	}
	out := listPartsResult{
		Xmlns: s3NS, Bucket: q.bucket, Key: q.key, UploadID: ref.UploadId,
		Initiator: ownerOf(l.Upload.Owner), Owner: ownerOf(l.Upload.Owner), StorageClass: "STANDARD",
		PartNumberMarker: marker, MaxParts: maxParts, IsTruncated: l.Truncated,
	}
	for _, p := range l.Parts {
		if maxParts == 0 {
			break
		}
		out.Parts = append(out.Parts, partXML{PartNumber: int(p.Number), LastModified: isoTime(p.MtimeNs), ETag: `"` + p.Etag + `"`, Size: p.Size})
		out.NextPartNumberMarker = int(p.Number)
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) listUploads(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, read); err != nil {
		return err
	}
	v := q.query
	maxUploads := 1000
	if m, err := strconv.Atoi(v.Get("max-uploads")); err == nil && m > 0 && m < 1000 {
		maxUploads = m
	}
	l, err := s.meta.S3ListUploads(q.ctx(), &metapb.S3ListUploadsRequest{
		Bucket: q.bucket, Prefix: v.Get("prefix"), KeyMarker: v.Get("key-marker"),
		UploadIdMarker: v.Get("upload-id-marker"), Limit: uint32(maxUploads),
	})
	if err != nil {
		return err
	}
	out := listMultipartUploadsResult{
		Xmlns: s3NS, Bucket: q.bucket, KeyMarker: v.Get("key-marker"), UploadIDMarker: v.Get("upload-id-marker"),
		Prefix: v.Get("prefix"), MaxUploads: maxUploads, IsTruncated: l.Truncated,
	}
	for _, u := range l.Uploads {
		out.Uploads = append(out.Uploads, uploadXML{Key: u.Key, UploadID: u.UploadId, Initiator: ownerOf(u.Owner),
			Owner: ownerOf(u.Owner), StorageClass: "STANDARD", Initiated: isoTime(u.InitiatedNs)})
		out.NextKeyMarker, out.NextUploadIDMarker = u.Key, u.UploadId
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}
