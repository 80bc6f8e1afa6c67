package s3_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/cors"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"

	"cairn/server"
	"cairn/server/servertest"
)

// minioCore is a minio-go client (and its low-level Core, which exposes
// the multipart calls one by one) signed with key and secret. trailing
// lets it send checksums as signed aws-chunked trailers.
func minioCore(t *testing.T, s *server.Server, key, secret string, trailing bool) *minio.Core {
	t.Helper()
	u := must(url.Parse(s.S3URL()))
	return must(minio.NewCore(u.Host, &minio.Options{
		Creds: credentials.NewStaticV4(key, secret, ""), Region: "us-east-1",
		BucketLookup: minio.BucketLookupPath, TrailingHeaders: trailing,
	}))
}

// wantMinio fails unless err is an S3 error with the given code and a
// request id.
func wantMinio(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %s, got success", code)
	}
	e := minio.ToErrorResponse(err)
	if e.Code != code {
		t.Fatalf("want %s, got %q (%v)", code, e.Code, err)
	}
	if e.RequestID == "" {
		t.Fatalf("%s without a request id", code)
	}
}

func readMinio(t *testing.T, mc *minio.Client, bucket, key string, opts minio.GetObjectOptions) ([]byte, error) {
	t.Helper()
	o, err := mc.GetObject(context.Background(), bucket, key, opts)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}

