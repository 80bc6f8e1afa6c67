package s3

import (
	"net/http"
	"sort"
	"strings"

	"cairn/meta"
	"cairn/proto/metapb"
)

// versionedOps take any version id; the other routes that accept
// versionId act on the current version only.
var versionedOps = map[string]bool{
	"GetObject": true, "HeadObject": true, "DeleteObject": true,
	"GetObjectRetention": true, "PutObjectRetention": true,
	"GetObjectLegalHold": true, "PutObjectLegalHold": true,
}

// Routing is exhaustive. S3 gives a request its meaning by its method, by
// whether it names a bucket or an object, by one sub-resource in the query
// (?tagging, ?uploads, ?legal-hold, ...) and by some x-amz-* headers. A
// request is served only if every one of those is known here: a
// sub-resource, query parameter or header this server does not implement
// is refused before any handler runs, never dropped so that the request
// falls through to a plain object call (a PUT ?legal-hold must not
// replace the object with its XML body).

// level is what a request names.
type level uint8

const (
	levelRoot level = iota
	levelBucket
	levelObject
)

// route is one operation: its name (for metrics and messages), its
// handler and the query parameters it takes besides its sub-resource.
type route struct {
	op     string
	serve  func(*Server, *request) error
	params []string
}

type routeKey struct {
	level  level
	method string
	sub    string // "" for none
}

// subresources is every sub-resource of S3's API reference, on buckets
// and objects (uploadId and versions included: they select an operation,
// as the others do). What is not in routes is refused as not implemented.
var subresources = map[string]bool{
	"abac": true, "accelerate": true, "acl": true, "analytics": true, "attributes": true,
	"cors": true, "delete": true, "encryption": true, "intelligent-tiering": true,
	"inventory": true, "legal-hold": true, "lifecycle": true, "location": true,
	"logging": true, "metadataConfiguration": true, "metadataInventoryTable": true,
	"metadataJournalTable": true, "metadataTable": true, "metrics": true,
	"notification": true, "object-lock": true, "ownershipControls": true, "policy": true,
	"policyStatus": true, "publicAccessBlock": true, "renameObject": true,
	"replication": true, "requestPayment": true, "restore": true, "retention": true,
	"select": true, "session": true, "tagging": true, "torrent": true, "uploadId": true,
	"uploads": true, "versioning": true, "versions": true, "website": true,
}

// anyParams may come with any request: the SDKs' operation tag and the
// parameters of a presigned URL (auth reads and checks them).
var anyParams = map[string]bool{
	"x-id": true, "x-amz-algorithm": true, "x-amz-credential": true, "x-amz-date": true,
	"x-amz-expires": true, "x-amz-signedheaders": true, "x-amz-signature": true,
	"x-amz-security-token": true, "x-amz-content-sha256": true, "x-amz-user-agent": true,
	"x-amz-sdk-checksum-algorithm": true,
	// SigV2's presigned URL (sigv2.go).
	"awsaccesskeyid": true, "signature": true, "expires": true,
}

var (
	listParams   = []string{"prefix", "delimiter", "marker", "max-keys", "encoding-type", "allow-unordered", "optional-object-attributes"}
	listV2Params = []string{"list-type", "prefix", "delimiter", "continuation-token", "start-after", "max-keys", "encoding-type", "fetch-owner", "allow-unordered", "optional-object-attributes"}
	getParams    = []string{"versionId", "partNumber", "response-content-type", "response-content-language", "response-expires", "response-cache-control", "response-content-disposition", "response-content-encoding"}
	versionParam = []string{"versionId"}
)

