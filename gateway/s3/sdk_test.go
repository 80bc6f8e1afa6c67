package s3_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"cairn/client"
	s3api "cairn/gateway/s3"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// start runs a real one-process store with the S3 API on a loopback port.
func start(t *testing.T) *server.Server {
	t.Helper()
	return servertest.Start(t, func(c *server.Config) {
		c.ExtentSize = 1 << 20 // several extents per multipart part
	})
}

// waitCollected waits for a garbage collection pass that began after the
// call, so that data a delete wrongly queued as garbage is really gone.
func waitCollected(t *testing.T, s *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Meta().WaitCollected(ctx); err != nil {
		t.Fatal(err)
	}
}

// nsChanged returns a function that waits until the gateway's client has
// applied a change of namespace ns made after nsChanged was called.
func nsChanged(t *testing.T, s *server.Server, ns string) func() {
	var seen atomic.Bool
	s.Client().OnChange(func(ev *metapb.Event) {
		if ev.Namespace && ev.Ns == ns {
			seen.Store(true)
		}
	})
	return func() {
		t.Helper()
		await.Until(t, 10*time.Second, "the change event of namespace "+ns, seen.Load)
	}
}

func sdk(t *testing.T, s *server.Server, key, secret string) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		BaseEndpoint:     aws.String(s.S3URL()),
		Region:           "us-east-1",
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(key, secret, ""),
		RetryMaxAttempts: 1,
	})
}

func root(t *testing.T, s *server.Server) *s3.Client {
	return sdk(t, s, servertest.Root, servertest.RootSecret)
}

// wantCode fails unless err is an S3 API error with the given code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	if !errorsAs(err, &ae) {
		t.Fatalf("want %s, got %v", code, err)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("want %s, got %s (%v)", code, ae.ErrorCode(), err)
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// must returns v, or panics (failing the test run) on err: the setup
// steps of these tests have no interesting failure of their own.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func getBody(t *testing.T, c *s3.Client, bucket, key string) []byte {
	t.Helper()
	out := must(c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key}))
	defer out.Body.Close()
	return must(io.ReadAll(out.Body))
}