// TestMinioBuckets covers the bucket calls with minio-go: listing,
// location, versioning, CORS, tags and the errors of bucket life.
func TestMinioBuckets(t *testing.T) {
	s := start(t)
	mc := minioCore(t, s, servertest.Root, servertest.RootSecret, false).Client
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, "mbkt", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	wantMinio(t, mc.MakeBucket(ctx, "mbkt", minio.MakeBucketOptions{}), "BucketAlreadyOwnedByYou")
	bs := must(mc.ListBuckets(ctx))
	if len(bs) != 1 || bs[0].Name != "mbkt" || bs[0].CreationDate.IsZero() {
		t.Fatalf("ListBuckets: %+v", bs)
	}
	if loc := must(mc.GetBucketLocation(ctx, "mbkt")); loc != "us-east-1" {
		t.Fatalf("GetBucketLocation: %q", loc)
	}
	if v := must(mc.GetBucketVersioning(ctx, "mbkt")); v.Status != "" {
		t.Fatalf("GetBucketVersioning: %+v", v)
	}

	rule := cors.Rule{AllowedOrigin: []string{"https://web.example"}, AllowedMethod: []string{"GET", "HEAD"},
		AllowedHeader: []string{"*"}, ExposeHeader: []string{"ETag"}, MaxAgeSeconds: 60}
	if err := mc.SetBucketCors(ctx, "mbkt", cors.NewConfig([]cors.Rule{rule})); err != nil {
		t.Fatal(err)
	}
	cc := must(mc.GetBucketCors(ctx, "mbkt"))
	if len(cc.CORSRules) != 1 || cc.CORSRules[0].AllowedOrigin[0] != "https://web.example" || cc.CORSRules[0].MaxAgeSeconds != 60 {
		t.Fatalf("GetBucketCors: %+v", cc)
	}
	if err := mc.SetBucketCors(ctx, "mbkt", nil); err != nil { // DELETE ?cors
		t.Fatal(err)
	}
	if cc, err := mc.GetBucketCors(ctx, "mbkt"); err == nil && cc != nil && len(cc.CORSRules) > 0 {
		t.Fatalf("CORS rules after their deletion: %+v", cc)
	}

	bt := must(tags.NewTags(map[string]string{"team": "infra"}, false))
	if err := mc.SetBucketTagging(ctx, "mbkt", bt); err != nil {
		t.Fatal(err)
	}
	if got := must(mc.GetBucketTagging(ctx, "mbkt")).ToMap(); got["team"] != "infra" || len(got) != 1 {
		t.Fatalf("GetBucketTagging: %v", got)
	}
	if err := mc.RemoveBucketTagging(ctx, "mbkt"); err != nil {
		t.Fatal(err)
	}
	_, err := mc.GetBucketTagging(ctx, "mbkt")
	wantMinio(t, err, "NoSuchTagSet")

	must(mc.PutObject(ctx, "mbkt", "k", strings.NewReader("x"), 1, minio.PutObjectOptions{}))
	wantMinio(t, mc.RemoveBucket(ctx, "mbkt"), "BucketNotEmpty")
	if err := mc.RemoveObject(ctx, "mbkt", "k", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mc.RemoveBucket(ctx, "mbkt"); err != nil {
		t.Fatal(err)
	}
	wantMinio(t, mc.RemoveBucket(ctx, "mbkt"), "NoSuchBucket")

	// Another key: its signature, its grants, someone else's bucket name.
	if err := mc.MakeBucket(ctx, "rootonly", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	m := s.Client().Meta()
	k := newKey(t, m, "carol", nil)
	carol := minioCore(t, s, k.Key.AccessKey, k.Secret, false).Client
	wantMinio(t, carol.MakeBucket(ctx, "rootonly", minio.MakeBucketOptions{}), "BucketAlreadyExists")
	_, err = carol.StatObject(ctx, "rootonly", "k", minio.StatObjectOptions{})
	if minio.ToErrorResponse(err).StatusCode != http.StatusForbidden {
		t.Fatalf("a key without a grant read another's bucket: %v", err)
	}
	_, err = carol.GetBucketTagging(ctx, "rootonly")
	wantMinio(t, err, "AccessDenied")
	bad := minioCore(t, s, servertest.Root, "not-the-secret", false).Client
	_, err = bad.ListBuckets(ctx)
	wantMinio(t, err, "SignatureDoesNotMatch")
}

// TestMinioObjects covers object calls with minio-go: checksums (as
// headers and as signed aws-chunked trailers), Content-MD5, conditional
// and ranged GETs, response overrides, copy directives and conditions,
// object ACL and tags, and listing parameters.
func TestMinioObjects(t *testing.T) {
	s := start(t)
	core := minioCore(t, s, servertest.Root, servertest.RootSecret, true)
	mc := core.Client
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, "objs", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	data := randBytes(100 << 10)
	crc := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	sha := sha256.Sum256(data)
	for _, c := range []struct {
		key  string
		opts minio.PutObjectOptions
		sum  func(minio.UploadInfo) string // the checksum the server verified and echoed
		want string
	}{
		{"crc32c", minio.PutObjectOptions{Checksum: minio.ChecksumCRC32C}, func(u minio.UploadInfo) string { return u.ChecksumCRC32C },
			base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc))},
		{"sha256", minio.PutObjectOptions{Checksum: minio.ChecksumSHA256}, func(u minio.UploadInfo) string { return u.ChecksumSHA256 },
			base64.StdEncoding.EncodeToString(sha[:])},
		{"md5", minio.PutObjectOptions{SendContentMd5: true}, func(minio.UploadInfo) string { return "" }, ""},
	} {
		up, err := mc.PutObject(ctx, "objs", c.key, bytes.NewReader(data), int64(len(data)), c.opts)
		if err != nil {
			t.Fatalf("PutObject %s: %v", c.key, err)
		}
		if got := c.sum(up); got != c.want {
			t.Fatalf("PutObject %s: checksum echoed %q, want %q", c.key, got, c.want)
		}
		if got := must(readMinio(t, mc, "objs", c.key, minio.GetObjectOptions{})); !bytes.Equal(got, data) {
			t.Fatalf("%s: other bytes back", c.key)
		}
	}
	// A wrong Content-MD5 stores nothing.
	wrong := md5.Sum([]byte("other"))
	_, err := core.PutObject(ctx, "objs", "badmd5", bytes.NewReader(data), int64(len(data)),
		base64.StdEncoding.EncodeToString(wrong[:]), "", minio.PutObjectOptions{})
	wantMinio(t, err, "BadDigest")
	if _, err := mc.StatObject(ctx, "objs", "badmd5", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("an object with a bad Content-MD5: %v", err)
	}

	info := must(mc.PutObject(ctx, "objs", "doc.txt", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		ContentType: "text/x-doc", ContentEncoding: "identity", ContentDisposition: "inline", CacheControl: "no-cache",
		UserMetadata: map[string]string{"Owner": "dana"}, UserTags: map[string]string{"a": "1"},
	}))
	st := must(mc.StatObject(ctx, "objs", "doc.txt", minio.StatObjectOptions{}))
	if st.ETag != info.ETag || st.ContentType != "text/x-doc" || st.UserMetadata["Owner"] != "dana" ||
		st.Metadata.Get("Cache-Control") != "no-cache" || st.Metadata.Get("Content-Disposition") != "inline" ||
		st.Metadata.Get("Content-Encoding") != "identity" {
		t.Fatalf("StatObject: %+v", st)
	}

	// Conditional GETs.
	var o minio.GetObjectOptions
	o.SetMatchETag(info.ETag)
	if got, err := readMinio(t, mc, "objs", "doc.txt", o); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("If-Match of the ETag: %v", err)
	}
	o = minio.GetObjectOptions{}
	o.SetMatchETag("0123")
	_, err = readMinio(t, mc, "objs", "doc.txt", o)
	wantMinio(t, err, "PreconditionFailed")
	o = minio.GetObjectOptions{}
	o.SetUnmodified(time.Now().Add(-time.Hour))
	_, err = readMinio(t, mc, "objs", "doc.txt", o)
	wantMinio(t, err, "PreconditionFailed")
	o = minio.GetObjectOptions{}
	o.SetMatchETagExcept(info.ETag)
	_, err = mc.StatObject(ctx, "objs", "doc.txt", o)
	if minio.ToErrorResponse(err).StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match of the ETag: %v", err)
	}
	o = minio.GetObjectOptions{}
	o.SetModified(time.Now().Add(time.Hour))
	_, err = mc.StatObject(ctx, "objs", "doc.txt", o)
	if minio.ToErrorResponse(err).StatusCode != http.StatusNotModified {
		t.Fatalf("If-Modified-Since the future: %v", err)
	}
	o = minio.GetObjectOptions{}
	o.SetModified(time.Now().Add(-time.Hour))
	if _, err := mc.StatObject(ctx, "objs", "doc.txt", o); err != nil {
		t.Fatalf("If-Modified-Since an hour ago: %v", err)
	}
	o = minio.GetObjectOptions{}
	o.SetRange(int64(len(data)), int64(len(data))+10)
	_, err = readMinio(t, mc, "objs", "doc.txt", o)
	wantMinio(t, err, "InvalidRange")
	o = minio.GetObjectOptions{}
	o.SetRange(0, 0)
	if got := must(readMinio(t, mc, "objs", "doc.txt", o)); !bytes.Equal(got, data[:1]) {
		t.Fatalf("first byte: %v", got)
	}

	// response-* overrides on a header-signed GET.
	o = minio.GetObjectOptions{}
	over := map[string]string{
		"response-content-type": "application/x-over", "response-content-disposition": `attachment; filename="x"`,
		"response-cache-control": "max-age=9", "response-content-language": "fr",
		"response-content-encoding": "x-enc", "response-expires": "Thu, 01 Jan 2037 00:00:00 GMT",
	}
	for k, v := range over {
		o.SetReqParam(k, v)
	}
	st = must(mc.StatObject(ctx, "objs", "doc.txt", o))
	for k, v := range over {
		h := map[string]string{"response-content-type": "Content-Type", "response-content-disposition": "Content-Disposition",
			"response-cache-control": "Cache-Control", "response-content-language": "Content-Language",
			"response-content-encoding": "Content-Encoding", "response-expires": "Expires"}[k]
		got := st.Metadata.Get(h)
		if h == "Expires" { // minio-go moves it to a field
			got = st.Expires.Format(http.TimeFormat)
		}
		if got != v {
			t.Errorf("%s: %s is %q, want %q", k, h, got, v)
		}
	}

	// Copy: REPLACE directives for metadata and tags, source conditions.
	must(mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: "objs", Object: "copy/replaced", ReplaceMetadata: true,
		UserMetadata: map[string]string{"Owner": "erin"}, ContentType: "text/x-new", ReplaceTags: true, UserTags: map[string]string{"b": "2"}},
		minio.CopySrcOptions{Bucket: "objs", Object: "doc.txt", MatchETag: info.ETag}))
	st = must(mc.StatObject(ctx, "objs", "copy/replaced", minio.StatObjectOptions{}))
	if st.UserMetadata["Owner"] != "erin" || st.ContentType != "text/x-new" || st.ETag != info.ETag {
		t.Fatalf("copy with REPLACE: %+v", st)
	}
	if tg := must(mc.GetObjectTagging(ctx, "objs", "copy/replaced", minio.GetObjectTaggingOptions{})).ToMap(); tg["b"] != "2" || len(tg) != 1 {
		t.Fatalf("copy with tagging REPLACE: %v", tg)
	}
	must(mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: "objs", Object: "copy/kept"}, minio.CopySrcOptions{Bucket: "objs", Object: "doc.txt"}))
	st = must(mc.StatObject(ctx, "objs", "copy/kept", minio.StatObjectOptions{}))
	if st.UserMetadata["Owner"] != "dana" || st.ContentType != "text/x-doc" {
		t.Fatalf("copy with COPY: %+v", st)
	}
	for _, src := range []minio.CopySrcOptions{
		{Bucket: "objs", Object: "doc.txt", MatchETag: "0123"},
		{Bucket: "objs", Object: "doc.txt", NoMatchETag: info.ETag},
		{Bucket: "objs", Object: "doc.txt", MatchUnmodifiedSince: time.Now().Add(-time.Hour)},
		{Bucket: "objs", Object: "doc.txt", MatchModifiedSince: time.Now().Add(time.Hour)},
	} {
		_, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: "objs", Object: "copy/never"}, src)
		wantMinio(t, err, "PreconditionFailed")
	}
	_, err = mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: "objs", Object: "copy/never"}, minio.CopySrcOptions{Bucket: "objs", Object: "absent"})
	wantMinio(t, err, "NoSuchKey")

	// Object ACL (the bucket's), tags removed.
	acl := must(mc.GetObjectACL(ctx, "objs", "doc.txt"))
	if len(acl.Grant) != 1 || acl.Grant[0].Permission != "FULL_CONTROL" {
		t.Fatalf("GetObjectACL: %+v", acl.Grant)
	}
	if err := mc.RemoveObjectTagging(ctx, "objs", "doc.txt", minio.RemoveObjectTaggingOptions{}); err != nil {
		t.Fatal(err)
	}
	if tg := must(mc.GetObjectTagging(ctx, "objs", "doc.txt", minio.GetObjectTaggingOptions{})).ToMap(); len(tg) != 0 {
		t.Fatalf("tags after RemoveObjectTagging: %v", tg)
	}
	_, err = readMinio(t, mc, "objs", "absent", minio.GetObjectOptions{})
	wantMinio(t, err, "NoSuchKey")
	_, err = readMinio(t, mc, "nobucket", "absent", minio.GetObjectOptions{})
	wantMinio(t, err, "NoSuchBucket")

	// Listing: V2 (minio-go always asks for encoding-type=url and
	// fetch-owner) with start-after and pages, then V1 with a marker.
	for _, k := range []string{"l/a b", "l/a+b", "l/é", "l/sub/x", "l/sub/y", "l/z%"} {
		must(mc.PutObject(ctx, "objs", k, strings.NewReader(k), int64(len(k)), minio.PutObjectOptions{}))
	}
	var keys []string
	for obj := range mc.ListObjects(ctx, "objs", minio.ListObjectsOptions{Prefix: "l/", Recursive: true, MaxKeys: 2, StartAfter: "l/a b"}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if obj.Owner.ID != servertest.Root {
			t.Fatalf("fetch-owner: %+v", obj.Owner)
		}
		keys = append(keys, obj.Key)
	}
	if strings.Join(keys, ",") != "l/a+b,l/sub/x,l/sub/y,l/z%,l/é" {
		t.Fatalf("V2 listing after start-after: %q", keys)
	}
	v2 := must(core.ListObjectsV2("objs", "l/", "", "", "/", 3))
	if len(v2.Contents) != 2 || len(v2.CommonPrefixes) != 1 || v2.CommonPrefixes[0].Prefix != "l/sub/" || !v2.IsTruncated {
		t.Fatalf("V2 delimited page: %+v", v2)
	}
	v2 = must(core.ListObjectsV2("objs", "l/", "", v2.NextContinuationToken, "/", 3))
	if len(v2.Contents) != 2 || v2.Contents[0].Key != "l/z%" || v2.IsTruncated {
		t.Fatalf("V2 second page: %+v", v2)
	}
	v1 := must(core.ListObjects("objs", "l/", "l/a+b", "/", 1000))
	if len(v1.Contents) != 2 || v1.Contents[0].Key != "l/z%" || len(v1.CommonPrefixes) != 1 {
		t.Fatalf("V1 listing after a marker: %+v", v1)
	}
}

