package s3

import (
	"encoding/xml"
	"io"
	"net/http"

	"cairn/gateway/s3/policy"
	"cairn/proto/metapb"
)

// Bucket policies, PublicAccessBlock and ownership controls: kept in the
// bucket's S3 configuration in meta (replicated with it), enforced by
// authorize (access.go). Only the bucket's owner (or root) reads or
// changes them.

const ownerEnforced = "BucketOwnerEnforced"

// ownerConfig authorizes a configuration call of the bucket's owner and
// returns the bucket's configuration.
func (s *Server) ownerConfig(q *request, a access) (*metapb.S3BucketConfig, error) {
	n, err := s.authorize(q, a)
	if err != nil {
		return nil, err
	}
	if !q.p.root && n.Owner != q.p.access {
		return nil, errAccessDenied()
	}
	cfg, err := s.meta.S3GetBucketConfig(q.ctx(), &metapb.NamespaceRequest{Name: q.bucket})
	return cfg, notExistAs(err, errNoSuchBucket())
}

func (s *Server) putConfig(q *request, cfg *metapb.S3BucketConfig, status int) error {
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	s.states.drop(q.bucket)
	q.w.WriteHeader(status)
	return nil
}

func errMalformedPolicy(msg string) error {
	return apiErr(http.StatusBadRequest, "MalformedPolicy", msg)
}

func errNoSuchPolicy() error {
	return apiErr(http.StatusNotFound, "NoSuchBucketPolicy", "The bucket policy does not exist")
}

func (s *Server) putBucketPolicy(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(q.body.r, policy.MaxSize+1))
	if err != nil {
		return toAPIErr(err)
	}
	if len(data) == 0 {
		return errMalformedPolicy("Policies must be valid JSON and the first byte must be '{'")
	}
	pol, err := policy.Parse(data, q.bucket)
	if err != nil {
		return errMalformedPolicy(err.Error())
	}
	if pol.Public() && cfg.GetPublicAccessBlock().GetBlockPublicPolicy() {
		return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied: the bucket's PublicAccessBlock has BlockPublicPolicy and this policy is public")
	}
	cfg.Policy = string(data)
	return s.putConfig(q, cfg, http.StatusNoContent)
}

func (s *Server) getBucketPolicy(q *request) error {
	cfg, err := s.ownerConfig(q, read)
	if err != nil {
		return err
	}
	if cfg.Policy == "" {
		return errNoSuchPolicy()
	}
	q.w.Header().Set("Content-Type", "application/json")
	q.w.WriteHeader(http.StatusOK)
	io.WriteString(q.w, cfg.Policy)
	return nil
}

func (s *Server) deleteBucketPolicy(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	cfg.Policy = ""
	return s.putConfig(q, cfg, http.StatusNoContent)
}

type policyStatus struct {
	XMLName  xml.Name `xml:"PolicyStatus"`
	Xmlns    string   `xml:"xmlns,attr"`
	IsPublic bool     `xml:"IsPublic"`
}

func (s *Server) getBucketPolicyStatus(q *request) error {
	cfg, err := s.ownerConfig(q, read)
	if err != nil {
		return err
	}
	if cfg.Policy == "" {
		return errNoSuchPolicy()
	}
	pol, err := policy.Parse([]byte(cfg.Policy), q.bucket)
	if err != nil {
		return err
	}
	writeXML(q.w, http.StatusOK, policyStatus{Xmlns: s3NS, IsPublic: pol.Public()})
	return nil
}

type publicAccessBlock struct {
	XMLName               xml.Name `xml:"PublicAccessBlockConfiguration"`
	Xmlns                 string   `xml:"xmlns,attr,omitempty"`
	BlockPublicAcls       bool     `xml:"BlockPublicAcls"`
	IgnorePublicAcls      bool     `xml:"IgnorePublicAcls"`
	BlockPublicPolicy     bool     `xml:"BlockPublicPolicy"`
	RestrictPublicBuckets bool     `xml:"RestrictPublicBuckets"`
}

func (s *Server) putPublicAccessBlock(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	var in publicAccessBlock
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	cfg.PublicAccessBlock = &metapb.S3PublicAccessBlock{
		BlockPublicAcls: in.BlockPublicAcls, IgnorePublicAcls: in.IgnorePublicAcls,
		BlockPublicPolicy: in.BlockPublicPolicy, RestrictPublicBuckets: in.RestrictPublicBuckets,
	}
	return s.putConfig(q, cfg, http.StatusOK)
}