func TestSDKBuckets(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")}))
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")})
	wantCode(t, err, "BucketAlreadyOwnedByYou")
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("Bad_Name!")})
	wantCode(t, err, "InvalidBucketName")
	must(c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("photos")}))
	_, err = c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("nope-nope")})
	if err == nil {
		t.Fatal("HeadBucket of a missing bucket succeeded")
	}
	l := must(c.ListBuckets(ctx, &s3.ListBucketsInput{}))
	if len(l.Buckets) != 1 || *l.Buckets[0].Name != "photos" {
		t.Fatalf("ListBuckets: %+v", l.Buckets)
	}
	loc := must(c.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String("photos")}))
	if loc.LocationConstraint != "" {
		t.Fatalf("location %q", loc.LocationConstraint)
	}
	ver := must(c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("photos")}))
	if ver.Status != "" {
		t.Fatalf("versioning %q", ver.Status)
	}

	// ACL: canned public-read is the namespace's visibility.
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("photos"), ACL: types.BucketCannedACLPublicRead}))
	acl := must(c.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("photos")}))
	if len(acl.Grants) != 2 || acl.Grants[1].Permission != types.PermissionRead {
		t.Fatalf("acl %+v", acl.Grants)
	}
	ns := must(s.Client().Namespace(ctx, "photos"))
	if ns.Visibility != metapb.Visibility_PUBLIC_READ {
		t.Fatal("public-read did not make the namespace public")
	}
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("photos"), ACL: types.BucketCannedACLPrivate}))
	if ns := must(s.Client().Namespace(ctx, "photos")); ns.Visibility != metapb.Visibility_PRIVATE {
		t.Fatal("canned private did not make the namespace private")
	}
	// An ACL as a policy body: a READ grant to AllUsers is public-read.
	allUsers := types.Grant{Permission: types.PermissionRead, Grantee: &types.Grantee{Type: types.TypeGroup,
		URI: aws.String("http://acs.amazonaws.com/groups/global/AllUsers")}}
	ownerGrant := acl.Grants[0]
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("photos"), AccessControlPolicy: &types.AccessControlPolicy{
		Owner: acl.Owner, Grants: []types.Grant{ownerGrant, allUsers}}}))
	if ns := must(s.Client().Namespace(ctx, "photos")); ns.Visibility != metapb.Visibility_PUBLIC_READ {
		t.Fatal("an AllUsers READ grant did not make the namespace public")
	}
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("photos"), AccessControlPolicy: &types.AccessControlPolicy{
		Owner: acl.Owner, Grants: []types.Grant{ownerGrant}}}))
	if ns := must(s.Client().Namespace(ctx, "photos")); ns.Visibility != metapb.Visibility_PRIVATE {
		t.Fatal("a policy without the AllUsers grant did not make the namespace private")
	}
	_, err = c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("photos"), ACL: types.BucketCannedACLAuthenticatedRead})
	wantCode(t, err, "NotImplemented")
	// A bucket created public-read is a public namespace.
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("open"), ACL: types.BucketCannedACLPublicRead}))
	if ns := must(s.Client().Namespace(ctx, "open")); ns.Visibility != metapb.Visibility_PUBLIC_READ {
		t.Fatal("CreateBucket with public-read made a private namespace")
	}

	// CORS, and a preflight that honours it.
	must(c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("photos"), CORSConfiguration: &types.CORSConfiguration{
		CORSRules: []types.CORSRule{{AllowedOrigins: []string{"https://app.example"}, AllowedMethods: []string{"GET", "PUT"},
			AllowedHeaders: []string{"*"}, MaxAgeSeconds: aws.Int32(300)}},
	}}))
	cors := must(c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("photos")}))
	if len(cors.CORSRules) != 1 || cors.CORSRules[0].AllowedOrigins[0] != "https://app.example" {
		t.Fatalf("cors %+v", cors.CORSRules)
	}
	pre := func(origin, method string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, s.S3URL()+"/photos/x", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", method)
		req.Header.Set("Access-Control-Request-Headers", "content-type")
		resp := must(http.DefaultClient.Do(req))
		resp.Body.Close()
		return resp
	}
	if r := pre("https://app.example", "PUT"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		r.Header.Get("Access-Control-Max-Age") != "300" {
		t.Fatalf("preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := pre("https://evil.example", "PUT"); r.StatusCode != 403 {
		t.Fatalf("preflight from another origin: %d", r.StatusCode)
	}
	if r := pre("https://app.example", "DELETE"); r.StatusCode != 403 {
		t.Fatalf("preflight of a method not allowed: %d", r.StatusCode)
	}
	// An actual request from an allowed origin carries the CORS headers.
	greq := must(http.NewRequest(http.MethodGet, s.S3URL()+"/photos/x", nil))
	greq.Header.Set("Origin", "https://app.example")
	gresp := must(http.DefaultClient.Do(greq))
	gresp.Body.Close()
	if gresp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("CORS headers of a GET: %v", gresp.Header)
	}
	must(c.DeleteBucketCors(ctx, &s3.DeleteBucketCorsInput{Bucket: aws.String("photos")}))
	_, err = c.GetBucketCors(ctx, &s3.GetBucketCorsInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchCORSConfiguration")

	// Configurations Cairn has not: "none", as S3 says for a bucket without.
	_, err = c.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchBucketPolicy")
	_, err = c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchTagSet")
	must(c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("photos"), Tagging: &types.Tagging{
		TagSet: []types.Tag{{Key: aws.String("team"), Value: aws.String("web")}}}}))
	bt := must(c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("photos")}))
	if len(bt.TagSet) != 1 || *bt.TagSet[0].Value != "web" {
		t.Fatalf("bucket tags %+v", bt.TagSet)
	}
	must(c.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: aws.String("photos")}))
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchTagSet")
	must(c.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("photos"), Tagging: &types.Tagging{
		TagSet: []types.Tag{{Key: aws.String("left"), Value: aws.String("over")}}}}))

	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("photos"), Key: aws.String("a/b"), Body: strings.NewReader("x")}))
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("photos")})
	wantCode(t, err, "BucketNotEmpty")
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("photos"), Key: aws.String("a/b")}))
	must(c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("photos")}))
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchBucket")
	// A bucket made again under the name starts with no configuration.
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("photos")}))
	_, err = c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("photos")})
	wantCode(t, err, "NoSuchTagSet")
}