// TestMinioMultipart drives a multipart upload call by call with
// minio-go's Core: parts, part copies, ListParts and
// ListMultipartUploads with their markers, the S3 ETag, the errors of
// completion, abort.
func TestMinioMultipart(t *testing.T) {
	s := start(t)
	core := minioCore(t, s, servertest.Root, servertest.RootSecret, false)
	mc := core.Client
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, "mpu", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	src := randBytes(6 << 20)
	must(mc.PutObject(ctx, "mpu", "src.bin", bytes.NewReader(src), int64(len(src)), minio.PutObjectOptions{DisableMultipart: true}))

	var ids []string
	for _, k := range []string{"up/a", "up/a", "up/b", "other"} {
		ids = append(ids, must(core.NewMultipartUpload(ctx, "mpu", k, minio.PutObjectOptions{ContentType: "application/x-mp"})))
	}
	// ListMultipartUploads by pages of one, and by prefix.
	var seen []string
	keyMarker, idMarker := "", ""
	for {
		l := must(core.ListMultipartUploads(ctx, "mpu", "", keyMarker, idMarker, "", 1))
		for _, u := range l.Uploads {
			seen = append(seen, u.Key)
		}
		if !l.IsTruncated {
			break
		}
		keyMarker, idMarker = l.NextKeyMarker, l.NextUploadIDMarker
	}
	if strings.Join(seen, ",") != "other,up/a,up/a,up/b" {
		t.Fatalf("ListMultipartUploads pages: %q", seen)
	}
	if l := must(core.ListMultipartUploads(ctx, "mpu", "up/", "", "", "", 1000)); len(l.Uploads) != 3 {
		t.Fatalf("ListMultipartUploads with a prefix: %+v", l.Uploads)
	}
	var inc []string
	for u := range mc.ListIncompleteUploads(ctx, "mpu", "up/", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		inc = append(inc, u.Key)
	}
	if len(inc) != 3 {
		t.Fatalf("ListIncompleteUploads: %q", inc)
	}
	if err := mc.RemoveIncompleteUpload(ctx, "mpu", "up/b"); err != nil {
		t.Fatal(err)
	}
	if err := core.AbortMultipartUpload(ctx, "mpu", "other", ids[3]); err != nil {
		t.Fatal(err)
	}
	wantMinio(t, core.AbortMultipartUpload(ctx, "mpu", "other", ids[3]), "NoSuchUpload")

	// Upload "up/a" (ids[0]): a part of data, two parts copied from a
	// range of src, and a small last part.
	id := ids[0]
	p1data := randBytes(5 << 20)
	p1 := must(core.PutObjectPart(ctx, "mpu", "up/a", id, 1, bytes.NewReader(p1data), int64(len(p1data)), minio.PutObjectPartOptions{}))
	p2 := must(core.CopyObjectPart(ctx, "mpu", "src.bin", "mpu", "up/a", id, 2, 1<<20, 5<<20, nil))
	p3 := must(core.CopyObjectPart(ctx, "mpu", "src.bin", "mpu", "up/a", id, 3, 0, 100, nil))
	if want := fmt.Sprintf("%x", md5.Sum(src[1<<20:6<<20])); strings.Trim(p2.ETag, `"`) != want {
		t.Fatalf("UploadPartCopy ETag %s, want %s", p2.ETag, want)
	}
	lp := must(core.ListObjectParts(ctx, "mpu", "up/a", id, 0, 2))
	if len(lp.ObjectParts) != 2 || !lp.IsTruncated || lp.NextPartNumberMarker != 2 || lp.ObjectParts[1].Size != 5<<20 {
		t.Fatalf("ListParts page 1: %+v", lp)
	}
	lp = must(core.ListObjectParts(ctx, "mpu", "up/a", id, lp.NextPartNumberMarker, 2))
	if len(lp.ObjectParts) != 1 || lp.ObjectParts[0].PartNumber != 3 || lp.IsTruncated {
		t.Fatalf("ListParts page 2: %+v", lp)
	}
	parts := []minio.CompletePart{{PartNumber: 1, ETag: p1.ETag}, {PartNumber: 2, ETag: p2.ETag}, {PartNumber: 3, ETag: p3.ETag}}
	_, err := core.CompleteMultipartUpload(ctx, "mpu", "up/a", id, []minio.CompletePart{parts[1], parts[0]}, minio.PutObjectOptions{})
	wantMinio(t, err, "InvalidPartOrder")
	_, err = core.CompleteMultipartUpload(ctx, "mpu", "up/a", id, []minio.CompletePart{parts[0], {PartNumber: 2, ETag: p1.ETag}}, minio.PutObjectOptions{})
	wantMinio(t, err, "InvalidPart")
	_, err = core.CompleteMultipartUpload(ctx, "mpu", "up/a", id, []minio.CompletePart{parts[0], {PartNumber: 4, ETag: p3.ETag}}, minio.PutObjectOptions{})
	wantMinio(t, err, "InvalidPart") // never uploaded
	// Part 3 (100 bytes) followed by another part is too small.
	p4 := must(core.PutObjectPart(ctx, "mpu", "up/a", id, 4, strings.NewReader("end"), 3, minio.PutObjectPartOptions{}))
	_, err = core.CompleteMultipartUpload(ctx, "mpu", "up/a", id, []minio.CompletePart{parts[0], parts[2], {PartNumber: 4, ETag: p4.ETag}}, minio.PutObjectOptions{})
	wantMinio(t, err, "EntityTooSmall")

	up := must(core.CompleteMultipartUpload(ctx, "mpu", "up/a", id, parts, minio.PutObjectOptions{}))
	var sums []byte
	whole := bytes.Join([][]byte{p1data, src[1<<20 : 6<<20], src[:100]}, nil)
	for _, p := range [][]byte{p1data, src[1<<20 : 6<<20], src[:100]} {
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	if want := fmt.Sprintf("%x-3", md5.Sum(sums)); strings.Trim(up.ETag, `"`) != want {
		t.Fatalf("multipart ETag %s, want %s", up.ETag, want)
	}
	if got := must(readMinio(t, mc, "mpu", "up/a", minio.GetObjectOptions{})); !bytes.Equal(got, whole) {
		t.Fatal("completed object differs from its parts")
	}
	if st := must(mc.StatObject(ctx, "mpu", "up/a", minio.StatObjectOptions{})); st.ContentType != "application/x-mp" {
		t.Fatalf("content type of CreateMultipartUpload lost: %q", st.ContentType)
	}
	_, err = core.ListObjectParts(ctx, "mpu", "up/a", id, 0, 0)
	wantMinio(t, err, "NoSuchUpload")
	// The remaining upload (ids[1]) is still listed; ComposeObject
	// (UploadPartCopy from several sources) works.
	if l := must(core.ListMultipartUploads(ctx, "mpu", "", "", "", "", 1000)); len(l.Uploads) != 1 || l.Uploads[0].UploadID != ids[1] {
		t.Fatalf("uploads left: %+v", l.Uploads)
	}
	must(mc.ComposeObject(ctx, minio.CopyDestOptions{Bucket: "mpu", Object: "composed"},
		minio.CopySrcOptions{Bucket: "mpu", Object: "up/a"}, minio.CopySrcOptions{Bucket: "mpu", Object: "src.bin", MatchRange: true, Start: 10, End: 19}))
	if got := must(readMinio(t, mc, "mpu", "composed", minio.GetObjectOptions{})); !bytes.Equal(got, append(whole[:len(whole):len(whole)], src[10:20]...)) {
		t.Fatalf("composed object: %d bytes", len(got))
	}
}
