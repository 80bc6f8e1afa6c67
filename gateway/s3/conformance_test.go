package s3_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"cairn/server/servertest"
)

// The tests in this file are the cases an S3 conformance suite found
// wrong, one test per behaviour.

// TestUserMetaCase: x-amz-meta-* names come back as sent (lower-case),
// not in Go's canonical form. Go's HTTP client canonicalises what it
// reads, so the answer is read off the wire.
func TestUserMetaCase(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("meta"), ACL: types.BucketCannedACLPublicRead}))
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("meta"), Key: aws.String("k"), Body: strings.NewReader("x"),
		Metadata: map[string]string{"meta1": "v1", "Other-Name": "v2"}}))
	u := must(url.Parse(s.S3URL()))
	conn := must(net.Dial("tcp", u.Host))
	defer conn.Close()
	fmt.Fprintf(conn, "HEAD /meta/k HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.Host)
	head := must(io.ReadAll(bufio.NewReader(conn)))
	for _, want := range []string{"\r\nx-amz-meta-meta1: v1\r\n", "\r\nx-amz-meta-other-name: v2\r\n"} {
		if !bytes.Contains(head, []byte(want)) {
			t.Fatalf("HEAD answer lacks %q:\n%s", strings.TrimSpace(want), head)
		}
	}
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("meta"), Key: aws.String("k")}))
	if h.Metadata["meta1"] != "v1" || h.Metadata["other-name"] != "v2" {
		t.Fatalf("SDK metadata %v", h.Metadata)
	}
}

// TestChecksums: the checksum a PUT was verified with is stored and given
// back by HEAD and GET with ChecksumMode, and by GetObjectAttributes;
// CRC64NVME is verified too; CreateMultipartUpload echoes the algorithm.
func TestChecksums(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("sums")))
	for _, algo := range []types.ChecksumAlgorithm{types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c,
		types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256, types.ChecksumAlgorithmCrc64nvme} {
		key := aws.String("k-" + string(algo))
		put := must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("sums"), Key: key,
			Body: strings.NewReader("checksummed body"), ChecksumAlgorithm: algo}))
		sent := map[types.ChecksumAlgorithm]*string{types.ChecksumAlgorithmCrc32: put.ChecksumCRC32, types.ChecksumAlgorithmCrc32c: put.ChecksumCRC32C,
			types.ChecksumAlgorithmSha1: put.ChecksumSHA1, types.ChecksumAlgorithmSha256: put.ChecksumSHA256, types.ChecksumAlgorithmCrc64nvme: put.ChecksumCRC64NVME}[algo]
		if sent == nil {
			t.Fatalf("%s: PutObject echoed no checksum", algo)
		}
		h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("sums"), Key: key, ChecksumMode: types.ChecksumModeEnabled}))
		got := map[types.ChecksumAlgorithm]*string{types.ChecksumAlgorithmCrc32: h.ChecksumCRC32, types.ChecksumAlgorithmCrc32c: h.ChecksumCRC32C,
			types.ChecksumAlgorithmSha1: h.ChecksumSHA1, types.ChecksumAlgorithmSha256: h.ChecksumSHA256, types.ChecksumAlgorithmCrc64nvme: h.ChecksumCRC64NVME}[algo]
		if got == nil || *got != *sent {
			t.Fatalf("%s: HeadObject with ChecksumMode gave %v, PUT %s", algo, got, *sent)
		}
		g := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("sums"), Key: key, ChecksumMode: types.ChecksumModeEnabled}))
		io.Copy(io.Discard, g.Body) // the SDK verifies the checksum as it reads
		g.Body.Close()
		// Without ChecksumMode, none is sent.
		if h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("sums"), Key: key})); h.ChecksumCRC32 != nil || h.ChecksumSHA256 != nil {
			t.Fatalf("%s: HeadObject without ChecksumMode sent a checksum", algo)
		}
	}
	// A CRC64NVME that does not match the body is refused.
	hdr := http.Header{"X-Amz-Checksum-Crc64nvme": {"AAAAAAAAAAA="}}
	if status, code := rawS3(t, s, http.MethodPut, "/sums/bad", hdr, []byte("body")); status != 400 || code != "BadDigest" {
		t.Fatalf("wrong CRC64NVME: %d %s", status, code)
	}
	attrs := must(c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("sums"), Key: aws.String("k-CRC32"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesChecksum, types.ObjectAttributesEtag, types.ObjectAttributesObjectSize, types.ObjectAttributesStorageClass}}))
	if attrs.Checksum == nil || attrs.Checksum.ChecksumCRC32 == nil || *attrs.ObjectSize != int64(len("checksummed body")) ||
		attrs.StorageClass != types.StorageClassStandard || attrs.ETag == nil || strings.Contains(*attrs.ETag, `"`) {
		t.Fatalf("GetObjectAttributes: %+v", attrs)
	}
	up := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("sums"), Key: aws.String("mp"),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256}))
	if up.ChecksumAlgorithm != types.ChecksumAlgorithmSha256 {
		t.Fatalf("CreateMultipartUpload echoed %q", up.ChecksumAlgorithm)
	}
}