func TestSDKObjects(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("docs")}))
	data := randBytes(300 << 10)
	sum := md5.Sum(data)
	put := must(c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"), Body: bytes.NewReader(data),
		ContentType: aws.String("application/x-test"), ContentEncoding: aws.String("identity"),
		ContentDisposition: aws.String(`attachment; filename="f.bin"`), CacheControl: aws.String("max-age=7"),
		Metadata: map[string]string{"color": "blue"}, Tagging: aws.String("a=1&b=two"),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	}))
	if *put.ETag != fmt.Sprintf(`"%x"`, sum) {
		t.Fatalf("ETag %s", *put.ETag)
	}
	if got := getBody(t, c, "docs", "dir/sub/file.bin"); !bytes.Equal(got, data) {
		t.Fatal("GetObject returned other bytes")
	}
	// The same file through the native client (and so the mount).
	f := must(s.Client().Stat(ctx, "docs", "dir/sub/file.bin"))
	if f.Size() != int64(len(data)) || f.Inode.UserMeta["color"] != "blue" {
		t.Fatalf("native view: size %d meta %v", f.Size(), f.Inode.UserMeta)
	}
	head := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	if *head.ContentLength != int64(len(data)) || *head.ContentType != "application/x-test" || head.Metadata["color"] != "blue" ||
		*head.CacheControl != "max-age=7" || *head.ContentDisposition != `attachment; filename="f.bin"` || *head.ContentEncoding != "identity" {
		t.Fatalf("HeadObject: %+v", head)
	}

	// Range, conditionals, response overrides.
	rg := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		Range: aws.String("bytes=100-199"), ResponseContentType: aws.String("text/plain")}))
	part := must(io.ReadAll(rg.Body))
	rg.Body.Close()
	if !bytes.Equal(part, data[100:200]) || *rg.ContentRange != fmt.Sprintf("bytes 100-199/%d", len(data)) || *rg.ContentType != "text/plain" {
		t.Fatalf("range: %d bytes, %s, %s", len(part), *rg.ContentRange, *rg.ContentType)
	}
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"), IfMatch: aws.String(`"nope"`)})
	wantCode(t, err, "PreconditionFailed")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"), IfNoneMatch: put.ETag})
	wantHTTP(t, err, 304)
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		IfUnmodifiedSince: aws.Time(time.Now().Add(-time.Hour))})
	wantCode(t, err, "PreconditionFailed")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		IfModifiedSince: aws.Time(time.Now().Add(time.Hour))})
	wantHTTP(t, err, 304)
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"), Range: aws.String("bytes=999999999-")})
	wantCode(t, err, "InvalidRange")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("docs"), Key: aws.String("nope")})
	wantCode(t, err, "NoSuchKey")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("nope")})
	wantCode(t, err, "NoSuchBucket")

	// A wrong Content-MD5 stores nothing.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("bad"), Body: strings.NewReader("hello"),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
	wantCode(t, err, "BadDigest")
	if _, err := s.Client().StatFresh(ctx, "docs", "bad"); err == nil {
		t.Fatal("an object with a bad digest was stored")
	}
	// Checksums the SDK computes.
	for _, alg := range []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32c, types.ChecksumAlgorithmSha256, types.ChecksumAlgorithmCrc32} {
		must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("sum-" + string(alg)),
			Body: bytes.NewReader(data[:5000]), ChecksumAlgorithm: alg}))
	}

	// Tagging.
	tg := must(c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	if len(tg.TagSet) != 2 || *tg.TagSet[0].Key != "a" || *tg.TagSet[1].Value != "two" {
		t.Fatalf("tags %+v", tg.TagSet)
	}
	must(c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}}))
	tg = must(c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	if len(tg.TagSet) != 1 || *tg.TagSet[0].Key != "k" {
		t.Fatalf("tags after put %+v", tg.TagSet)
	}
	must(c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	tg = must(c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	if len(tg.TagSet) != 0 {
		t.Fatalf("tags after delete %+v", tg.TagSet)
	}

	// Copy: metadata kept (COPY) or replaced (REPLACE), across buckets.
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("other")}))
	cp := must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("other"), Key: aws.String("copy.bin"),
		CopySource: aws.String("docs/dir/sub/file.bin")}))
	if *cp.CopyObjectResult.ETag != *put.ETag {
		t.Fatalf("copy etag %s", *cp.CopyObjectResult.ETag)
	}
	h2 := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("other"), Key: aws.String("copy.bin")}))
	if h2.Metadata["color"] != "blue" || *h2.ContentType != "application/x-test" {
		t.Fatalf("COPY lost metadata: %+v", h2)
	}
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		CopySource: aws.String("docs/dir/sub/file.bin"), MetadataDirective: types.MetadataDirectiveReplace,
		Metadata: map[string]string{"color": "red"}, ContentType: aws.String("text/x-new")}))
	h3 := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	if h3.Metadata["color"] != "red" || *h3.ContentType != "text/x-new" {
		t.Fatalf("REPLACE: %+v", h3)
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin"),
		CopySource: aws.String("docs/dir/sub/file.bin")})
	wantCode(t, err, "InvalidRequest")
	// The copy shares needles: deleting the source must not lose its data.
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/sub/file.bin")}))
	waitCollected(t, s) // the source's garbage, if any, is gone from the data servers
	if got := getBody(t, c, "other", "copy.bin"); !bytes.Equal(got, data) {
		t.Fatal("the copy lost its data when the source was deleted")
	}
	// Deleting the last object of a directory removes the directory.
	l := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("docs")}))
	for _, o := range l.Contents {
		if strings.HasPrefix(*o.Key, "dir") {
			t.Fatalf("empty directory left behind as %s", *o.Key)
		}
	}

	// DeleteObjects, with a key that does not exist.
	for _, k := range []string{"x/1", "x/2", "y"} {
		must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String(k), Body: strings.NewReader(k)}))
	}
	del := must(c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("docs"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("x/1")}, {Key: aws.String("x/2")}, {Key: aws.String("y")}, {Key: aws.String("never")},
	}}}))
	if len(del.Deleted) != 4 || len(del.Errors) != 0 {
		t.Fatalf("DeleteObjects: %d deleted, errors %+v", len(del.Deleted), del.Errors)
	}
	if _, err := s.Client().StatFresh(ctx, "docs", "x"); err == nil {
		t.Fatal("directory x outlived its objects")
	}

	// Folder markers are directories.
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("folder/"), Body: strings.NewReader("")}))
	fh := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("docs"), Key: aws.String("folder/")}))
	if *fh.ContentLength != 0 {
		t.Fatal("folder marker has a size")
	}
	if f, err := s.Client().StatFresh(ctx, "docs", "folder"); err != nil || !f.IsDir() {
		t.Fatalf("folder marker is not a directory: %v", err)
	}
	// A marker put again, or over a directory that exists through its
	// objects, is no conflict (tools re-put markers).
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("folder/"), Body: strings.NewReader("")}))
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("dir/"), Body: strings.NewReader("")}))
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("docs"), Key: aws.String("folder/"), CopySource: aws.String("docs/folder/"),
		MetadataDirective: types.MetadataDirectiveReplace}))
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("docs"), Key: aws.String("folder2/"), CopySource: aws.String("docs/sum-" + string(types.ChecksumAlgorithmCrc32c))})
	wantCode(t, err, "InvalidRequest") // a file is no folder marker
	// A key below an object: a file cannot be a directory too.
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("leaf"), Body: strings.NewReader("x")}))
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("leaf/below"), Body: strings.NewReader("x")})
	wantCode(t, err, "InvalidRequest")
	// Keys a file system cannot name are refused, never rewritten.
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("docs"), Key: aws.String("a//b"), Body: strings.NewReader("x")})
	wantCode(t, err, "InvalidArgument")
}