func (s *Server) getPublicAccessBlock(q *request) error {
	cfg, err := s.ownerConfig(q, read)
	if err != nil {
		return err
	}
	b := cfg.PublicAccessBlock
	if b == nil {
		return apiErr(http.StatusNotFound, "NoSuchPublicAccessBlockConfiguration", "The public access block configuration was not found")
	}
	writeXML(q.w, http.StatusOK, publicAccessBlock{Xmlns: s3NS,
		BlockPublicAcls: b.BlockPublicAcls, IgnorePublicAcls: b.IgnorePublicAcls,
		BlockPublicPolicy: b.BlockPublicPolicy, RestrictPublicBuckets: b.RestrictPublicBuckets})
	return nil
}

func (s *Server) deletePublicAccessBlock(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	cfg.PublicAccessBlock = nil
	return s.putConfig(q, cfg, http.StatusNoContent)
}

type ownershipControls struct {
	XMLName xml.Name `xml:"OwnershipControls"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Rules   []struct {
		ObjectOwnership string `xml:"ObjectOwnership"`
	} `xml:"Rule"`
}

func (s *Server) putOwnershipControls(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	var in ownershipControls
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	if len(in.Rules) != 1 {
		return errMalformedXML()
	}
	if err := checkOwnership(in.Rules[0].ObjectOwnership); err != nil {
		return err
	}
	n, err := s.client.Namespace(q.ctx(), q.bucket)
	if err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	if n.Visibility != metapb.Visibility_PRIVATE {
		return errACLWithOwnership()
	}
	cfg.ObjectOwnership = ownerEnforced
	return s.putConfig(q, cfg, http.StatusOK)
}

// checkOwnership accepts the one object ownership Cairn has: objects are
// always their bucket's owner's.
func checkOwnership(v string) error {
	switch v {
	case ownerEnforced:
		return nil
	case "BucketOwnerPreferred", "ObjectWriter":
		return errNotImplemented("object ownership " + v + " is not supported: objects always belong to the bucket's owner (BucketOwnerEnforced)")
	}
	return errMalformedXML()
}

func errACLWithOwnership() error {
	return apiErr(http.StatusBadRequest, "InvalidBucketAclWithObjectOwnership", "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting")
}

func errACLNotSupported() error {
	return apiErr(http.StatusBadRequest, "AccessControlListNotSupported", "The bucket does not allow ACLs")
}

func (s *Server) getOwnershipControls(q *request) error {
	cfg, err := s.ownerConfig(q, read)
	if err != nil {
		return err
	}
	if cfg.ObjectOwnership == "" {
		return apiErr(http.StatusNotFound, "OwnershipControlsNotFoundError", "The bucket ownership controls were not found")
	}
	out := ownershipControls{Xmlns: s3NS}
	out.Rules = append(out.Rules, struct {
		ObjectOwnership string `xml:"ObjectOwnership"`
	}{cfg.ObjectOwnership})
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteOwnershipControls(q *request) error {
	cfg, err := s.ownerConfig(q, write)
	if err != nil {
		return err
	}
	cfg.ObjectOwnership = ""
	return s.putConfig(q, cfg, http.StatusNoContent)
}

// checkACL decides whether the request may set an ACL of visibility vis
// (canned: the x-amz-acl asked for, "" for a grant body) on the bucket:
// with ownership BucketOwnerEnforced ACLs are disabled but for the
// owner's own, and a PublicAccessBlock with BlockPublicAcls refuses
// public ones.
func (s *Server) checkACL(q *request, vis metapb.Visibility, canned string) error {
	st, err := s.state(q, q.bucket)
	if err != nil {
		return err
	}
	if st.cfg.GetObjectOwnership() == ownerEnforced && (vis != metapb.Visibility_PRIVATE ||
		canned != "" && canned != "private" && canned != "bucket-owner-full-control") {
		return errACLNotSupported()
	}
	if vis != metapb.Visibility_PRIVATE && st.cfg.GetPublicAccessBlock().GetBlockPublicAcls() {
		return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied: the bucket's PublicAccessBlock has BlockPublicAcls")
	}
	return nil
}
