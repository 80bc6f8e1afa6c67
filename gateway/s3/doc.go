// Package s3 serves the Amazon S3 API over Cairn's namespaces and files,
// on top of package client: a bucket is a namespace, a key is a path
// ("/" separates directories), so one object is the same file through S3,
// the native HTTP API and the mount.
//
// Requests are path-style (/bucket/key) or, with Config.Domain set,
// virtual-host-style (bucket.domain/key). Authentication is AWS Signature
// Version 4: the Authorization header, presigned URLs, aws-chunked
// streaming uploads (signed chunks, unsigned chunks with trailing
// checksums) and UNSIGNED-PAYLOAD. The expected signature is computed by
// aws-sdk-go-v2's signer over a copy of the request holding exactly the
// signed headers (sigv4.go); keys and their sealed secrets live in meta
// (meta/s3keys.go). Anonymous requests may read public buckets, and do
// what a bucket policy allows them.
//
// Files by concern:
//
//	server.go     Config, routing (method x bucket/key x sub-resource), request ids, upload clean-up
//	auth.go       who signed, key cache, body verification, grants
//	sigv4.go      SigV4 claims parsing and verification with the SDK signer
//	chunked.go    aws-chunked decoding with per-chunk signature checks
//	bucket.go     buckets: create, head, delete, list, location, versioning
//	acl.go        ACLs (canned private/public-read = the namespace's visibility)
//	access.go     access decisions: rights, the bucket policy, public access blocks
//	bucketpolicy.go  Put/Get/Delete of policies, public access blocks, ownership controls
//	policy/       the bucket policy language: parser and evaluator
//	post.go       browser uploads (POST Object with a signed policy)
//	cors.go       bucket CORS rules and preflight
//	object.go     PUT, GET, HEAD of objects; keys as paths
//	verify.go     Content-MD5, x-amz-checksum-*, length checks before a commit
//	copy.go       CopyObject (shared needles, no data copied)
//	delete.go     DeleteObject, DeleteObjects
//	tagging.go    object and bucket tags
//	list.go       ListObjects V1 and V2
//	versions.go   bucket versioning, GET/DELETE by version id, ListObjectVersions
//	lock.go       object lock: bucket configuration, retention, legal hold
//	multipart.go  multipart uploads
//	errors.go     the Kind -> S3 code/status table and the XML error body
//	xml.go        the XML documents
//
// Every error is an S3 XML error from the one table in errors.go, and
// every response carries x-amz-request-id. A body that fails verification
// (signature, payload hash, Content-MD5, checksum, length) fails the
// upload before anything is committed: the needles already written are
// discarded and no object appears, whole or partial.
package s3