func wantHTTP(t *testing.T, err error, status int) {
	t.Helper()
	var re interface{ HTTPStatusCode() int }
	if err == nil || !errorsAs(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("want HTTP %d, got %v", status, err)
	}
}

func TestSDKList(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("list")}))
	// "a" and "a/x" cannot both exist: a file system cannot have a file
	// and a directory of one name (the known limit of keys as paths).
	keys := []string{"a-b", "a.txt", "a/x", "a/y/z", "b", "c/d", "c/e", "é", "日本"}
	for _, k := range keys {
		must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("list"), Key: aws.String(k), Body: strings.NewReader(k)}))
	}
	// Recursive, paginated by 2: every key once, in UTF-8 binary order.
	var got []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("list"), MaxKeys: aws.Int32(2)})
	for p.HasMorePages() {
		page := must(p.NextPage(ctx))
		for _, o := range page.Contents {
			got = append(got, *o.Key)
		}
	}
	if strings.Join(got, ",") != strings.Join(keys, ",") {
		t.Fatalf("recursive listing:\n got %q\nwant %q", got, keys)
	}
	// Delimited.
	d := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Delimiter: aws.String("/")}))
	var objs, cps []string
	for _, o := range d.Contents {
		objs = append(objs, *o.Key)
	}
	for _, cp := range d.CommonPrefixes {
		cps = append(cps, *cp.Prefix)
	}
	if strings.Join(objs, ",") != "a-b,a.txt,b,é,日本" || strings.Join(cps, ",") != "a/,c/" {
		t.Fatalf("delimited: %q %q", objs, cps)
	}
	// Delimited and paginated by 1: common prefixes count and are not repeated.
	var all []string
	p = s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Delimiter: aws.String("/"), MaxKeys: aws.Int32(1)})
	for p.HasMorePages() {
		page := must(p.NextPage(ctx))
		for _, o := range page.Contents {
			all = append(all, *o.Key)
		}
		for _, cp := range page.CommonPrefixes {
			all = append(all, *cp.Prefix)
		}
	}
	if strings.Join(all, ",") != "a-b,a.txt,a/,b,c/,é,日本" {
		t.Fatalf("delimited pages: %q", all)
	}
	// Prefix, start-after, another delimiter, url encoding.
	pr := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Prefix: aws.String("a/"), StartAfter: aws.String("a/x")}))
	if len(pr.Contents) != 1 || *pr.Contents[0].Key != "a/y/z" {
		t.Fatalf("prefix+start-after: %+v", pr.Contents)
	}
	dash := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Delimiter: aws.String("-"), Prefix: aws.String("a")}))
	if len(dash.CommonPrefixes) != 1 || *dash.CommonPrefixes[0].Prefix != "a-" || len(dash.Contents) != 3 {
		t.Fatalf("delimiter '-': %+v %+v", dash.CommonPrefixes, dash.Contents)
	}
	enc := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Prefix: aws.String("日"), EncodingType: types.EncodingTypeUrl}))
	// The SDK leaves the keys encoded, as sent.
	if len(enc.Contents) != 1 || *enc.Contents[0].Key != url.QueryEscape("日本") {
		t.Fatalf("encoding-type=url: %+v", enc.Contents)
	}
	own := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), FetchOwner: aws.Bool(true), MaxKeys: aws.Int32(1)}))
	if own.Contents[0].Owner == nil || *own.Contents[0].Owner.ID != servertest.Root || !*own.IsTruncated || *own.KeyCount != 1 {
		t.Fatalf("fetch-owner: %+v", own.Contents[0])
	}
	// V1 with marker.
	var v1 []string
	marker := ""
	for {
		page := must(c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("list"), Marker: aws.String(marker), MaxKeys: aws.Int32(4)}))
		for _, o := range page.Contents {
			v1 = append(v1, *o.Key)
		}
		if !*page.IsTruncated {
			break
		}
		marker = *page.NextMarker
	}
	if strings.Join(v1, ",") != strings.Join(keys, ",") {
		t.Fatalf("V1 listing: %q", v1)
	}
	none := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Prefix: aws.String("zzz")}))
	if len(none.Contents) != 0 || *none.IsTruncated {
		t.Fatal("listing of a prefix with no keys")
	}
}

