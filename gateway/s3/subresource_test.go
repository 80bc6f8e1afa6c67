package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"cairn/server"
	"cairn/server/servertest"
)

// referenceSubresources is every sub-resource of the S3 API reference, on
// buckets and on objects, as the test knows them (not the server's list:
// a sub-resource the server forgot must fail here).
var referenceSubresources = []string{
	"abac", "accelerate", "acl", "analytics", "attributes", "cors", "delete", "encryption",
	"intelligent-tiering", "inventory", "legal-hold", "lifecycle", "location", "logging",
	"metadataConfiguration", "metadataInventoryTable", "metadataJournalTable", "metadataTable",
	"metrics", "notification", "object-lock", "ownershipControls", "policy", "policyStatus",
	"publicAccessBlock", "renameObject", "replication", "requestPayment", "restore", "retention",
	"select", "session", "tagging", "torrent", "uploadId", "uploads", "versioning", "versions",
	"website",
}

var allMethods = []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete}

// implemented are the method and sub-resource pairs that are served (and
// tested by the other tests); every other pair must be refused.
var implemented = map[string]bool{
	"object GET acl": true, "object PUT acl": true, "object GET attributes": true,
	"object GET tagging": true, "object PUT tagging": true, "object DELETE tagging": true,
	"object POST uploads": true,
	"object GET uploadId": true, "object PUT uploadId": true, "object POST uploadId": true, "object DELETE uploadId": true,
	"bucket GET acl": true, "bucket PUT acl": true,
	"bucket GET cors": true, "bucket PUT cors": true, "bucket DELETE cors": true,
	"bucket GET tagging": true, "bucket PUT tagging": true, "bucket DELETE tagging": true,
	"bucket GET location": true, "bucket GET versioning": true, "bucket GET uploads": true,
	"bucket POST delete": true, "bucket GET versions": true,
	// Versioning and object lock (versions_test.go).
	"bucket PUT versioning": true, "bucket GET object-lock": true, "bucket PUT object-lock": true,
	"object GET retention": true, "object PUT retention": true,
	"object GET legal-hold": true, "object PUT legal-hold": true,
	// Lifecycle (lifecycle_test.go).
	"bucket PUT lifecycle": true, "bucket GET lifecycle": true, "bucket DELETE lifecycle": true,
	// Policies, public access blocks, ownership (policy_sdk_test.go,
	// pab_test.go); their GETs answer as for a bucket without one below.
	"bucket PUT policy": true, "bucket DELETE policy": true,
	"bucket PUT publicAccessBlock": true, "bucket DELETE publicAccessBlock": true,
	"bucket PUT ownershipControls": true, "bucket DELETE ownershipControls": true,
}

// notConfiguredCodes are the bucket configurations the test's bucket has
// none of: GET answers as S3 does for a bucket without one.
var notConfiguredCodes = map[string]string{
	"policy": "NoSuchBucketPolicy", "policyStatus": "NoSuchBucketPolicy",
	"encryption":  "ServerSideEncryptionConfigurationNotFoundError",
	"website":     "NoSuchWebsiteConfiguration",
	"replication": "ReplicationConfigurationNotFoundError", "publicAccessBlock": "NoSuchPublicAccessBlockConfiguration",
	"ownershipControls": "OwnershipControlsNotFoundError",
}

// rawS3 sends a SigV4-signed request as root and returns the status and
// the S3 error code ("" on success or for a HEAD).
func rawS3(t *testing.T, s *server.Server, method, path string, h http.Header, body []byte) (int, string) {
	t.Helper()
	resp, data := rawS3Body(t, s, method, path, h, body)
	var e struct{ Code string }
	xml.Unmarshal(data, &e)
	return resp.StatusCode, e.Code
}

