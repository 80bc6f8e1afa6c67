package s3

import (
	"encoding/base64"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// Buckets are namespaces: the same names, owners and visibility, so a
// bucket made over S3 is a namespace of the native API and the mount.

func (s *Server) listBuckets(q *request) error {
	if q.p.access == "" {
		return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied")
	}
	v := q.query
	limit := maxBuckets
	if mb := v.Get("max-buckets"); mb != "" {
		n, err := strconv.Atoi(mb)
		if err != nil || n < 1 || n > maxBuckets {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "max-buckets must be an integer from 1 to 10000")
		}
		limit = n
	}
	after := ""
	if t := v.Get("continuation-token"); t != "" {
		b, err := base64.RawURLEncoding.DecodeString(t)
		if err != nil || len(b) == 0 {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
		}
		after = string(b)
	}
	prefix := v.Get("prefix")
	all, err := s.client.ListNamespaces(q.ctx())
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	out := listAllMyBucketsResult{Xmlns: s3NS, Owner: ownerOf(q.p.access), Buckets: []bucketInfo{}, Prefix: prefix}
	for _, n := range all {
		// Like S3, a key sees the buckets it owns, plus those it was
		// granted; public buckets of others are readable, not listed.
		if n.Name <= after || !strings.HasPrefix(n.Name, prefix) ||
			!(q.p.root || n.Owner == q.p.access || q.p.grants[n.Name] != metapb.S3Access_S3_NONE) {
			continue
		}
		if len(out.Buckets) == limit {
			out.ContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(out.Buckets[limit-1].Name))
			break
		}
		out.Buckets = append(out.Buckets, bucketInfo{Name: n.Name, CreationDate: isoTime(n.CreatedNs)})
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

// maxBuckets is the largest page of ListBuckets, as S3's.
const maxBuckets = 10000

func ownerOf(access string) owner { return owner{ID: access, DisplayName: access} }

func invalidBucketName(err error) error {
	if err == nil {
		return nil
	}
	return apiErr(http.StatusBadRequest, "InvalidBucketName", "The specified bucket is not valid: "+err.Error())
}

func cannedVisibility(acl string) (metapb.Visibility, error) {
	switch acl {
	case "", "private":
		return metapb.Visibility_PRIVATE, nil
	case "public-read":
		return metapb.Visibility_PUBLIC_READ, nil
	}
	return 0, errNotImplemented("only the canned ACLs private and public-read are supported")
}

func (s *Server) createBucket(q *request) error {
	if q.p.access == "" {
		return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied")
	}
	if err := pathname.ValidNamespace(q.bucket); err != nil {
		return invalidBucketName(err)
	}
	vis, err := cannedVisibility(q.r.Header.Get("X-Amz-Acl"))
	if err != nil {
		return err
	}
	lock, err := lockOnCreate(q.r.Header)
	if err != nil {
		return err
	}
	ownership := q.r.Header.Get("X-Amz-Object-Ownership")
	if ownership != "" {
		if err := checkOwnership(ownership); err != nil {
			return err
		}
		if vis != metapb.Visibility_PRIVATE {
			return errACLWithOwnership()
		}
	}
	// The body may name a location; any is accepted (one region).
	if q.body.size != 0 {
		var c createBucketConfiguration
		if err := readXML(q.body, &c); err != nil {
			return err
		}
	}
	_, err = s.client.CreateNamespace(q.ctx(), q.bucket, q.p.access, vis)
	if errors.Is(errors.Exist, err) {
		n, nerr := s.client.Namespace(q.ctx(), q.bucket)
		if nerr == nil && (n.Owner == q.p.access || q.p.root) {
			return apiErr(http.StatusConflict, "BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.")
		}
		return apiErr(http.StatusConflict, "BucketAlreadyExists", "The requested bucket name is not available.")
	}
	if err != nil {
		return err
	}
	if lock {
		// Object lock needs versioning; S3 turns both on at creation.
		if _, err := s.client.SetVersioning(q.ctx(), &metapb.S3VersioningRequest{
			Ns: q.bucket, State: metapb.S3Versioning_S3_VERSIONING_ENABLED, ObjectLock: true,
		}); err != nil {
			return err
		}
	}
	if ownership != "" {
		cfg := &metapb.S3BucketConfig{Bucket: q.bucket, ObjectOwnership: ownership}
		if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
			return err
		}
		s.states.drop(q.bucket)
	}
	q.w.Header().Set("Location", "/"+q.bucket)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) headBucket(q *request) error {
	if _, err := s.authorize(q, read); err != nil {
		return err
	}
	q.w.Header().Set("X-Amz-Bucket-Region", s.cfg.Region)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) deleteBucket(q *request) error {
	if _, err := s.authorize(q, write); err != nil {
		return err
	}
	if err := s.client.DeleteNamespace(q.ctx(), q.bucket); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	// Meta deleted the bucket's S3 configuration with the namespace.
	s.cors.drop(q.bucket)
	s.states.drop(q.bucket)
	s.abortAll(q)
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

// abortAll aborts the uploads left in a deleted bucket.
func (s *Server) abortAll(q *request) {
	l, err := s.meta.S3ListUploads(q.ctx(), &metapb.S3ListUploadsRequest{Bucket: q.bucket, Limit: 1000})
	if err != nil {
		return
	}
	for _, u := range l.Uploads {
		s.meta.S3AbortUpload(q.ctx(), &metapb.S3UploadRequest{Bucket: u.Bucket, Key: u.Key, UploadId: u.UploadId})
	}
}

func (s *Server) getBucketLocation(q *request) error {
	if _, err := s.authorize(q, read); err != nil {
		return err
	}
	region := s.cfg.Region
	if region == "us-east-1" {
		region = "" // what S3 answers for us-east-1
	}
	writeXML(q.w, http.StatusOK, locationConstraint{Xmlns: s3NS, Region: region})
	return nil
}

// bucketConfig reads the bucket's S3 configuration (CORS, tags) after
// checking access.
func (s *Server) bucketConfig(q *request, a access) (*metapb.S3BucketConfig, error) {
	if _, err := s.authorize(q, a); err != nil {
		return nil, err
	}
	cfg, err := s.meta.S3GetBucketConfig(q.ctx(), &metapb.NamespaceRequest{Name: q.bucket})
	return cfg, notExistAs(err, errNoSuchBucket())
}

// sortedKeys is a map's keys in order (stable XML output).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