func TestSDKMultipart(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("mpart")}))
	parts := [][]byte{randBytes(5 << 20), randBytes(5<<20 + 17), randBytes(1000)}
	up := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"),
		ContentType: aws.String("video/x-test"), Metadata: map[string]string{"k": "v"}}))
	var done []types.CompletedPart
	var sums []byte
	for i, p := range parts {
		out := must(c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)}))
		done = append(done, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))})
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	lp := must(c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId}))
	if len(lp.Parts) != 3 || *lp.Parts[1].Size != int64(len(parts[1])) {
		t.Fatalf("ListParts: %+v", lp.Parts)
	}
	lu := must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("mpart")}))
	if len(lu.Uploads) != 1 || *lu.Uploads[0].UploadId != *up.UploadId {
		t.Fatalf("ListMultipartUploads: %+v", lu.Uploads)
	}
	// Errors before success: order, unknown part, wrong ETag.
	_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{done[1], done[0]}}})
	wantCode(t, err, "InvalidPartOrder")
	bad := done[2]
	bad.ETag = aws.String(`"00000000000000000000000000000000"`)
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{done[0], bad}}})
	wantCode(t, err, "InvalidPart")
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{done[0], {ETag: done[1].ETag, PartNumber: aws.Int32(4)}}}})
	wantCode(t, err, "InvalidPart")

	comp := must(c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"),
		UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}))
	if want := fmt.Sprintf(`"%x-3"`, md5.Sum(sums)); *comp.ETag != want {
		t.Fatalf("multipart ETag %s, want %s", *comp.ETag, want)
	}
	got := getBody(t, c, "mpart", "big/file")
	if !bytes.Equal(got, bytes.Join(parts, nil)) {
		t.Fatal("completed object differs from its parts")
	}
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("mpart"), Key: aws.String("big/file")}))
	if *h.ContentType != "video/x-test" || h.Metadata["k"] != "v" {
		t.Fatalf("metadata of CreateMultipartUpload lost: %+v", h)
	}
	_, err = c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("mpart"), Key: aws.String("big/file"), UploadId: up.UploadId})
	wantCode(t, err, "NoSuchUpload")

	// Too small a part; abort; UploadPartCopy from the completed object.
	up2 := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("small")}))
	var small []types.CompletedPart
	for i := 1; i <= 2; i++ {
		out := must(c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpart"), Key: aws.String("small"), UploadId: up2.UploadId,
			PartNumber: aws.Int32(int32(i)), Body: bytes.NewReader([]byte("tiny"))}))
		small = append(small, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i))})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("small"), UploadId: up2.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: small}})
	wantCode(t, err, "EntityTooSmall")
	must(c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("small"), UploadId: up2.UploadId}))
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpart"), Key: aws.String("small"), UploadId: up2.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("tiny"))})
	wantCode(t, err, "NoSuchUpload")

	up3 := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("copied")}))
	full := bytes.Join(parts, nil)
	ranges := [][2]int{{0, 5<<20 + 99}, {5<<20 + 100, len(full) - 1}}
	var cparts []types.CompletedPart
	for i, r := range ranges {
		out := must(c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("mpart"), Key: aws.String("copied"), UploadId: up3.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), CopySource: aws.String("mpart/big/file"),
			CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", r[0], r[1]))}))
		if want := fmt.Sprintf(`"%x"`, md5.Sum(full[r[0]:r[1]+1])); *out.CopyPartResult.ETag != want {
			t.Fatalf("UploadPartCopy ETag %s, want %s", *out.CopyPartResult.ETag, want)
		}
		cparts = append(cparts, types.CompletedPart{ETag: out.CopyPartResult.ETag, PartNumber: aws.Int32(int32(i + 1))})
	}
	must(c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpart"), Key: aws.String("copied"),
		UploadId: up3.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: cparts}}))
	// The source goes; the copy, which shares its needles, stays whole.
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("mpart"), Key: aws.String("big/file")}))
	waitCollected(t, s)
	if got := getBody(t, c, "mpart", "copied"); !bytes.Equal(got, full) {
		t.Fatal("UploadPartCopy result lost data when its source was deleted")
	}
}

