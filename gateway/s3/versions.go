package s3

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"strings"

	"cairn/client"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// Versioning: meta keeps the versions (meta/versions.go). The bucket's
// files are the current versions, as every other API sees them; stored
// versions and delete markers are reached here by version id.

func errNoSuchVersion() *apiError {
	return apiErr(http.StatusNotFound, "NoSuchVersion", "The specified version does not exist.")
}

func errInvalidVersion() *apiError {
	return apiErr(http.StatusBadRequest, "InvalidArgument", "Invalid version id specified")
}

// versionIDOf is the id a response names for inode n of bucket ns, or ""
// in a bucket that was never versioned.
func versionIDOf(ns *metapb.Namespace, n *metapb.Inode) string {
	if n.GetS3Version() != 0 {
		return meta.VersionID(n.S3Version)
	}
	if ns != nil && ns.S3Versioning != metapb.S3Versioning_S3_VERSIONING_OFF {
		return "null"
	}
	return ""
}

func setVersionHeader(h http.Header, id string) {
	if id != "" {
		h["X-Amz-Version-Id"] = []string{id}
	}
}

// bucketVersioned reads the bucket's record (cached, kept coherent).
func (s *Server) bucketNS(q *request) *metapb.Namespace {
	n, err := s.client.Namespace(q.ctx(), q.bucket)
	if err != nil {
		return nil
	}
	return n
}