var routes = map[routeKey]route{
	{levelRoot, http.MethodGet, ""}: {"ListBuckets", (*Server).listBuckets, []string{"max-buckets", "continuation-token", "prefix", "bucket-region"}},

	{levelBucket, http.MethodPut, ""}:                     {"CreateBucket", (*Server).createBucket, nil},
	{levelBucket, http.MethodHead, ""}:                    {"HeadBucket", (*Server).headBucket, nil},
	{levelBucket, http.MethodDelete, ""}:                  {"DeleteBucket", (*Server).deleteBucket, nil},
	{levelBucket, http.MethodGet, ""}:                     {"ListObjects", func(s *Server, q *request) error { return s.listObjects(q, false) }, listParams},
	{levelBucket, http.MethodPut, "cors"}:                 {"PutBucketCors", (*Server).putBucketCors, nil},
	{levelBucket, http.MethodGet, "cors"}:                 {"GetBucketCors", (*Server).getBucketCors, nil},
	{levelBucket, http.MethodDelete, "cors"}:              {"DeleteBucketCors", (*Server).deleteBucketCors, nil},
	{levelBucket, http.MethodPut, "acl"}:                  {"PutBucketAcl", (*Server).putBucketACL, nil},
	{levelBucket, http.MethodGet, "acl"}:                  {"GetBucketAcl", (*Server).getBucketACL, nil},
	{levelBucket, http.MethodGet, "location"}:             {"GetBucketLocation", (*Server).getBucketLocation, nil},
	{levelBucket, http.MethodGet, "versioning"}:           {"GetBucketVersioning", (*Server).getBucketVersioning, nil},
	{levelBucket, http.MethodPut, "versioning"}:           {"PutBucketVersioning", (*Server).putBucketVersioning, nil},
	{levelBucket, http.MethodGet, "object-lock"}:          {"GetObjectLockConfiguration", (*Server).getObjectLockConfig, nil},
	{levelBucket, http.MethodPut, "object-lock"}:          {"PutObjectLockConfiguration", (*Server).putObjectLockConfig, nil},
	{levelBucket, http.MethodGet, "uploads"}:              {"ListMultipartUploads", (*Server).listUploads, []string{"prefix", "delimiter", "key-marker", "upload-id-marker", "max-uploads", "encoding-type"}},
	{levelBucket, http.MethodGet, "versions"}:             {"ListObjectVersions", (*Server).listVersions, []string{"prefix", "delimiter", "key-marker", "version-id-marker", "max-keys", "encoding-type"}},
	{levelBucket, http.MethodPost, "delete"}:              {"DeleteObjects", (*Server).deleteObjects, nil},
	{levelBucket, http.MethodPost, ""}:                    {"PostObject", (*Server).postObject, nil},
	{levelBucket, http.MethodGet, "tagging"}:              {"GetBucketTagging", (*Server).getBucketTagging, nil},
	{levelBucket, http.MethodPut, "tagging"}:              {"PutBucketTagging", (*Server).putBucketTagging, nil},
	{levelBucket, http.MethodDelete, "tagging"}:           {"DeleteBucketTagging", (*Server).deleteBucketTagging, nil},
	{levelBucket, http.MethodPut, "policy"}:               {"PutBucketPolicy", (*Server).putBucketPolicy, nil},
	{levelBucket, http.MethodGet, "policy"}:               {"GetBucketPolicy", (*Server).getBucketPolicy, nil},
	{levelBucket, http.MethodDelete, "policy"}:            {"DeleteBucketPolicy", (*Server).deleteBucketPolicy, nil},
	{levelBucket, http.MethodGet, "policyStatus"}:         {"GetBucketPolicyStatus", (*Server).getBucketPolicyStatus, nil},
	{levelBucket, http.MethodPut, "publicAccessBlock"}:    {"PutPublicAccessBlock", (*Server).putPublicAccessBlock, nil},
	{levelBucket, http.MethodGet, "publicAccessBlock"}:    {"GetPublicAccessBlock", (*Server).getPublicAccessBlock, nil},
	{levelBucket, http.MethodDelete, "publicAccessBlock"}: {"DeletePublicAccessBlock", (*Server).deletePublicAccessBlock, nil},
	{levelBucket, http.MethodPut, "ownershipControls"}:    {"PutBucketOwnershipControls", (*Server).putOwnershipControls, nil},
	{levelBucket, http.MethodGet, "ownershipControls"}:    {"GetBucketOwnershipControls", (*Server).getOwnershipControls, nil},
	{levelBucket, http.MethodDelete, "ownershipControls"}: {"DeleteBucketOwnershipControls", (*Server).deleteOwnershipControls, nil},
	{levelBucket, http.MethodPut, "lifecycle"}:            {"PutBucketLifecycleConfiguration", (*Server).putBucketLifecycle, nil},
	{levelBucket, http.MethodGet, "lifecycle"}:            {"GetBucketLifecycleConfiguration", (*Server).getBucketLifecycle, nil},
	{levelBucket, http.MethodDelete, "lifecycle"}:         {"DeleteBucketLifecycle", (*Server).deleteBucketLifecycle, nil},

	{levelObject, http.MethodPut, ""}:            {"PutObject", (*Server).putObject, nil},
	{levelObject, http.MethodGet, ""}:            {"GetObject", (*Server).getObject, getParams},
	{levelObject, http.MethodHead, ""}:           {"HeadObject", (*Server).getObject, getParams},
	{levelObject, http.MethodDelete, ""}:         {"DeleteObject", (*Server).deleteObject, versionParam},
	{levelObject, http.MethodPost, "uploads"}:    {"CreateMultipartUpload", (*Server).createUpload, nil},
	{levelObject, http.MethodPut, "uploadId"}:    {"UploadPart", (*Server).uploadPart, []string{"partNumber"}},
	{levelObject, http.MethodPost, "uploadId"}:   {"CompleteMultipartUpload", (*Server).completeUpload, nil},
	{levelObject, http.MethodDelete, "uploadId"}: {"AbortMultipartUpload", (*Server).abortUpload, nil},
	{levelObject, http.MethodGet, "uploadId"}:    {"ListParts", (*Server).listParts, []string{"max-parts", "part-number-marker", "encoding-type"}},
	{levelObject, http.MethodGet, "tagging"}:     {"GetObjectTagging", (*Server).getObjectTagging, versionParam},
	{levelObject, http.MethodPut, "tagging"}:     {"PutObjectTagging", (*Server).putObjectTagging, versionParam},
	{levelObject, http.MethodDelete, "tagging"}:  {"DeleteObjectTagging", (*Server).deleteObjectTagging, versionParam},
	{levelObject, http.MethodGet, "attributes"}:  {"GetObjectAttributes", (*Server).getObjectAttributes, versionParam},
	{levelObject, http.MethodGet, "acl"}:         {"GetObjectAcl", (*Server).getObjectACL, versionParam},
	{levelObject, http.MethodPut, "acl"}:         {"PutObjectAcl", (*Server).putObjectACL, versionParam},
	{levelObject, http.MethodGet, "retention"}:   {"GetObjectRetention", (*Server).getObjectRetention, versionParam},
	{levelObject, http.MethodPut, "retention"}:   {"PutObjectRetention", (*Server).putObjectRetention, versionParam},
	{levelObject, http.MethodGet, "legal-hold"}:  {"GetObjectLegalHold", (*Server).getObjectLegalHold, versionParam},
	{levelObject, http.MethodPut, "legal-hold"}:  {"PutObjectLegalHold", (*Server).putObjectLegalHold, versionParam},
}