func TestSDKPresigned(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("pre")}))
	ps := s3.NewPresignClient(c)
	put := must(ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("pre"), Key: aws.String("k v+x")}, s3.WithPresignExpires(time.Minute)))
	req := must(http.NewRequest(put.Method, put.URL, strings.NewReader("presigned body")))
	for k, v := range put.SignedHeader {
		req.Header[k] = v
	}
	resp := must(http.DefaultClient.Do(req))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %d", resp.StatusCode)
	}
	get := must(ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pre"), Key: aws.String("k v+x")}, s3.WithPresignExpires(time.Minute)))
	resp = must(http.Get(get.URL))
	body := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "presigned body" {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, body)
	}
	// Tampering with the URL breaks the signature.
	resp = must(http.Get(strings.Replace(get.URL, "k%20v", "k%20w", 1)))
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("tampered presigned URL: %d", resp.StatusCode)
	}
	// An expired URL is refused.
	signer := v4.NewSigner()
	old := must(http.NewRequest(http.MethodGet, s.S3URL()+"/pre/k%20v%2Bx?X-Amz-Expires=60", nil))
	uri, _ := must2(signer.PresignHTTP(ctx, aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret},
		old, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-2*time.Minute)))
	resp = must(http.Get(uri))
	msg := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 403 || !bytes.Contains(msg, []byte("expired")) {
		t.Fatalf("expired presigned URL: %d %s", resp.StatusCode, msg)
	}
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func TestSDKAuth(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("priv")}))
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("priv"), Key: aws.String("k"), Body: strings.NewReader("secret")}))

	_, err := sdk(t, s, servertest.Root, "wrong-secret").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("priv"), Key: aws.String("k")})
	wantCode(t, err, "SignatureDoesNotMatch")
	_, err = sdk(t, s, "NOSUCHKEY", "x").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("priv"), Key: aws.String("k")})
	wantCode(t, err, "InvalidAccessKeyId")

	// Anonymous: refused on a private bucket, allowed to read a public one.
	resp := must(http.Get(s.S3URL() + "/priv/k"))
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Amz-Request-Id") == "" {
		t.Fatalf("anonymous GET of a private object: %d", resp.StatusCode)
	}
	applied := nsChanged(t, s, "priv")
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("priv"), ACL: types.BucketCannedACLPublicRead}))
	applied() // the namespace change reaches the gateway's cache by event
	resp = must(http.Get(s.S3URL() + "/priv/k"))
	body := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "secret" {
		t.Fatalf("anonymous GET of a public object: %d %q", resp.StatusCode, body)
	}
	req := must(http.NewRequest(http.MethodPut, s.S3URL()+"/priv/k2", strings.NewReader("x")))
	resp = must(http.DefaultClient.Do(req))
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("anonymous PUT to a public bucket: %d", resp.StatusCode)
	}

	// Clock skew.
	signer := v4.NewSigner()
	sk := must(http.NewRequest(http.MethodGet, s.S3URL()+"/priv/k", nil))
	sk.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if err := signer.SignHTTP(ctx, aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret},
		sk, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	resp = must(http.DefaultClient.Do(sk))
	msg := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 403 || !bytes.Contains(msg, []byte("RequestTimeTooSkewed")) {
		t.Fatalf("skewed request: %d %s", resp.StatusCode, msg)
	}

	// Users, keys and grants: a key with a read grant reads, cannot write.
	m := s.Client().Meta()
	ctx = meta.OnBehalfOf(ctx, servertest.Root) // administration is root's
	must(m.S3CreateUser(ctx, &metapb.S3User{Name: "alice"}))
	k := must(m.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: "alice",
		Grants: map[string]metapb.S3Access{"priv": metapb.S3Access_S3_READ}}))
	applied = nsChanged(t, s, "priv")
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("priv"), ACL: types.BucketCannedACLPrivate}))
	applied()
	alice := sdk(t, s, k.Key.AccessKey, k.Secret)
	if got := getBody(t, alice, "priv", "k"); string(got) != "secret" {
		t.Fatalf("granted read: %q", got)
	}
	_, err = alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("priv"), Key: aws.String("k"), Body: strings.NewReader("mine")})
	wantCode(t, err, "AccessDenied")
	// Alice's own bucket is hers; root's other buckets are not listed to her.
	must(alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alices")}))
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("roots")}))
	lb := must(alice.ListBuckets(ctx, &s3.ListBucketsInput{}))
	var names []string
	for _, b := range lb.Buckets {
		names = append(names, *b.Name)
	}
	if strings.Join(names, ",") != "alices,priv" {
		t.Fatalf("alice's buckets: %q", names)
	}
	_, err = alice.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("roots"), Key: aws.String("k"), Body: strings.NewReader("x")})
	wantCode(t, err, "AccessDenied")
	_, err = alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("roots")})
	wantCode(t, err, "BucketAlreadyExists")

	// A write grant: objects and uploads, not the bucket's ACL.
	bob := newKey(t, m, "bob", map[string]metapb.S3Access{"roots": metapb.S3Access_S3_WRITE})
	bc := sdk(t, s, bob.Key.AccessKey, bob.Secret)
	must(bc.PutObject(ctx, putInput("roots", "from/bob", "bob's")))
	if got := getBody(t, bc, "roots", "from/bob"); string(got) != "bob's" {
		t.Fatalf("write grant, read back: %q", got)
	}
	must(bc.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("roots"), Key: aws.String("from/bob2"), CopySource: aws.String("roots/from/bob")}))
	up := must(bc.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("roots"), Key: aws.String("mp")}))
	must(bc.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("roots"), Key: aws.String("mp"), UploadId: up.UploadId}))
	must(bc.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("roots"), Key: aws.String("from/bob")}))
	_, err = bc.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("roots"), ACL: types.BucketCannedACLPublicRead})
	wantCode(t, err, "AccessDenied")
	// A read grant does not let alice delete or copy out of the bucket into it.
	must(m.S3Grant(ctx, &metapb.S3GrantRequest{AccessKey: k.Key.AccessKey, Bucket: "roots", Access: metapb.S3Access_S3_READ}))
	_, err = alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("priv"), Key: aws.String("k")})
	wantCode(t, err, "AccessDenied")
	_, err = alice.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("priv"), Key: aws.String("k3"), CopySource: aws.String("priv/k")})
	wantCode(t, err, "AccessDenied")
	// Bob cannot copy from a bucket he has no grant on into his.
	_, err = bc.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("roots"), Key: aws.String("stolen"), CopySource: aws.String("priv/k")})
	wantCode(t, err, "AccessDenied")

	// UNSIGNED-PAYLOAD in a header-signed request, as SDKs send over TLS.
	unsigned := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.S3URL()), Region: "us-east-1", UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(servertest.Root, servertest.RootSecret, ""),
		APIOptions:  []func(*middleware.Stack) error{v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware},
	})
	must(unsigned.PutObject(ctx, putInput("roots", "unsigned", "no payload hash")))
	if got := getBody(t, unsigned, "roots", "unsigned"); string(got) != "no payload hash" {
		t.Fatalf("UNSIGNED-PAYLOAD PUT stored %q", got)
	}

	// Anonymous: a public bucket is readable and listable, not writable;
	// the bucket list needs a key. Every answer has a request id, and an
	// error's XML names the same one.
	must(c.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("roots"), ACL: types.BucketCannedACLPublicRead}))
	anon := s3.New(s3.Options{BaseEndpoint: aws.String(s.S3URL()), Region: "us-east-1", UsePathStyle: true,
		RetryMaxAttempts: 1, Credentials: aws.AnonymousCredentials{}})
	if l := must(anon.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("roots")})); len(l.Contents) != 2 {
		t.Fatalf("anonymous listing of a public bucket: %+v", l.Contents)
	}
	_, err = anon.ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, err, "AccessDenied")
	_, err = anon.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("roots"), Key: aws.String("unsigned")})
	wantCode(t, err, "AccessDenied")
	resp = must(http.Get(s.S3URL() + "/roots/unsigned"))
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Header.Get("X-Amz-Request-Id")) != 16 {
		t.Fatalf("anonymous GET of a public object: %d, request id %q", resp.StatusCode, resp.Header.Get("X-Amz-Request-Id"))
	}
	resp = must(http.Get(s.S3URL() + "/priv/k"))
	body = must(io.ReadAll(resp.Body))
	resp.Body.Close()
	id := resp.Header.Get("X-Amz-Request-Id")
	if resp.StatusCode != 403 || id == "" || !bytes.Contains(body, []byte("<RequestId>"+id+"</RequestId>")) ||
		!bytes.Contains(body, []byte("<Code>AccessDenied</Code>")) {
		t.Fatalf("anonymous GET of a private object: %d, request id %q, %s", resp.StatusCode, id, body)
	}
}