// TestListEncodingAndPrefix: encoding-type=url escapes keys but not '/';
// a prefix starting with '/' names no key.
func TestListEncodingAndPrefix(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("enc")))
	for _, k := range []string{"a b/c+d", "a b/e", "top"} {
		must(c.PutObject(ctx, putInput("enc", k, "x")))
	}
	resp, body := rawS3Body(t, s, http.MethodGet, "/enc?list-type=2&encoding-type=url&prefix=a%20b%2F&delimiter=%2F", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{"<Prefix>a+b/</Prefix>", "<Delimiter>/</Delimiter>", "<Key>a+b/c%2Bd</Key>", "<EncodingType>url</EncodingType>"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Fatalf("listing lacks %s:\n%s", want, body)
		}
	}
	// aws-sdk-go-v2 leaves the decoding to its caller, as form decoding.
	l := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("enc"), Prefix: aws.String("a b/"), EncodingType: types.EncodingTypeUrl}))
	if len(l.Contents) != 2 || must(url.QueryUnescape(*l.Contents[0].Key)) != "a b/c+d" {
		t.Fatalf("SDK listing: %+v", l.Contents)
	}
	for _, v2 := range []bool{true, false} {
		var n int
		if v2 {
			n = len(must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("enc"), Prefix: aws.String("/")})).Contents)
		} else {
			n = len(must(c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String("enc"), Prefix: aws.String("/")})).Contents)
		}
		if n != 0 {
			t.Fatalf("Prefix=/ (v2 %v) listed %d keys", v2, n)
		}
	}
}

// TestListBucketsPages: MaxBuckets cuts the list and the continuation
// token resumes it; Prefix filters.
func TestListBucketsPages(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	for _, b := range []string{"lb-a", "lb-b", "lb-c", "other"} {
		must(c.CreateBucket(ctx, bucketInput(b)))
	}
	var names []string
	var token *string
	for pages := 0; ; pages++ {
		if pages > 4 {
			t.Fatal("ListBuckets does not end")
		}
		out := must(c.ListBuckets(ctx, &s3.ListBucketsInput{MaxBuckets: aws.Int32(3), ContinuationToken: token}))
		if len(out.Buckets) > 3 {
			t.Fatalf("MaxBuckets 3 gave %d", len(out.Buckets))
		}
		for _, b := range out.Buckets {
			names = append(names, *b.Name)
		}
		if token = out.ContinuationToken; token == nil {
			break
		}
	}
	if strings.Join(names, ",") != "lb-a,lb-b,lb-c,other" {
		t.Fatalf("pages gave %v", names)
	}
	out := must(c.ListBuckets(ctx, &s3.ListBucketsInput{Prefix: aws.String("lb-")}))
	if len(out.Buckets) != 3 || out.ContinuationToken != nil {
		t.Fatalf("Prefix lb-: %+v", out.Buckets)
	}
	_, err := c.ListBuckets(ctx, &s3.ListBucketsInput{MaxBuckets: aws.Int32(0)})
	wantCode(t, err, "InvalidArgument")
}

// multipartObject uploads parts as one object and returns the completion.
func multipartObject(t *testing.T, c *s3.Client, bucket, key string, parts ...[]byte) (*s3.CreateMultipartUploadOutput, []types.CompletedPart) {
	t.Helper()
	ctx := context.Background()
	up := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)}))
	var done []types.CompletedPart
	for i, p := range parts {
		out := must(c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p)}))
		done = append(done, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))})
	}
	return up, done
}

