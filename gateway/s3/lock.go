package s3

import (
	"net/http"
	"strings"
	"time"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// Object lock (S3's WORM): a bucket created with it keeps versions that a
// retention or legal hold protects. Meta enforces it where versions are
// deleted (meta/versions.go); here are its configuration calls.

func errNoLockConfig() *apiError {
	return apiErr(http.StatusNotFound, "ObjectLockConfigurationNotFoundError", "Object Lock configuration does not exist for this bucket")
}

// lockHeaders sends a version's lock state, as GET and HEAD do.
func lockHeaders(h http.Header, n *metapb.Inode) {
	if r := n.GetS3Retention(); r != nil && r.Mode != "" {
		h["X-Amz-Object-Lock-Mode"] = []string{r.Mode}
		h["X-Amz-Object-Lock-Retain-Until-Date"] = []string{time.Unix(0, r.UntilNs).UTC().Format(time.RFC3339)}
	}
	if n.GetS3LegalHold() {
		h["X-Amz-Object-Lock-Legal-Hold"] = []string{"ON"}
	}
}

func hasLockHeaders(h http.Header) bool {
	return h.Get("X-Amz-Object-Lock-Mode") != "" || h.Get("X-Amz-Object-Lock-Retain-Until-Date") != "" ||
		h.Get("X-Amz-Object-Lock-Legal-Hold") != ""
}

// lockHeadersIn reads PutObject's x-amz-object-lock-* headers: a mode
// with a date, and a legal hold. Meta refuses them in a bucket without
// object lock.
func lockHeadersIn(h http.Header) (*metapb.S3Retention, bool, error) {
	mode, until, hold := h.Get("X-Amz-Object-Lock-Mode"), h.Get("X-Amz-Object-Lock-Retain-Until-Date"), h.Get("X-Amz-Object-Lock-Legal-Hold")
	var r *metapb.S3Retention
	if mode != "" || until != "" {
		t, err := time.Parse(time.RFC3339, until)
		if err != nil || mode != "GOVERNANCE" && mode != "COMPLIANCE" {
			return nil, false, apiErr(http.StatusBadRequest, "InvalidArgument", "x-amz-object-lock-mode (GOVERNANCE or COMPLIANCE) and x-amz-object-lock-retain-until-date (ISO 8601) go together")
		}
		if !t.After(time.Now()) {
			return nil, false, apiErr(http.StatusBadRequest, "InvalidArgument", "The retain until date must be in the future!")
		}
		r = &metapb.S3Retention{Mode: mode, UntilNs: t.UnixNano()}
	}
	switch hold {
	case "", "OFF":
		return r, false, nil
	case "ON":
		return r, true, nil
	}
	return nil, false, apiErr(http.StatusBadRequest, "InvalidArgument", "x-amz-object-lock-legal-hold must be ON or OFF")
}

func isoHTTP(ns int64) string { return time.Unix(0, ns).UTC().Format(http.TimeFormat) }

// lockOnCreate is CreateBucket's x-amz-bucket-object-lock-enabled.
func lockOnCreate(h http.Header) (bool, error) {
	switch v := strings.ToLower(h.Get("X-Amz-Bucket-Object-Lock-Enabled")); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, apiErr(http.StatusBadRequest, "InvalidArgument", "x-amz-bucket-object-lock-enabled must be true or false")
}

// parseLockConfig reads an ObjectLockConfiguration body.
func parseLockConfig(b *body) (*metapb.S3VersioningRequest, error) {
	var in objectLockConfiguration
	if err := readXML(b, &in); err != nil {
		return nil, err
	}
	if in.ObjectLockEnabled != "Enabled" {
		return nil, errMalformedXML()
	}
	req := &metapb.S3VersioningRequest{ObjectLock: true, SetDefaultRetention: true}
	if in.Rule != nil {
		d := in.Rule.DefaultRetention
		if d.Mode != "GOVERNANCE" && d.Mode != "COMPLIANCE" || (d.Days == nil) == (d.Years == nil) {
			return nil, errMalformedXML()
		}
		r := &metapb.S3Retention{Mode: d.Mode}
		switch {
		case d.Days != nil && *d.Days > 0 && *d.Days <= 36500:
			r.Days = uint32(*d.Days)
		case d.Years != nil && *d.Years > 0 && *d.Years <= 100:
			r.Years = uint32(*d.Years)
		default:
			return nil, apiErr(http.StatusBadRequest, "InvalidArgument", "Default retention period must be a positive integer value")
		}
		req.DefaultRetention = r
	}
	return req, nil
}

func (s *Server) putObjectLockConfig(q *request) error {
	n, err := s.authorize(q, write)
	if err != nil {
		return err
	}
	req, err := parseLockConfig(q.body)
	if err != nil {
		return err
	}
	if !n.S3ObjectLock {
		// S3 turns lock on for an existing bucket only when versioning is on.
		if n.S3Versioning != metapb.S3Versioning_S3_VERSIONING_ENABLED {
			return apiErr(http.StatusConflict, "InvalidBucketState", "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration")
		}
	}
	req.Ns = q.bucket
	if _, err := s.client.SetVersioning(q.ctx(), req); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) getObjectLockConfig(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	if !n.S3ObjectLock {
		return errNoLockConfig()
	}
	out := objectLockConfiguration{Xmlns: s3NS, ObjectLockEnabled: "Enabled"}
	if d := n.S3DefaultRetention; d != nil && d.Mode != "" {
		out.Rule = &struct {
			DefaultRetention struct {
				Mode  string `xml:"Mode"`
				Days  *int   `xml:"Days,omitempty"`
				Years *int   `xml:"Years,omitempty"`
			} `xml:"DefaultRetention"`
		}{}
		out.Rule.DefaultRetention.Mode = d.Mode
		if d.Days > 0 {
			v := int(d.Days)
			out.Rule.DefaultRetention.Days = &v
		} else {
			v := int(d.Years)
			out.Rule.DefaultRetention.Years = &v
		}
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

// lockTarget checks access and the key for a retention or legal hold call.
func (s *Server) lockTarget(q *request, a access) (string, error) {
	n, err := s.authorize(q, a)
	if err != nil {
		return "", err
	}
	if !n.S3ObjectLock {
		return "", errInvalidRequest("Bucket is missing Object Lock Configuration")
	}
	p, dir, err := cleanKey(q.key)
	if err != nil {
		return "", err
	}
	if dir || p == "" {
		return "", apiErr(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	}
	if vid := q.query.Get("versionId"); vid != "" {
		if _, _, err := meta.ParseVersionID(vid); err != nil {
			return "", errInvalidVersion()
		}
	}
	return p, nil
}

// lockVersion reads the version a lock call names.
func (s *Server) lockVersion(q *request, p string) (*metapb.Inode, error) {
	vid := q.query.Get("versionId")
	v, err := s.meta.S3GetVersion(q.ctx(), &metapb.S3VersionRequest{Ns: q.bucket, Path: p, VersionId: vid})
	switch {
	case errors.Is(errors.NotExist, err) && vid != "":
		return nil, errNoSuchVersion()
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err):
		return nil, apiErr(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	case err != nil:
		return nil, err
	case v.DeleteMarker:
		return nil, apiErr(http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
	}
	return v.Inode, nil
}

func (s *Server) setLock(q *request, req *metapb.S3LockRequest) error {
	req.Ns, req.VersionId = q.bucket, q.query.Get("versionId")
	v, err := s.client.SetLock(q.ctx(), req)
	switch {
	case errors.Is(errors.Permission, err):
		return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied because object protected by object lock.")
	case errors.Is(errors.NotExist, err) && req.VersionId != "":
		return errNoSuchVersion()
	case errors.Is(errors.NotExist, err):
		return apiErr(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	case err != nil:
		return err
	}
	setVersionHeader(q.w.Header(), versionIDOfRecord(v))
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// lockBody checks a PUT ?retention or ?legal-hold and reads its body.
func (s *Server) lockBody(q *request, in any) (string, error) {
	p, err := s.lockTarget(q, write)
	if err != nil {
		return "", err
	}
	return p, readXML(q.body, in)
}

// lockRead checks a GET ?retention or ?legal-hold and reads its version.
func (s *Server) lockRead(q *request) (*metapb.Inode, error) {
	p, err := s.lockTarget(q, read)
	if err != nil {
		return nil, err
	}
	return s.lockVersion(q, p)
}

func (s *Server) putObjectRetention(q *request) error {
	var in retentionXML
	p, err := s.lockBody(q, &in)
	if err != nil {
		return err
	}
	req := &metapb.S3LockRequest{Path: p, SetRetention: true, BypassGovernance: s.bypass(q)}
	if in.Mode != "" || in.RetainUntilDate != "" {
		until, err := time.Parse(time.RFC3339, in.RetainUntilDate)
		if err != nil || in.Mode != "GOVERNANCE" && in.Mode != "COMPLIANCE" {
			return errMalformedXML()
		}
		if !until.After(time.Now()) {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "The retain until date must be in the future!")
		}
		req.Retention = &metapb.S3Retention{Mode: in.Mode, UntilNs: until.UnixNano()}
	}
	return s.setLock(q, req)
}

func (s *Server) getObjectRetention(q *request) error {
	n, err := s.lockRead(q)
	if err != nil {
		return err
	}
	r := n.S3Retention
	if r == nil || r.Mode == "" {
		return apiErr(http.StatusNotFound, "NoSuchObjectLockConfiguration", "The specified object does not have a ObjectLock configuration")
	}
	writeXML(q.w, http.StatusOK, retentionXML{Xmlns: s3NS, Mode: r.Mode, RetainUntilDate: time.Unix(0, r.UntilNs).UTC().Format(time.RFC3339)})
	return nil
}

func (s *Server) putObjectLegalHold(q *request) error {
	var in legalHoldXML
	p, err := s.lockBody(q, &in)
	if err != nil {
		return err
	}
	if in.Status != "ON" && in.Status != "OFF" {
		return errMalformedXML()
	}
	return s.setLock(q, &metapb.S3LockRequest{Path: p, SetLegalHold: true, LegalHold: in.Status == "ON"})
}

func (s *Server) getObjectLegalHold(q *request) error {
	n, err := s.lockRead(q)
	if err != nil {
		return err
	}
	st := "OFF"
	if n.S3LegalHold {
		st = "ON"
	}
	writeXML(q.w, http.StatusOK, legalHoldXML{Xmlns: s3NS, Status: st})
	return nil
}