// ensure the client package's Stored type stays what the S3 layer needs
var _ = client.Stored{}

// TestSweepUploads: uploads older than the cut-off are aborted, their
// parts released; newer ones stay.
func TestSweepUploads(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("sweep")))
	old := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("sweep"), Key: aws.String("old")}))
	must(c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("sweep"), Key: aws.String("old"), UploadId: old.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("abandoned")}))
	srv := must(s3api.New(s3api.Config{Client: s.Client(), UploadMaxAge: -1}))
	defer srv.Close()
	n := must(srv.SweepUploads(ctx, time.Now().Add(-time.Hour)))
	if n != 0 {
		t.Fatalf("swept %d uploads younger than the cut-off", n)
	}
	n = must(srv.SweepUploads(ctx, time.Now().Add(time.Second)))
	if n != 1 {
		t.Fatalf("swept %d uploads, want 1", n)
	}
	_, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("sweep"), Key: aws.String("old"), UploadId: old.UploadId})
	wantCode(t, err, "NoSuchUpload")

	// The server sweeps by itself, every UploadSweep, uploads older than
	// UploadMaxAge (--s3-upload-max-age).
	left := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("sweep"), Key: aws.String("left")}))
	auto := must(s3api.New(s3api.Config{Client: s.Client(), UploadMaxAge: time.Millisecond, UploadSweep: 10 * time.Millisecond}))
	defer auto.Close()
	await.Until(t, 30*time.Second, "the sweep of an upload older than UploadMaxAge", func() bool {
		_, err = c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("sweep"), Key: aws.String("left"), UploadId: left.UploadId})
		return err != nil
	})
	wantCode(t, err, "NoSuchUpload")
}
