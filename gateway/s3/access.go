package s3

import (
	"net/http"
	"net/netip"
	"sync"
	"time"

	"cairn/errors"
	"cairn/gateway/s3/policy"
	"cairn/meta"
	"cairn/proto/metapb"
)

// Access decisions. A request is allowed when
//
//   - the caller is root (never denied, so a policy cannot lock the
//     cluster's administrator out), or
//   - the bucket's policy has no Deny that applies to it (the owner is not
//     denied the policy's own operations, so it can always repair a
//     policy), and either the caller's rights allow it (owner, grant,
//     public-read ACL: meta.Rights) or the policy has an Allow for it.
//
// Rights are meta's own rule, and meta checks them again on every call
// the gateway makes for the caller (meta.OnBehalfOf). What only a policy
// allows, meta cannot know: the gateway has decided it and makes those
// calls as itself (a gateway may act for any user).
//
// The public-read ACL counts for nothing when the bucket's
// PublicAccessBlock has IgnorePublicAcls or its ownership controls are
// BucketOwnerEnforced (ACLs disabled). With RestrictPublicBuckets, a
// public policy's Allows do not apply to anonymous callers.

// bucketState is what access decisions need from a bucket's S3
// configuration, cached for stateTTL: a change made through another
// gateway applies within that time (through this one, at once).
type bucketState struct {
	cfg     *metapb.S3BucketConfig
	pol     *policy.Policy
	expires time.Time
}

type stateCache struct {
	mu sync.Mutex
	m  map[string]bucketState
}

const stateTTL = 5 * time.Second

func (c *stateCache) drop(bucket string) {
	c.mu.Lock()
	delete(c.m, bucket)
	c.mu.Unlock()
}

// state returns bucket's access configuration, read by the gateway as
// itself: an anonymous caller's rights may not reach the configuration
// that grants it access. A bucket that does not exist has none.
func (s *Server) state(q *request, bucket string) (bucketState, error) {
	now := time.Now()
	s.states.mu.Lock()
	e, ok := s.states.m[bucket]
	s.states.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e, nil
	}
	cfg, err := s.meta.S3GetBucketConfig(q.base, &metapb.NamespaceRequest{Name: bucket})
	switch {
	case errors.Is(errors.NotExist, err):
		cfg = &metapb.S3BucketConfig{Bucket: bucket}
	case err != nil:
		// Fail closed: the policy unread may hold a Deny.
		return bucketState{}, err
	}
	e = bucketState{cfg: cfg, expires: now.Add(stateTTL)}
	if cfg.Policy != "" {
		if e.pol, err = policy.Parse([]byte(cfg.Policy), bucket); err != nil {
			// Parsed when put; a stored policy this gateway cannot read
			// (a newer one's) must not be half-enforced.
			return bucketState{}, errors.E(errors.Op("s3.policy"), errors.Corrupt, errors.Path(bucket), "the stored bucket policy does not parse", err)
		}
	}
	s.states.mu.Lock()
	if len(s.states.m) > 10_000 {
		clear(s.states.m)
	}
	s.states.m[bucket] = e
	s.states.mu.Unlock()
	return e, nil
}

// aclsIgnored reports whether the bucket's ACL grants nothing beyond the
// owner's rights.
func (b bucketState) aclsIgnored() bool {
	return b.cfg.GetPublicAccessBlock().GetIgnorePublicAcls() || b.cfg.GetObjectOwnership() == ownerEnforced
}

// authorize decides whether the request may read or write its bucket
// (or its object) for its operation's action.
func (s *Server) authorize(q *request, a access) (*metapb.Namespace, error) {
	return s.authorizeOn(q, q.bucket, q.key, q.action, a)
}

// authorizeOn decides whether the request may do action on bucket's key
// (the bucket itself for a bucket action).
func (s *Server) authorizeOn(q *request, bucket, key, action string, a access) (*metapb.Namespace, error) {
	n, err := s.client.Namespace(q.base, bucket)
	if err != nil {
		return nil, notExistAs(err, errNoSuchBucket())
	}
	p := q.p
	if p.root {
		return n, nil
	}
	st, err := s.state(q, bucket)
	if err != nil {
		return nil, err
	}
	owner := p.access != "" && p.access == n.Owner
	d := policy.None
	if st.pol != nil {
		r := s.policyRequest(q, bucket, key, action)
		if p.access == "" && st.cfg.GetPublicAccessBlock().GetRestrictPublicBuckets() {
			d = st.pol.EvaluateRestricted(r)
		} else {
			d = st.pol.Evaluate(r)
		}
	}
	if d == policy.Deny && !(owner && policyOps[action]) {
		return nil, errAccessDenied()
	}
	vis := n
	if st.aclsIgnored() && n.Visibility != metapb.Visibility_PRIVATE {
		vis = &metapb.Namespace{Name: n.Name, Owner: n.Owner, Visibility: metapb.Visibility_PRIVATE}
	}
	if allowed(p, vis, a) {
		return n, nil
	}
	if d == policy.Allow && !policy.OwnerOnly[action] {
		// Meta would refuse the caller: the gateway acts as itself.
		q.r = q.r.WithContext(q.base)
		return n, nil
	}
	return nil, errAccessDenied()
}

func errAccessDenied() error {
	return apiErr(http.StatusForbidden, "AccessDenied", "Access Denied")
}

// policyOps are the actions a bucket's owner is never denied by its own
// policy: with them it can repair any policy.
var policyOps = map[string]bool{
	"s3:GetBucketPolicy": true, "s3:PutBucketPolicy": true, "s3:DeleteBucketPolicy": true,
	"s3:GetBucketPolicyStatus": true,
}