// rawS3Body sends a SigV4-signed request as root and returns the
// response (body closed) and its body.
func rawS3Body(t *testing.T, s *server.Server, method, path string, h http.Header, body []byte) (*http.Response, []byte) {
	t.Helper()
	req := must(http.NewRequest(method, s.S3URL()+path, bytes.NewReader(body)))
	for k, v := range h {
		req.Header[k] = v
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", payload)
	creds := aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, payload, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp := must(http.DefaultClient.Do(req))
	defer resp.Body.Close()
	return resp, must(io.ReadAll(resp.Body))
}

// TestUnknownSubresources sends every sub-resource of the S3 reference
// with every method to an object and to a bucket, and headers and
// parameters that change a request's meaning: whatever is not
// implemented is refused with S3's error, and afterwards the object has
// its bytes, the bucket its ACL, and nothing was created.
func TestUnknownSubresources(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const bucket, key, precious = "sub", "dir/k", "precious bytes"
	must(c.CreateBucket(ctx, bucketInput(bucket)))
	must(c.PutObject(ctx, putInput(bucket, key, precious)))
	must(c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("t"), Value: aws.String("v")}}}}))
	intact := func(what string) {
		t.Helper()
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("after %s: the object is gone: %v", what, err)
		}
		got := must(io.ReadAll(out.Body))
		out.Body.Close()
		if string(got) != precious {
			t.Fatalf("after %s: the object holds %q", what, got)
		}
		tags := must(c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)}))
		if len(tags.TagSet) != 1 {
			t.Fatalf("after %s: tags %+v", what, tags.TagSet)
		}
		acl := must(c.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(bucket)}))
		if len(acl.Grants) != 1 {
			t.Fatalf("after %s: the bucket's ACL changed: %+v", what, acl.Grants)
		}
	}
	// A body that a handler mistaking the request for a PutObject would store.
	xmlBody := []byte(`<LegalHold xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>ON</Status></LegalHold>`)
	wantRefused := func(what string, status int, code string, gotStatus int, gotCode string, method string) {
		t.Helper()
		if gotStatus != status || (method != http.MethodHead && gotCode != code) {
			t.Fatalf("%s: %d %s, want %d %s", what, gotStatus, gotCode, status, code)
		}
	}

	for _, lv := range []string{"object", "bucket"} {
		path := "/" + bucket + "/" + key
		if lv == "bucket" {
			path = "/" + bucket
		}
		for _, sub := range referenceSubresources {
			for _, m := range allMethods {
				what := m + " " + lv + " ?" + sub
				if implemented[lv+" "+m+" "+sub] {
					continue
				}
				status, code := rawS3(t, s, m, path+"?"+sub, nil, xmlBody)
				switch {
				case lv == "bucket" && m == http.MethodGet && notConfiguredCodes[sub] != "":
					wantRefused(what, http.StatusNotFound, notConfiguredCodes[sub], status, code, m)
				default:
					wantRefused(what, http.StatusNotImplemented, "NotImplemented", status, code, m)
				}
				intact(what)
			}
		}
	}

	// Two sub-resources at once: which one is meant is not guessed.
	status, code := rawS3(t, s, http.MethodPut, "/"+bucket+"/"+key+"?tagging&legal-hold", nil, xmlBody)
	wantRefused("PUT ?tagging&legal-hold", http.StatusBadRequest, "InvalidRequest", status, code, "")
	intact("PUT ?tagging&legal-hold")

	// Query parameters that no operation here takes, and version ids that
	// are not ids (the bucket is not versioned: its object is the "null"
	// version; a well-formed id of no version is NoSuchVersion).
	for _, tc := range []struct {
		method, query string
		status        int
		code          string
	}{
		{http.MethodPut, "?foo=bar", 501, "NotImplemented"},
		{http.MethodGet, "?partNumber=1&foo", 501, "NotImplemented"},
		{http.MethodDelete, "?foo", 501, "NotImplemented"},
		{http.MethodPut, "?versionId=null", 501, "NotImplemented"},
		{http.MethodGet, "?versionId=3HL4kqtJlcpXroDTDmJ", 400, "InvalidArgument"},
		{http.MethodHead, "?versionId=3HL4kqtJlcpXroDTDmJ", 400, ""},
		{http.MethodDelete, "?versionId=3HL4kqtJlcpXroDTDmJ", 400, "InvalidArgument"},
		{http.MethodDelete, "?versionId=", 400, "InvalidArgument"},
		{http.MethodPut, "?tagging&versionId=made-up", 400, "InvalidArgument"},
		{http.MethodDelete, "?tagging&versionId=made-up", 400, "InvalidArgument"},
		{http.MethodGet, "?acl&versionId=made-up", 400, "InvalidArgument"},
		{http.MethodGet, "?versionId=00000000000000ff", 404, "NoSuchVersion"},
		{http.MethodDelete, "?versionId=00000000000000ff", 204, ""},
		{http.MethodPut, "?tagging&versionId=00000000000000ff", 501, "NotImplemented"},
		{http.MethodGet, "?retention", 400, "InvalidRequest"},
		{http.MethodPut, "?legal-hold", 400, "InvalidRequest"},
		{http.MethodPost, "", 501, "NotImplemented"},
		{http.MethodPatch, "", 405, "MethodNotAllowed"},
	} {
		what := tc.method + " object " + tc.query
		status, code := rawS3(t, s, tc.method, "/"+bucket+"/"+key+tc.query, nil, xmlBody)
		wantRefused(what, tc.status, tc.code, status, code, tc.method)
		intact(what)
	}
	// ?versionId=null is the object itself.
	if status, _ := rawS3(t, s, http.MethodGet, "/"+bucket+"/"+key+"?versionId=null", nil, nil); status != 200 {
		t.Fatalf("GET ?versionId=null: %d", status)
	}

	// Headers whose meaning is not implemented, on PUT and copy.
	for _, tc := range []struct {
		header, value string
		status        int
		code          string
	}{
		{"X-Amz-Server-Side-Encryption", "AES256", 501, "NotImplemented"},
		{"X-Amz-Server-Side-Encryption-Customer-Algorithm", "AES256", 501, "NotImplemented"},
		{"X-Amz-Grant-Read", `uri="http://acs.amazonaws.com/groups/global/AllUsers"`, 501, "NotImplemented"},
		{"X-Amz-Grant-Full-Control", `id="someone"`, 501, "NotImplemented"},
		{"X-Amz-Object-Lock-Mode", "GOVERNANCE", 400, "InvalidRequest"},
		{"X-Amz-Object-Lock-Legal-Hold", "ON", 400, "InvalidRequest"},
		{"X-Amz-Website-Redirect-Location", "/elsewhere", 501, "NotImplemented"},
		{"X-Amz-Storage-Class", "GLACIER", 400, "InvalidStorageClass"},
		{"X-Amz-Write-Offset-Bytes", "0", 501, "NotImplemented"},
		{"X-Amz-Made-Up", "1", 501, "NotImplemented"},
		{"X-Amz-Acl", "public-read", 501, "NotImplemented"},
		{"X-Amz-Acl", "authenticated-read", 501, "NotImplemented"},
	} {
		h := http.Header{tc.header: {tc.value}}
		status, code := rawS3(t, s, http.MethodPut, "/"+bucket+"/"+key, h, []byte("clobbered"))
		wantRefused("PUT with "+tc.header+": "+tc.value, tc.status, tc.code, status, code, "")
		intact("PUT with " + tc.header)
		h.Set("X-Amz-Copy-Source", "/"+bucket+"/"+key)
		h.Set("X-Amz-Metadata-Directive", "REPLACE")
		status, code = rawS3(t, s, http.MethodPut, "/"+bucket+"/"+key, h, nil)
		wantRefused("CopyObject with "+tc.header+": "+tc.value, tc.status, tc.code, status, code, "")
		intact("CopyObject with " + tc.header)
		h.Del("X-Amz-Copy-Source")
		status, code = rawS3(t, s, http.MethodPost, "/"+bucket+"/other?uploads", h, nil)
		wantRefused("CreateMultipartUpload with "+tc.header+": "+tc.value, tc.status, tc.code, status, code, "")
	}
	if l := must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})); len(l.Uploads) != 0 {
		t.Fatalf("refused CreateMultipartUploads left uploads: %+v", l.Uploads)
	}
	// The canned ACL the bucket has is accepted, as S3 would.
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("same-acl"),
		Body: strings.NewReader("x"), ACL: types.ObjectCannedACLPrivate}))

	// The calls real clients make. Lock calls on a bucket without object
	// lock are refused as S3 refuses them.
	k := aws.String(key)
	_, err := c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String(bucket), Key: k,
		LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOn}})
	wantCode(t, err, "InvalidRequest")
	intact("PutObjectLegalHold")
	_, err = c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String(bucket), Key: k,
		Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeCompliance, RetainUntilDate: aws.Time(time.Now().Add(time.Hour))}})
	wantCode(t, err, "InvalidRequest")
	intact("PutObjectRetention")
	_, err = c.GetObjectLegalHold(ctx, &s3.GetObjectLegalHoldInput{Bucket: aws.String(bucket), Key: k})
	wantCode(t, err, "InvalidRequest")
	_, err = c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String(bucket), Key: k})
	wantCode(t, err, "InvalidRequest")
	_, err = c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(bucket)})
	wantCode(t, err, "ObjectLockConfigurationNotFoundError")
	_, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String(bucket), Key: k,
		ObjectAttributes: []types.ObjectAttributes{"Unknown"}})
	wantCode(t, err, "InvalidArgument")
	_, err = c.GetObjectTorrent(ctx, &s3.GetObjectTorrentInput{Bucket: aws.String(bucket), Key: k})
	wantCode(t, err, "NotImplemented")
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: k, VersionId: aws.String("3HL4kqtJlcpXroDTDmJ")})
	wantCode(t, err, "InvalidArgument")
	intact("DeleteObject with a version id")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: k, VersionId: aws.String("3HL4kqtJlcpXroDTDmJ")})
	wantCode(t, err, "InvalidArgument")
	del := must(c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: k, VersionId: aws.String("3HL4kqtJlcpXroDTDmJ")}, {Key: k, ETag: aws.String(`"x"`)}}}}))
	if len(del.Errors) != 2 || len(del.Deleted) != 0 {
		t.Fatalf("DeleteObjects of a made-up version or conditional: deleted %+v, errors %+v", del.Deleted, del.Errors)
	}
	intact("DeleteObjects with a version id")
	_, err = c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String(bucket), Key: k, ACL: types.ObjectCannedACLPublicRead})
	wantCode(t, err, "NotImplemented")
	intact("PutObjectAcl public-read")
	must(c.PutObjectAcl(ctx, &s3.PutObjectAclInput{Bucket: aws.String(bucket), Key: k, ACL: types.ObjectCannedACLPrivate}))

	// CreateBucket asking for object ACLs creates nothing.
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("writer-owned"), ObjectOwnership: types.ObjectOwnershipObjectWriter})
	wantCode(t, err, "NotImplemented")
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("granted"), GrantRead: aws.String(`id="someone"`)})
	wantCode(t, err, "NotImplemented")
	for _, b := range []string{"writer-owned", "granted"} {
		if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(b)}); err == nil {
			t.Fatalf("a refused CreateBucket made %s", b)
		}
	}
	// A grant to a user in an ACL body is refused, not dropped.
	acl := must(c.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String(bucket)}))
	_, err = c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String(bucket), AccessControlPolicy: &types.AccessControlPolicy{
		Owner: acl.Owner, Grants: append(acl.Grants, types.Grant{Permission: types.PermissionWrite,
			Grantee: &types.Grantee{Type: types.TypeCanonicalUser, ID: aws.String("someone-else")}})}})
	wantCode(t, err, "NotImplemented")
	intact("PutBucketAcl granting a user")
}