func (s *Server) putBucketVersioning(q *request) error {
	if _, err := s.authorize(q, write); err != nil {
		return err
	}
	var in versioningConfiguration
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	if in.MfaDelete == "Enabled" {
		return errNotImplemented("MFA delete is not supported")
	}
	if in.MfaDelete != "" && in.MfaDelete != "Disabled" {
		return errMalformedXML()
	}
	req := &metapb.S3VersioningRequest{Ns: q.bucket}
	switch in.Status {
	case "Enabled":
		req.State = metapb.S3Versioning_S3_VERSIONING_ENABLED
	case "Suspended":
		req.State = metapb.S3Versioning_S3_VERSIONING_SUSPENDED
	default:
		return errMalformedXML()
	}
	if _, err := s.client.SetVersioning(q.ctx(), req); err != nil {
		if errors.Is(errors.Precondition, err) {
			return apiErr(http.StatusConflict, "InvalidBucketState", "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed.")
		}
		return notExistAs(err, errNoSuchBucket())
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) getBucketVersioning(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	out := versioningConfiguration{Xmlns: s3NS}
	switch n.S3Versioning {
	case metapb.S3Versioning_S3_VERSIONING_ENABLED:
		out.Status = "Enabled"
	case metapb.S3Versioning_S3_VERSIONING_SUSPENDED:
		out.Status = "Suspended"
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

// statVersion resolves the request's key at the version its versionId
// names; without one, the current file. A delete marker answers as S3
// does: 405 with x-amz-delete-marker (404 when it is only the latest).
func (s *Server) statVersion(q *request, ns *metapb.Namespace) (*client.File, error) {
	vid := q.query.Get("versionId")
	if vid == "" {
		f, err := s.stat(q)
		if err != nil && ns.S3Versioning != metapb.S3Versioning_S3_VERSIONING_OFF && toAPI(err).code == "NoSuchKey" {
			if p, _, cerr := cleanKey(q.key); cerr == nil && p != "" {
				if v, verr := s.meta.S3GetVersion(q.ctx(), &metapb.S3VersionRequest{Ns: q.bucket, Path: p}); verr == nil && v.DeleteMarker {
					q.w.Header()["X-Amz-Delete-Marker"] = []string{"true"}
					setVersionHeader(q.w.Header(), versionIDOfRecord(v))
				}
			}
		}
		return f, err
	}
	p, dir, err := cleanKey(q.key)
	if err != nil {
		return nil, err
	}
	if dir {
		return nil, errNoSuchVersion()
	}
	v, err := s.meta.S3GetVersion(q.ctx(), &metapb.S3VersionRequest{Ns: q.bucket, Path: p, VersionId: vid})
	switch {
	case errors.Is(errors.Invalid, err):
		return nil, errInvalidVersion()
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err), errors.Is(errors.IsDir, err):
		return nil, errNoSuchVersion()
	case err != nil:
		return nil, err
	}
	if v.DeleteMarker {
		h := q.w.Header()
		h["X-Amz-Delete-Marker"] = []string{"true"}
		setVersionHeader(h, vid)
		h["Last-Modified"] = []string{isoHTTP(v.Inode.GetMtimeNs())}
		return nil, apiErr(http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	}
	return &client.File{NS: q.bucket, Path: p, Inode: v.Inode, Extents: v.Extents}, nil
}

func versionIDOfRecord(v *metapb.S3Version) string {
	if v.NullId {
		return "null"
	}
	return meta.VersionID(v.Order)
}

// deleteVersion is DeleteObject with a versionId: that version goes for
// good (a locked one stays: AccessDenied).
func (s *Server) deleteObjectVersion(q *request, key, vid string) (*metapb.S3Version, error) {
	p, dir, err := cleanKey(key)
	if err != nil {
		return nil, err
	}
	if _, _, err := meta.ParseVersionID(vid); err != nil {
		return nil, errInvalidVersion()
	}
	if dir || p == "" {
		return &metapb.S3Version{}, nil
	}
	v, err := s.client.DeleteVersion(q.ctx(), &metapb.S3VersionRequest{
		Ns: q.bucket, Path: p, VersionId: vid, BypassGovernance: s.bypass(q),
	})
	switch {
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err), errors.Is(errors.IsDir, err):
		if _, nerr := s.client.Namespace(q.ctx(), q.bucket); errors.Is(errors.NotExist, nerr) {
			return nil, errNoSuchBucket()
		}
		return &metapb.S3Version{}, nil // S3 answers 204 for a version that is not there
	case errors.Is(errors.Permission, err):
		return nil, apiErr(http.StatusForbidden, "AccessDenied", "Access Denied because object protected by object lock.")
	case err != nil:
		return nil, err
	}
	s.removeEmptyParents(q, p)
	return v, nil
}

// bypass reports whether the request asks to bypass GOVERNANCE retention
// and may: the bucket's owner or root.
func (s *Server) bypass(q *request) bool {
	if !strings.EqualFold(q.r.Header.Get("X-Amz-Bypass-Governance-Retention"), "true") {
		return false
	}
	if q.p.root {
		return true
	}
	n := s.bucketNS(q)
	return n != nil && n.Owner == q.p.access
}

// listVersions is ListObjectVersions: meta lists a page in one scan, the
// bucket's files (the current versions, as the tree has them) merged in
// key order with its stored versions and delete markers. Each key's
// current version comes first, then the stored ones newest first.
func (s *Server) listVersions(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	v := q.query
	km, vm := v.Get("key-marker"), v.Get("version-id-marker")
	if vm != "" {
		if km == "" {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "A version-id marker cannot be specified without a key marker.")
		}
		if _, _, err := meta.ParseVersionID(vm); err != nil {
			return errInvalidVersion()
		}
	}
	l, esc, empty, err := s.pageSetup(q, listVersions)
	if err != nil {
		return err
	}
	out := listVersionsResult{
		Xmlns: s3NS, Name: q.bucket, Prefix: esc(l.prefix), KeyMarker: esc(km),
		VersionIDMarker: vm, MaxKeys: l.maxKeys, Delimiter: esc(l.delimiter),
		EncodingType: v.Get("encoding-type"),
	}
	page := &metapb.S3VersionList{}
	if !empty && l.maxKeys > 0 {
		page, err = s.meta.S3ListVersions(q.ctx(), &metapb.S3ListVersionsRequest{
			Ns: q.bucket, Prefix: l.prefix, Delimiter: l.delimiter, KeyMarker: km, VersionIdMarker: vm,
			Limit: uint32(l.maxKeys), WithFiles: true,
		})
		if err != nil {
			return notExistAs(err, errNoSuchBucket())
		}
	}
	own := ownerOf(n.Owner)
	out.IsTruncated = page.More
	out.Versions = make([]versionXML, 0, len(page.Versions))
	for _, r := range page.Versions {
		switch {
		case r.CommonPrefix:
			out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: esc(r.Key)})
		case r.File:
			o := entryXML(&metapb.ListEntry{Name: r.Key, Dir: r.Dir, Inode: r.Inode}, esc, &own)
			size := o.Size
			out.Versions = append(out.Versions, versionXML{
				XMLName: xml.Name{Local: "Version"}, Key: o.Key, VersionID: fileVersionID(n, r.Inode), IsLatest: true,
				LastModified: o.LastModified, ETag: o.ETag, Size: &size, Owner: &own, StorageClass: s.classes.name(n, r.Inode),
			})
		default:
			x := versionXML{
				XMLName: xml.Name{Local: "Version"}, Key: esc(r.Key), VersionID: versionIDOfRecord(r),
				IsLatest: r.Current, LastModified: isoTime(r.Inode.GetMtimeNs()), Owner: &own,
			}
			if r.DeleteMarker {
				x.XMLName.Local = "DeleteMarker"
			} else {
				size := r.Inode.GetSize()
				x.ETag, x.Size, x.StorageClass = etagOf(r.Inode), &size, s.classes.name(n, r.Inode)
			}
			out.Versions = append(out.Versions, x)
		}
	}
	if last := len(page.Versions) - 1; out.IsTruncated && last >= 0 {
		r := page.Versions[last]
		out.NextKeyMarker = esc(r.Key)
		switch {
		case r.File:
			out.NextVersionIDMarker = fileVersionID(n, r.Inode)
		case !r.CommonPrefix:
			out.NextVersionIDMarker = versionIDOfRecord(r)
		}
	}
	var b bytes.Buffer
	b.Grow(256 + 400*len(out.Versions))
	b.WriteString(xml.Header)
	out.appendXML(&b)
	q.w.Header().Set("Content-Type", "application/xml")
	q.w.WriteHeader(http.StatusOK)
	q.w.Write(b.Bytes())
	return nil
}

// fileVersionID is the version id a listing gives the current file n:
// "null" where versionIDOf gives none (a bucket never versioned).
func fileVersionID(ns *metapb.Namespace, n *metapb.Inode) string {
	if id := versionIDOf(ns, n); id != "" {
		return id
	}
	return "null"
}