// TestMultipartConformance: a repeated completion answers 200 with the
// object's ETag; If-None-Match on completion; GetObject by partNumber;
// GetObjectAttributes lists the parts; UploadPartCopy refuses a range
// past the source.
func TestMultipartConformance(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("mpc")))
	parts := [][]byte{randBytes(5 << 20), randBytes(1234)}
	up, done := multipartObject(t, c, "mpc", "obj", parts...)
	complete := &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}
	first := must(c.CompleteMultipartUpload(ctx, complete))
	again := must(c.CompleteMultipartUpload(ctx, complete))
	if *again.ETag != *first.ETag {
		t.Fatalf("repeated completion: ETag %s, first %s", *again.ETag, *first.ETag)
	}
	// A completion with other parts after the upload is gone is still NoSuchUpload.
	_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done[:1]}})
	wantCode(t, err, "NoSuchUpload")

	for i, p := range parts {
		out := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), PartNumber: aws.Int32(int32(i + 1))}))
		got := must(io.ReadAll(out.Body))
		out.Body.Close()
		if !bytes.Equal(got, p) || out.PartsCount == nil || *out.PartsCount != 2 {
			t.Fatalf("part %d: %d bytes, parts count %v", i+1, len(got), out.PartsCount)
		}
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), PartNumber: aws.Int32(3)})
	wantCode(t, err, "InvalidPartNumber")
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), PartNumber: aws.Int32(2)}))
	if *h.ContentLength != 1234 {
		t.Fatalf("HEAD part 2: length %d", *h.ContentLength)
	}
	must(c.PutObject(ctx, putInput("mpc", "simple", "one piece")))
	if got := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpc"), Key: aws.String("simple"), PartNumber: aws.Int32(1)})); *got.ContentLength != 9 {
		t.Fatalf("part 1 of a simple object: %d bytes", *got.ContentLength)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpc"), Key: aws.String("simple"), PartNumber: aws.Int32(2)})
	wantCode(t, err, "InvalidPartNumber")

	attrs := must(c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("mpc"), Key: aws.String("obj"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesObjectParts, types.ObjectAttributesObjectSize}, MaxParts: aws.Int32(1)}))
	op := attrs.ObjectParts
	if op == nil || *op.TotalPartsCount != 2 || len(op.Parts) != 1 || *op.Parts[0].Size != 5<<20 || !*op.IsTruncated || *attrs.ObjectSize != 5<<20+1234 {
		t.Fatalf("GetObjectAttributes parts: %+v", op)
	}

	// If-None-Match: * on completion refuses an existing key and keeps the upload.
	up2, done2 := multipartObject(t, c, "mpc", "obj", []byte("new"))
	complete2 := &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("obj"), UploadId: up2.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done2}, IfNoneMatch: aws.String("*")}
	_, err = c.CompleteMultipartUpload(ctx, complete2)
	wantCode(t, err, "PreconditionFailed")
	if got := getBody(t, c, "mpc", "obj"); len(got) != 5<<20+1234 {
		t.Fatalf("a refused completion replaced the object (%d bytes)", len(got))
	}
	complete2.Key = aws.String("fresh")
	_, err = c.CompleteMultipartUpload(ctx, complete2)
	wantCode(t, err, "NoSuchUpload") // an upload belongs to its key
	complete2.Key, complete2.IfNoneMatch = aws.String("obj"), nil
	must(c.CompleteMultipartUpload(ctx, complete2))
	if got := getBody(t, c, "mpc", "obj"); string(got) != "new" {
		t.Fatalf("completion after the refused one: %q", got)
	}

	// UploadPartCopy: a range past the source's end, or malformed, is refused.
	up3 := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpc"), Key: aws.String("copy")}))
	for rg, code := range map[string]string{"bytes=0-9": "InvalidRange", "bytes=5-3": "InvalidArgument", "bytes=-3": "InvalidArgument", "0-3": "InvalidArgument"} {
		_, err = c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("mpc"), Key: aws.String("copy"), UploadId: up3.UploadId,
			PartNumber: aws.Int32(1), CopySource: aws.String("mpc/simple"), CopySourceRange: aws.String(rg)})
		wantCode(t, err, code)
	}
	part := must(c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("mpc"), Key: aws.String("copy"), UploadId: up3.UploadId,
		PartNumber: aws.Int32(1), CopySource: aws.String("mpc/simple"), CopySourceRange: aws.String("bytes=4-8")}))
	if part.CopyPartResult == nil || part.CopyPartResult.ETag == nil {
		t.Fatal("UploadPartCopy of a valid range gave no ETag")
	}
}

// TestPutIfNoneMatch: If-None-Match: * refuses an existing key; an ETag
// there is not implemented by S3 either, and must not be ignored.
func TestPutIfNoneMatch(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("inm")))
	put := must(c.PutObject(ctx, putInput("inm", "k", "first")))
	in := putInput("inm", "k", "second")
	in.IfNoneMatch = put.ETag
	_, err := c.PutObject(ctx, in)
	wantCode(t, err, "NotImplemented")
	in = putInput("inm", "k", "second")
	in.IfNoneMatch = aws.String("*")
	_, err = c.PutObject(ctx, in)
	wantCode(t, err, "PreconditionFailed")
	if got := getBody(t, c, "inm", "k"); string(got) != "first" {
		t.Fatalf("object is %q", got)
	}
}