// copyRoutes are the PUTs that carry x-amz-copy-source.
var copyRoutes = map[string]route{
	"":         {"CopyObject", (*Server).copyObject, nil},
	"uploadId": {"UploadPartCopy", (*Server).uploadPartCopy, []string{"partNumber"}},
}

func init() {
	// The configurations a bucket cannot have here answer as S3 does for
	// a bucket without one: tools probe them.
	for sub := range notConfigured {
		routes[routeKey{levelBucket, http.MethodGet, sub}] = route{"GetBucketConfig", func(s *Server, q *request) error { return s.notConfigured(q, sub) }, nil}
	}
}

// resolve finds the request's operation, or the error that refuses it.
func resolve(q *request) (route, error) {
	lv := levelObject
	switch {
	case q.bucket == "":
		lv = levelRoot
	case q.key == "":
		lv = levelBucket
	}
	sub := ""
	for k := range q.query {
		if !subresources[k] {
			continue
		}
		if sub != "" {
			// Which one S3 would pick is not documented; guessing could
			// run the wrong operation.
			names := []string{sub, k}
			sort.Strings(names)
			return route{op: "Invalid"}, errInvalidRequest("a request names one sub-resource, not " + strings.Join(names, " and "))
		}
		sub = k
	}
	if sub == "" && lv == levelBucket && q.query.Get("list-type") == "2" {
		return checkParams(q, route{"ListObjectsV2", func(s *Server, q *request) error { return s.listObjects(q, true) }, listV2Params}, "")
	}
	m := q.r.Method
	rt, ok := routes[routeKey{lv, m, sub}]
	if ok && m == http.MethodPut && lv == levelObject && q.r.Header.Get("X-Amz-Copy-Source") != "" {
		if rt, ok = copyRoutes[sub]; !ok {
			return route{op: "Object"}, errInvalidRequest("x-amz-copy-source is not allowed with ?" + sub)
		}
	}
	if !ok {
		name := map[level]string{levelRoot: "Root", levelBucket: "Bucket", levelObject: "Object"}[lv]
		if sub == "" {
			if m == http.MethodPost && lv == levelObject {
				return route{op: name}, errNotImplemented("POST needs ?uploads or ?uploadId on an object; browser uploads (POST Object) post to the bucket")
			}
			return route{op: name}, apiErr(http.StatusMethodNotAllowed, "MethodNotAllowed", "The specified method is not allowed against this resource.")
		}
		if lv == levelRoot {
			return route{op: name}, errNotImplemented("?" + sub + " is not implemented on the service")
		}
		return route{op: name}, errNotImplemented(m + " ?" + sub + " is not implemented on " + map[level]string{levelBucket: "buckets", levelObject: "objects"}[lv])
	}
	return checkParams(q, rt, sub)
}

