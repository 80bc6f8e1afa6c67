package s3

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"cairn/client"
	"cairn/errors"
	"cairn/meta"
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
	class, err := s.classes.class(q.r.Header.Get("X-Amz-Storage-Class"))
	if err != nil {
		return err
	}
	tags, err := parseTagging(q.r.Header.Get("X-Amz-Tagging"))
	if err != nil {
		return err
	}
	// Parts are verified against the checksums they carry; the
	// algorithm is echoed as S3 does, so SDKs go on to send them.
	algo := strings.ToUpper(q.r.Header.Get("X-Amz-Checksum-Algorithm"))
	if _, ok := checksumAlgos[textproto.CanonicalMIMEHeaderKey("X-Amz-Checksum-"+algo)]; algo != "" && !ok {
		return errInvalidRequest("Checksum algorithm provided is unsupported. Please try again with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]")
	}
	u, err := s.meta.S3CreateUpload(q.ctx(), &metapb.S3Upload{
		Bucket: q.bucket, Key: ref.Key, Owner: q.p.access,
		ContentType: ct, UserMeta: user, Headers: std, Tags: tags,
		StorageClass: class, UploadId: uploadID(class), // class.go
	})
	if err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	if algo != "" {
		q.w.Header().Set("X-Amz-Checksum-Algorithm", algo)
		if t := q.r.Header.Get("X-Amz-Checksum-Type"); t != "" {
			q.w.Header().Set("X-Amz-Checksum-Type", t)
		}
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
	if _, err := s.authorize(q, write); err != nil {
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
	if class := uploadClass(ref.UploadId); class != "" { // class.go
		q.r = q.r.WithContext(client.WithStorageClass(q.r.Context(), class))
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
		if off, n, err = copySourceRange(h, size); err != nil {
			return err
		}
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

// copySourceRange parses x-amz-copy-source-range, which unlike Range is
// exactly "bytes=first-last" within the source: S3 refuses a range that
// runs past the source's end rather than clamping it.
func copySourceRange(h string, size int64) (off, n int64, err error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	first, last, ok2 := strings.Cut(spec, "-")
	a, errA := strconv.ParseInt(first, 10, 64)
	b, errB := strconv.ParseInt(last, 10, 64)
	if !ok || !ok2 || errA != nil || errB != nil || a < 0 || b < a {
		return 0, 0, apiErr(http.StatusBadRequest, "InvalidArgument", "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy")
	}
	if b >= size {
		return 0, 0, apiErr(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable: the source object is "+strconv.FormatInt(size, 10)+" bytes")
	}
	return a, b - a + 1, nil
}

func (s *Server) completeUpload(q *request) error {
	if _, err := s.authorize(q, write); err != nil {
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
	inm, err := ifNoneMatchStar(q.r.Header)
	if err != nil {
		return err
	}
	req := &metapb.S3CompleteRequest{Upload: ref, MinPartSize: uint64(s.cfg.MinPartSize),
		IfNoneMatch: inm, IfMatch: strings.Trim(q.r.Header.Get("If-Match"), `" `)}
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
	size, err := s.checkParts(q, ref, req)
	if mp := q.r.Header.Get("X-Amz-Mp-Object-Size"); err == nil && mp != "" && mp != strconv.FormatInt(size, 10) {
		return apiErr(http.StatusBadRequest, "InvalidRequest", "x-amz-mp-object-size is not the size of the parts listed ("+strconv.FormatInt(size, 10)+")")
	}
	if err != nil && toAPI(err).code == "NoSuchUpload" {
		if done := s.completed(q, req); done != nil {
			return s.writeCompleted(q, done)
		}
	}
	if err != nil {
		return err
	}
	ino, err := s.client.CompleteUpload(q.ctx(), req)
	if err != nil {
		if errors.Is(errors.Precondition, err) {
			return apiErr(http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
		}
		if errors.Is(errors.Invalid, err) {
			return apiErr(http.StatusBadRequest, "InvalidPart", err.Error())
		}
		return s.keyError(notExistAs(err, errNoSuchUpload()))
	}
	return s.writeCompleted(q, ino)
}

func (s *Server) writeCompleted(q *request, ino *metapb.Inode) error {
	setVersionHeader(q.w.Header(), versionIDOf(s.bucketNS(q), ino))
	writeXML(q.w, http.StatusOK, completeMultipartUploadResult{
		Xmlns: s3NS, Location: "/" + q.bucket + "/" + q.key, Bucket: q.bucket, Key: q.key, ETag: etagOf(ino),
	})
	return nil
}

// completed returns the object a repeated CompleteMultipartUpload made,
// or nil. S3 answers a retried completion (its first answer lost) with
// 200: the upload is gone, but the key holds the object that exactly
// this list of parts makes, which its multipart ETag shows.
func (s *Server) completed(q *request, req *metapb.S3CompleteRequest) *metapb.Inode {
	sums := make([][]byte, 0, len(req.Parts))
	for _, p := range req.Parts {
		sum, err := hex.DecodeString(p.Etag)
		if err != nil {
			return nil
		}
		sums = append(sums, sum)
	}
	f, err := s.stat(q)
	if err != nil || f.IsDir() || f.Inode.Etag != meta.MultipartETag(sums) {
		return nil
	}
	return f.Inode
}

// checkParts compares the completion list with the uploaded parts.
// It returns the size of the object the parts make.
func (s *Server) checkParts(q *request, ref *metapb.S3UploadRequest, req *metapb.S3CompleteRequest) (int64, error) {
	have := map[uint32]*metapb.S3Part{}
	var after uint32
	for {
		l, err := s.meta.S3ListParts(q.ctx(), &metapb.S3ListPartsRequest{Upload: ref, After: after, Limit: 1000})
		if err != nil {
			return 0, notExistAs(err, errNoSuchUpload())
		}
		for _, p := range l.Parts {
			have[p.Number] = p
			after = p.Number
		}
		if !l.Truncated || len(l.Parts) == 0 {
			break
		}
	}
	var size int64
	for i, cp := range req.Parts {
		p := have[cp.Number]
		if p == nil || p.Etag != cp.Etag {
			return 0, apiErr(http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.")
		}
		if i < len(req.Parts)-1 && int64(p.Size) < s.cfg.MinPartSize {
			return 0, apiErr(http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.")
		}
		size += int64(p.Size)
	}
	return size, nil
}

func (s *Server) abortUpload(q *request) error {
	if _, err := s.authorize(q, write); err != nil {
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
	if _, err := s.authorize(q, read); err != nil {
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
		Initiator: ownerOf(l.Upload.Owner), Owner: ownerOf(l.Upload.Owner), StorageClass: s.classes.nameOf(l.Upload.StorageClass),
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
	if _, err := s.authorize(q, read); err != nil {
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
	enc := v.Get("encoding-type")
	esc := func(s string) string { return s }
	switch enc {
	case "":
	case "url":
		esc = urlEncode
	default:
		return apiErr(http.StatusBadRequest, "InvalidArgument", "Invalid Encoding Method specified in Request")
	}
	out := listMultipartUploadsResult{
		Xmlns: s3NS, Bucket: q.bucket, KeyMarker: esc(v.Get("key-marker")), UploadIDMarker: v.Get("upload-id-marker"),
		Prefix: esc(v.Get("prefix")), MaxUploads: maxUploads, IsTruncated: l.Truncated, EncodingType: enc,
	}
	// A delimiter groups keys into common prefixes, within the page meta
	// returned (its markers stay exact: they are the last upload seen).
	delim, prefix := v.Get("delimiter"), v.Get("prefix")
	out.Delimiter = esc(delim)
	lastCP := ""
	for _, u := range l.Uploads {
		rest, under := strings.CutPrefix(u.Key, prefix)
		if i := strings.Index(rest, delim); delim != "" && under && i >= 0 {
			cp := prefix + rest[:i+len(delim)]
			if cp != lastCP {
				out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: esc(cp)})
				lastCP = cp
			}
			out.NextKeyMarker, out.NextUploadIDMarker = esc(u.Key), u.UploadId
			continue
		}
		out.Uploads = append(out.Uploads, uploadXML{Key: esc(u.Key), UploadID: u.UploadId, Initiator: ownerOf(u.Owner),
			Owner: ownerOf(u.Owner), StorageClass: s.classes.nameOf(u.StorageClass), Initiated: isoTime(u.InitiatedNs)})
		out.NextKeyMarker, out.NextUploadIDMarker = esc(u.Key), u.UploadId
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}
