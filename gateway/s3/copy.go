package s3

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"cairn/client"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// CopyObject shares the source's needles: no byte is copied (see
// meta/s3objects.go for how shared needles are counted).

// copySource parses x-amz-copy-source: "[/]bucket/key[?versionId=v]",
// URL-encoded.
func copySource(h http.Header) (bucket, key, version string, err error) {
	src := h.Get("X-Amz-Copy-Source")
	if i := strings.Index(src, "?"); i >= 0 {
		v, perr := url.ParseQuery(src[i+1:])
		if perr != nil || len(v) > 1 || len(v) == 1 && len(v["versionId"]) != 1 {
			return "", "", "", errInvalidRequest("x-amz-copy-source takes only ?versionId=")
		}
		if version = v.Get("versionId"); len(v) == 1 {
			if _, _, err := meta.ParseVersionID(version); err != nil {
				return "", "", "", errInvalidVersion()
			}
		}
		src = src[:i]
	}
	dec, err := url.PathUnescape(src)
	if err != nil {
		return "", "", "", errInvalidRequest("bad x-amz-copy-source")
	}
	bucket, key, ok := strings.Cut(strings.TrimPrefix(dec, "/"), "/")
	if !ok || bucket == "" || key == "" {
		return "", "", "", errInvalidRequest("x-amz-copy-source must be bucket/key")
	}
	return bucket, key, version, nil
}

// copyFrom resolves and authorizes a copy source (a file, or with dirOK
// a folder marker too) and checks the x-amz-copy-source-if-* conditions.
func (s *Server) copyFrom(q *request, dirOK bool) (*client.File, string, string, error) {
	sb, sk, sv, err := copySource(q.r.Header)
	if err != nil {
		return nil, "", "", err
	}
	action := "s3:GetObject"
	if sv != "" {
		action = "s3:GetObjectVersion"
	}
	if _, err := s.authorizeOn(q, sb, sk, action, read); err != nil {
		return nil, "", "", err
	}
	var f *client.File
	if sv != "" {
		f, err = s.sourceVersion(q, sb, sk, sv)
	} else {
		f, err = s.statKey(q, sb, sk)
	}
	if err != nil {
		return nil, "", "", err
	}
	if f.IsDir() && !dirOK {
		return nil, "", "", errInvalidRequest("the copy source is a directory")
	}
	mtime := time.Unix(0, f.Inode.MtimeNs).UTC()
	if condition(q.r.Header, etagOf(f.Inode), mtime, "X-Amz-Copy-Source-") != 0 {
		return nil, "", "", apiErr(http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
	}
	return f, sb, sk, nil
}

func (s *Server) copyObject(q *request) error {
	if err := s.authorizeObjectWrite(q); err != nil {
		return err
	}
	dst, dir, err := cleanKey(q.key)
	if err != nil {
		return err
	}
	f, sb, _, err := s.copyFrom(q, dir)
	if err != nil {
		return err
	}
	if dir != f.IsDir() {
		return errInvalidRequest("a folder marker (a key ending in '/') is copied only from and onto another")
	}
	if dir {
		return s.copyFolder(q, dst)
	}
	h := q.r.Header
	req := &metapb.S3CopyRequest{
		SrcNs: sb, SrcPath: f.Path, DstNs: q.bucket, DstPath: dst,
		SrcIfMatch: f.Inode.Etag, SrcVersion: f.Inode.Version,
	}
	if f.Inode.Ino == 0 { // a stored version: immutable, named by its id
		req.SrcVersion, req.SrcVersionId = 0, versionIDOf(nil, f.Inode)
		if req.SrcVersionId == "" {
			req.SrcVersionId = "null"
		}
		q.w.Header()["X-Amz-Copy-Source-Version-Id"] = []string{req.SrcVersionId}
	}
	toClass, err := s.copyClass(q, sb, f) // class.go
	if err != nil {
		return err
	}
	switch h.Get("X-Amz-Metadata-Directive") {
	case "", "COPY":
		if sb == q.bucket && f.Path == dst && h.Get("X-Amz-Tagging-Directive") != "REPLACE" && toClass == nil {
			return errInvalidRequest("This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")
		}
	case "REPLACE":
		req.ReplaceMetadata = true
		if req.ContentType, req.UserMeta, req.Headers, err = objectMeta(h); err != nil {
			return err
		}
		// The bytes are the source's, and so are their checksums.
		for k, v := range f.Inode.Headers {
			if strings.HasPrefix(k, "X-Amz-Checksum-") {
				if req.Headers == nil {
					req.Headers = map[string]string{}
				}
				req.Headers[k] = v
			}
		}
	default:
		return apiErr(http.StatusBadRequest, "InvalidArgument", "Unknown metadata directive.")
	}
	switch h.Get("X-Amz-Tagging-Directive") {
	case "", "COPY":
	case "REPLACE":
		req.ReplaceTags = true
		if req.Tags, err = parseTagging(h.Get("X-Amz-Tagging")); err != nil {
			return err
		}
	default:
		return apiErr(http.StatusBadRequest, "InvalidArgument", "Unknown tagging directive.")
	}
	var ino *metapb.Inode
	if toClass != nil {
		ino, err = s.copyBytes(q, f, req, *toClass)
	} else {
		ino, err = s.client.Copy(q.ctx(), req)
	}
	if errors.Is(errors.Precondition, err) {
		return apiErr(http.StatusPreconditionFailed, "PreconditionFailed", "the source changed during the copy; retry")
	}
	if err != nil {
		return s.keyError(err)
	}
	setVersionHeader(q.w.Header(), versionIDOf(s.bucketNS(q), ino))
	writeXML(q.w, http.StatusOK, copyObjectResult{Xmlns: s3NS, ETag: etagOf(ino), LastModified: isoTime(ino.MtimeNs)})
	return nil
}

// sourceVersion resolves a copy source's version.
func (s *Server) sourceVersion(q *request, bucket, key, vid string) (*client.File, error) {
	p, dir, err := cleanKey(key)
	if err != nil {
		return nil, err
	}
	if dir {
		return nil, errNoSuchVersion()
	}
	v, err := s.meta.S3GetVersion(q.ctx(), &metapb.S3VersionRequest{Ns: bucket, Path: p, VersionId: vid})
	switch {
	case errors.Is(errors.Invalid, err):
		return nil, errInvalidVersion()
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err), errors.Is(errors.IsDir, err):
		return nil, notExistAs(err, errNoSuchVersion())
	case err != nil:
		return nil, err
	case v.DeleteMarker:
		return nil, errInvalidRequest("The source of a copy request may not specifically refer to a delete marker by version id.")
	}
	return &client.File{NS: bucket, Path: p, Inode: v.Inode, Extents: v.Extents}, nil
}

// copyFolder copies a folder marker: the destination is a directory.
// Directories carry no S3 metadata, so a copy onto itself (which s3fs
// makes to change a directory's mode or times) changes nothing.
func (s *Server) copyFolder(q *request, dst string) error {
	ino, err := s.client.Mkdir(q.ctx(), q.bucket, dst, 0o755)
	if err != nil {
		return s.keyError(err)
	}
	writeXML(q.w, http.StatusOK, copyObjectResult{Xmlns: s3NS, ETag: `"` + emptyMD5 + `"`, LastModified: isoTime(ino.MtimeNs)})
	return nil
}