// checkParams refuses a query parameter that rt does not take.
func checkParams(q *request, rt route, sub string) (route, error) {
	for k := range q.query {
		if k == sub || anyParams[strings.ToLower(k)] || contains(rt.params, k) {
			continue
		}
		return route{op: rt.op}, errNotImplemented("the query parameter " + k + " is not supported by " + rt.op)
	}
	if v, ok := q.query["versionId"]; ok && contains(rt.params, "versionId") {
		if len(v) != 1 {
			return route{op: rt.op}, errInvalidVersion()
		}
		if _, _, err := meta.ParseVersionID(v[0]); err != nil {
			return route{op: rt.op}, errInvalidVersion()
		}
		// Tags, ACLs and attributes are the current version's: another
		// version's must not be answered with (or changed on) the current.
		if !versionedOps[rt.op] && v[0] != "null" {
			return route{op: rt.op}, errNotImplemented(rt.op + " takes no version id but the current version's (null)")
		}
	}
	if err := checkHeaders(q.r.Header); err != nil {
		return route{op: rt.op}, err
	}
	if rt.op != "CreateBucket" && q.r.Header.Get("X-Amz-Object-Ownership") != "" {
		return route{op: rt.op}, errInvalidRequest("x-amz-object-ownership is taken by CreateBucket only; use PutBucketOwnershipControls")
	}
	if rt.op != "PutObject" && hasLockHeaders(q.r.Header) {
		return route{op: rt.op}, errInvalidRequest("object lock headers are supported on PutObject only; set the lock with PutObjectRetention or PutObjectLegalHold")
	}
	return rt, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// amzHeaders are the x-amz-* request headers this server knows, each one
// either acted upon or without effect on what is stored (signing,
// transport, billing). Any other x-amz-* header is refused: S3 gives them
// meaning (encryption, grants, locks, ...) that would be silently lost.
var amzHeaders = map[string]bool{
	"x-amz-date": true, "x-amz-content-sha256": true, "x-amz-security-token": true,
	"x-amz-user-agent": true, "x-amz-decoded-content-length": true, "x-amz-trailer": true,
	"x-amz-sdk-checksum-algorithm": true, "x-amz-checksum-crc32": true,
	"x-amz-checksum-crc32c": true, "x-amz-checksum-sha1": true, "x-amz-checksum-sha256": true,
	"x-amz-checksum-crc64nvme": true, "x-amz-checksum-algorithm": true,
	"x-amz-checksum-mode": true, "x-amz-checksum-type": true,
	"x-amz-request-payer": true, "x-amz-expected-bucket-owner": true,
	"x-amz-source-expected-bucket-owner": true, "x-amz-tagging": true,
	"x-amz-tagging-directive": true, "x-amz-metadata-directive": true,
	"x-amz-copy-source": true, "x-amz-copy-source-range": true,
	"x-amz-copy-source-if-match": true, "x-amz-copy-source-if-none-match": true,
	"x-amz-copy-source-if-modified-since": true, "x-amz-copy-source-if-unmodified-since": true,
	"x-amz-acl": true, "x-amz-storage-class": true, "x-amz-bucket-object-lock-enabled": true,

	"x-amz-object-ownership": true, "x-amz-object-attributes": true, "x-amz-max-parts": true,
	"x-amz-part-number-marker": true, "x-amz-mp-object-size": true,
	// Honoured for the bucket's owner and root (bypass in versions.go).
	"x-amz-bypass-governance-retention": true,
	// PutObject's lock of the new version (lockHeadersIn, lock.go).
	"x-amz-object-lock-mode": true, "x-amz-object-lock-retain-until-date": true,
	"x-amz-object-lock-legal-hold": true,
}

// checkHeaders refuses x-amz-* headers that are unknown, and known ones
// whose value asks for something this server does not do. Object ACLs
// are checked where the bucket is known (checkObjectACL).
func checkHeaders(h http.Header) error {
	for k := range h {
		// Most headers are not x-amz-*: skip them without lower-casing.
		if len(k) < 6 || !strings.EqualFold(k[:6], "x-amz-") {
			continue
		}
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-meta-") {
			continue
		}
		if amzHeaders[lk] {
			continue
		}
		switch {
		case strings.HasPrefix(lk, "x-amz-grant-"):
			return errNotImplemented("grant headers are not supported: access follows the bucket (" + lk + ")")
		case strings.HasPrefix(lk, "x-amz-object-lock-"):
			return errInvalidRequest("Bucket is missing Object Lock Configuration")
		case strings.Contains(lk, "server-side-encryption"):
			return errNotImplemented("server-side encryption is not supported (" + lk + ")")
		case lk == "x-amz-account-id":
			// S3 Control (/v20180820/..., the host prefixed with the
			// account id) would otherwise be read as an object request.
			return errNotImplemented("S3 Control (account-level operations, such as the account's PublicAccessBlock) is not supported; use PutPublicAccessBlock on each bucket")
		}
		return errNotImplemented("the header " + lk + " is not supported")
	}
	return nil
}

// checkObjectACL refuses a canned ACL on an object that differs from the
// bucket's: an object's access is its bucket's, so accepting it would
// leave the object readable (or not) against the caller's wish.
func checkObjectACL(h http.Header, n *metapb.Namespace) error {
	acl := h.Get("X-Amz-Acl")
	if acl == "" {
		return nil
	}
	public := false
	switch acl {
	case "private", "bucket-owner-read", "bucket-owner-full-control":
	case "public-read":
		public = true
	default:
		return errNotImplemented("the canned ACL " + acl + " is not supported")
	}
	if public != (n.Visibility == metapb.Visibility_PUBLIC_READ) {
		return errNotImplemented("an object's ACL is its bucket's; x-amz-acl: " + acl + " differs from the bucket's ACL")
	}
	return nil
}