// TestPresignedExpiryLimits: X-Amz-Expires over a week or negative is
// 403 AuthorizationQueryParametersError, as S3 answers.
func TestPresignedExpiryLimits(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("pre")))
	ps := s3.NewPresignClient(c)
	get := must(ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pre"), Key: aws.String("k")}, s3.WithPresignExpires(time.Minute)))
	for _, exp := range []string{"604801", "-1", "99999999999999999"} {
		u := must(url.Parse(get.URL))
		q := u.Query()
		q.Set("X-Amz-Expires", exp)
		u.RawQuery = q.Encode()
		resp := must(http.Get(u.String()))
		body := must(io.ReadAll(resp.Body))
		resp.Body.Close()
		if resp.StatusCode != 403 || !bytes.Contains(body, []byte("<Code>AuthorizationQueryParametersError</Code>")) {
			t.Fatalf("X-Amz-Expires=%s: %d %s", exp, resp.StatusCode, body)
		}
	}
}

// TestCORSOnErrors: a browser sees the CORS headers of an error answer
// too, or it hides the error from the page.
func TestCORSOnErrors(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("web")))
	must(c.PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("web"), CORSConfiguration: &types.CORSConfiguration{
		CORSRules: []types.CORSRule{{AllowedOrigins: []string{"https://app.example"}, AllowedMethods: []string{"GET", "PUT"}}}}}))
	for _, tc := range []struct {
		name   string
		auth   bool
		status int
	}{{"anonymous (AccessDenied)", false, 403}, {"signed, missing key", true, 404}} {
		var resp *http.Response
		h := http.Header{"Origin": {"https://app.example"}}
		if tc.auth {
			resp, _ = rawS3Body(t, s, http.MethodGet, "/web/missing", h, nil)
		} else {
			req := must(http.NewRequest(http.MethodGet, s.S3URL()+"/web/missing", nil))
			req.Header = h
			resp = must(http.DefaultClient.Do(req))
			resp.Body.Close()
		}
		if resp.StatusCode != tc.status || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
			t.Fatalf("%s: %d, Access-Control-Allow-Origin %q", tc.name, resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
}

// TestListUploadsDelimiter: ListMultipartUploads groups keys by a
// delimiter into common prefixes, and url-encodes on request.
func TestListUploadsDelimiter(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("lud")))
	for _, k := range []string{"a/1", "a/2", "b c", "d/e/f"} {
		must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("lud"), Key: aws.String(k)}))
	}
	l := must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("lud"), Delimiter: aws.String("/")}))
	var cps []string
	for _, p := range l.CommonPrefixes {
		cps = append(cps, *p.Prefix)
	}
	if strings.Join(cps, ",") != "a/,d/" || len(l.Uploads) != 1 || *l.Uploads[0].Key != "b c" {
		t.Fatalf("delimited: prefixes %v, uploads %d", cps, len(l.Uploads))
	}
	l = must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("lud"), Prefix: aws.String("d/"), Delimiter: aws.String("/")}))
	if len(l.CommonPrefixes) != 1 || *l.CommonPrefixes[0].Prefix != "d/e/" {
		t.Fatalf("under d/: %+v", l.CommonPrefixes)
	}
	resp, body := rawS3Body(t, s, http.MethodGet, "/lud?uploads&encoding-type=url&prefix=b", nil, nil)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("<Key>b+c</Key>")) {
		t.Fatalf("encoded: %d %s", resp.StatusCode, body)
	}
}

// TestListObjectVersionsUnversioned: no bucket is versioned, so every
// object is one version, "null" and latest; the clean-up that test suites
// and tools do (list versions, delete each by id) empties the bucket.
func TestListObjectVersionsUnversioned(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("vers")))
	for _, k := range []string{"a", "b/c", "d"} {
		must(c.PutObject(ctx, putInput("vers", k, "x")))
	}
	var seen []types.ObjectIdentifier
	in := &s3.ListObjectVersionsInput{Bucket: aws.String("vers"), MaxKeys: aws.Int32(2)}
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("ListObjectVersions does not end")
		}
		out := must(c.ListObjectVersions(ctx, in))
		for _, v := range out.Versions {
			if *v.VersionId != "null" || !*v.IsLatest || *v.Size != 1 {
				t.Fatalf("version %+v", v)
			}
			seen = append(seen, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		if len(out.DeleteMarkers) != 0 {
			t.Fatalf("delete markers in an unversioned bucket: %+v", out.DeleteMarkers)
		}
		if !*out.IsTruncated {
			break
		}
		in.KeyMarker, in.VersionIdMarker = out.NextKeyMarker, out.NextVersionIdMarker
	}
	if len(seen) != 3 || *seen[1].Key != "b/c" {
		t.Fatalf("versions %+v", seen)
	}
	_, err := c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String("vers"), KeyMarker: aws.String("a"), VersionIdMarker: aws.String("made-up")})
	wantCode(t, err, "InvalidArgument")
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: seen[0].Key, VersionId: seen[0].VersionId}))
	del := must(c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("vers"), Delete: &types.Delete{Objects: seen[1:]}}))
	if len(del.Errors) != 0 {
		t.Fatalf("DeleteObjects of null versions: %+v", del.Errors)
	}
	must(c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("vers")}))
}