// TestObjectACLFollowsBucket: x-amz-acl: private on a PUT into a
// public-read bucket is refused (it used to be ignored, leaving the
// object readable by anyone), and the object stays as it was.
func TestObjectACLFollowsBucket(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("pub"), ACL: types.BucketCannedACLPublicRead}))
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pub"), Key: aws.String("k"), Body: strings.NewReader("public"), ACL: types.ObjectCannedACLPublicRead}))
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pub"), Key: aws.String("k"), Body: strings.NewReader("secret"), ACL: types.ObjectCannedACLPrivate})
	wantCode(t, err, "NotImplemented")
	_, err = c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("pub"), Key: aws.String("k2"), ACL: types.ObjectCannedACLPrivate})
	wantCode(t, err, "NotImplemented")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("pub"), Key: aws.String("k3"), CopySource: aws.String("pub/k"), ACL: types.ObjectCannedACLPrivate})
	wantCode(t, err, "NotImplemented")
	resp := must(http.Get(s.S3URL() + "/pub/k"))
	body := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "public" {
		t.Fatalf("anonymous GET after the refused PUT: %d %q", resp.StatusCode, body)
	}
	for _, k := range []string{"k2", "k3"} {
		if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("pub"), Key: aws.String(k)}); err == nil {
			t.Fatalf("a refused request created %s", k)
		}
	}
}