func allowed(p principal, n *metapb.Namespace, a access) bool {
	mayRead, mayWrite, _ := meta.Rights(p.access, p.root, p.grants, n)
	return mayWrite || a == read && mayRead
}

// policyRequest is the request as a policy sees it.
func (s *Server) policyRequest(q *request, bucket, key, action string) *policy.Request {
	r := &policy.Request{
		Anonymous: q.p.access == "", User: q.p.user, AccessKey: q.p.access,
		Action: action, Resource: bucket,
		SecureTransport: q.r.TLS != nil,
		Referer:         q.r.Header.Get("Referer"),
	}
	if policy.Actions[action] == policy.Object {
		r.Resource = bucket + "/" + key
	}
	if ap, err := netip.ParseAddrPort(q.r.RemoteAddr); err == nil {
		r.SourceIP = ap.Addr()
	}
	switch action {
	case "s3:ListBucket", "s3:ListBucketVersions", "s3:ListBucketMultipartUploads":
		prefix := q.query.Get("prefix") // none is "", as S3 evaluates it
		r.Prefix = &prefix
	}
	return r
}

// actionOf is the IAM action of an operation, for the policy.
func actionOf(op string, q *request) string {
	versioned := q.query.Get("versionId") != ""
	switch op {
	case "GetObject", "HeadObject":
		if versioned {
			return "s3:GetObjectVersion"
		}
	case "DeleteObject":
		if versioned {
			return "s3:DeleteObjectVersion"
		}
	case "GetBucketConfig":
		for sub, action := range notConfiguredActions {
			if q.query.Has(sub) {
				return action
			}
		}
	}
	return opActions[op]
}

// opActions maps every operation to its IAM action (an operation that
// checks several objects, DeleteObjects, does so per object).
var opActions = map[string]string{
	"ListBuckets": "s3:ListAllMyBuckets", "CreateBucket": "s3:CreateBucket",
	"HeadBucket": "s3:ListBucket", "ListObjects": "s3:ListBucket", "ListObjectsV2": "s3:ListBucket",
	"ListObjectVersions": "s3:ListBucketVersions", "ListMultipartUploads": "s3:ListBucketMultipartUploads",
	"DeleteBucket": "s3:DeleteBucket", "GetBucketLocation": "s3:GetBucketLocation",
	"PutBucketCors": "s3:PutBucketCORS", "DeleteBucketCors": "s3:PutBucketCORS", "GetBucketCors": "s3:GetBucketCORS",
	"PutBucketAcl": "s3:PutBucketAcl", "GetBucketAcl": "s3:GetBucketAcl",
	"GetBucketVersioning": "s3:GetBucketVersioning", "PutBucketVersioning": "s3:PutBucketVersioning",
	"GetObjectLockConfiguration": "s3:GetBucketObjectLockConfiguration",
	"PutObjectLockConfiguration": "s3:PutBucketObjectLockConfiguration",
	"DeleteObjects":              "s3:DeleteObject",
	"GetBucketTagging":           "s3:GetBucketTagging", "PutBucketTagging": "s3:PutBucketTagging", "DeleteBucketTagging": "s3:PutBucketTagging",
	"GetBucketPolicy": "s3:GetBucketPolicy", "PutBucketPolicy": "s3:PutBucketPolicy", "DeleteBucketPolicy": "s3:DeleteBucketPolicy",
	"GetBucketPolicyStatus": "s3:GetBucketPolicyStatus",
	"GetPublicAccessBlock":  "s3:GetBucketPublicAccessBlock", "PutPublicAccessBlock": "s3:PutBucketPublicAccessBlock",
	"DeletePublicAccessBlock":    "s3:PutBucketPublicAccessBlock",
	"GetBucketOwnershipControls": "s3:GetBucketOwnershipControls", "PutBucketOwnershipControls": "s3:PutBucketOwnershipControls",
	"DeleteBucketOwnershipControls":   "s3:PutBucketOwnershipControls",
	"GetBucketLifecycleConfiguration": "s3:GetLifecycleConfiguration",
	"PutBucketLifecycleConfiguration": "s3:PutLifecycleConfiguration", "DeleteBucketLifecycle": "s3:PutLifecycleConfiguration",

	"PutObject": "s3:PutObject", "CopyObject": "s3:PutObject", "PostObject": "s3:PutObject",
	"CreateMultipartUpload": "s3:PutObject", "UploadPart": "s3:PutObject", "UploadPartCopy": "s3:PutObject",
	"CompleteMultipartUpload": "s3:PutObject", "AbortMultipartUpload": "s3:AbortMultipartUpload",
	"ListParts": "s3:ListMultipartUploadParts",
	"GetObject": "s3:GetObject", "HeadObject": "s3:GetObject", "DeleteObject": "s3:DeleteObject",
	"GetObjectTagging": "s3:GetObjectTagging", "PutObjectTagging": "s3:PutObjectTagging",
	"DeleteObjectTagging": "s3:DeleteObjectTagging", "GetObjectAttributes": "s3:GetObjectAttributes",
	"GetObjectAcl": "s3:GetObjectAcl", "PutObjectAcl": "s3:PutObjectAcl",
	"GetObjectRetention": "s3:GetObjectRetention", "PutObjectRetention": "s3:PutObjectRetention",
	"GetObjectLegalHold": "s3:GetObjectLegalHold", "PutObjectLegalHold": "s3:PutObjectLegalHold",
}

// notConfiguredActions are the actions of the configurations a bucket
// cannot have here (GetBucketConfig).
var notConfiguredActions = map[string]string{
	"encryption": "s3:GetEncryptionConfiguration",
	"website":    "s3:GetBucketWebsite", "replication": "s3:GetReplicationConfiguration",
}