// TestExpectContinue: a PUT with Expect: 100-continue that will be
// refused gets its refusal before sending the body (no 100 Continue), and
// one that will be served gets 100 Continue first. Read off the wire.
func TestExpectContinue(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("expect")}))
	u := must(url.Parse(s.S3URL()))
	conn := must(net.Dial("tcp", u.Host))
	defer conn.Close()
	// Anonymous, to a private bucket: refused without the body.
	fmt.Fprintf(conn, "PUT /expect/k HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", u.Host)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	status := must(bufio.NewReader(conn).ReadString('\n'))
	if !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Fatalf("refused PUT with Expect: status line %q, want 403 before the body", status)
	}
	// Signed: the SDK's own Expect handling (it sends the header for
	// large bodies) leads to a stored object.
	body := randBytes(3 << 20)
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("expect"), Key: aws.String("big"), Body: bytes.NewReader(body)}))
	if got := getBody(t, c, "expect", "big"); !bytes.Equal(got, body) {
		t.Fatal("object stored with Expect differs")
	}
}

// TestExpectedOwnerAndSize: x-amz-expected-bucket-owner (and the copy
// source's) are checked, not ignored; so is x-amz-mp-object-size.
func TestExpectedOwnerAndSize(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("owned")))
	must(c.PutObject(ctx, putInput("owned", "k", "x")))
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("owned"), Key: aws.String("k"), ExpectedBucketOwner: aws.String("someone-else")})
	wantCode(t, err, "AccessDenied")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("owned"), Key: aws.String("k"), Body: strings.NewReader("y"), ExpectedBucketOwner: aws.String("someone-else")})
	wantCode(t, err, "AccessDenied")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("owned"), Key: aws.String("k2"), CopySource: aws.String("owned/k"), ExpectedSourceBucketOwner: aws.String("someone-else")})
	wantCode(t, err, "AccessDenied")
	must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("owned"), Key: aws.String("k"), ExpectedBucketOwner: aws.String(servertest.Root)}))
	if got := getBody(t, c, "owned", "k"); string(got) != "x" {
		t.Fatalf("object is %q", got)
	}

	up, done := multipartObject(t, c, "owned", "mp", []byte("abc"))
	complete := &s3.CompleteMultipartUploadInput{Bucket: aws.String("owned"), Key: aws.String("mp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}, MpuObjectSize: aws.Int64(4)}
	_, err = c.CompleteMultipartUpload(ctx, complete)
	wantCode(t, err, "InvalidRequest")
	complete.MpuObjectSize = aws.Int64(3)
	must(c.CompleteMultipartUpload(ctx, complete))
}

// TestStorageClass: a PUT with STANDARD_IA is stored (its bytes placed in
// an ec-4+2 volume) and HEAD answers its class; a class Cairn does not
// offer is InvalidStorageClass.
func TestStorageClass(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("tiers")}))
	must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tiers"), Key: aws.String("cold"), Body: strings.NewReader("cold bytes"),
		StorageClass: types.StorageClassStandardIa}))
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("tiers"), Key: aws.String("cold")}))
	if h.StorageClass != types.StorageClassStandardIa {
		t.Fatalf("HEAD storage class %q, want STANDARD_IA", h.StorageClass)
	}
	got := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("tiers"), Key: aws.String("cold")}))
	if b := must(io.ReadAll(got.Body)); string(b) != "cold bytes" {
		t.Fatalf("GET %q", b)
	}
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("tiers"), Key: aws.String("deep"), Body: strings.NewReader("x"),
		StorageClass: types.StorageClassDeepArchive})
	if err == nil || !strings.Contains(err.Error(), "InvalidStorageClass") {
		t.Fatalf("DEEP_ARCHIVE: %v, want InvalidStorageClass", err)
	}
}