// TestS3ControlRefused: S3 Control's account-level PublicAccessBlock calls
// (aws-sdk-go-v2's s3control client sends /v20180820/configuration/
// publicAccessBlock with x-amz-account-id, to the endpoint's host
// prefixed with the account id) answer NotImplemented, and a bucket named
// like S3 Control's path prefix keeps its objects and gains none.
func TestS3ControlRefused(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("v20180820")))
	must(c.PutObject(ctx, putInput("v20180820", "configuration/publicAccessBlock", "kept")))
	body := []byte(`<PublicAccessBlockConfiguration xmlns="http://awss3control.amazonaws.com/doc/2018-08-20/"><BlockPublicAcls>true</BlockPublicAcls></PublicAccessBlockConfiguration>`)
	h := http.Header{"X-Amz-Account-Id": {"123456789012"}}
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		resp, data := rawS3Body(t, s, m, "/v20180820/configuration/publicAccessBlock", h, body)
		if resp.StatusCode != http.StatusNotImplemented || !bytes.Contains(data, []byte("S3 Control")) {
			t.Fatalf("%s S3 Control PublicAccessBlock: %d %s", m, resp.StatusCode, data)
		}
	}
	if got := string(getBody(t, c, "v20180820", "configuration/publicAccessBlock")); got != "kept" {
		t.Fatalf("the bucket's object holds %q", got)
	}
}
