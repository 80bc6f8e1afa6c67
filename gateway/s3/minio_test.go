package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"

	"cairn/server/servertest"
)

// minio-go signs uploads over plain HTTP with STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// (aws-chunked, a signature per chunk), so these tests cover that path.
func TestMinio(t *testing.T) {
	s := start(t)
	u := must(url.Parse(s.S3URL()))
	mc := must(minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(servertest.Root, servertest.RootSecret, ""),
		Secure:       false,
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
	}))
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, "media", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok := must(mc.BucketExists(ctx, "media")); !ok {
		t.Fatal("BucketExists: false")
	}
	if ok := must(mc.BucketExists(ctx, "absent")); ok {
		t.Fatal("BucketExists of a missing bucket: true")
	}

	// A small object, streamed with signed chunks (unknown size forces
	// the streaming path too).
	data := randBytes(200 << 10)
	info := must(mc.PutObject(ctx, "media", "clips/a.bin", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		ContentType: "video/mp4", UserMetadata: map[string]string{"Camera": "x1"}, UserTags: map[string]string{"t": "1"},
	}))
	if info.Size != int64(len(data)) {
		t.Fatalf("PutObject size %d", info.Size)
	}
	obj := must(mc.GetObject(ctx, "media", "clips/a.bin", minio.GetObjectOptions{}))
	got := must(io.ReadAll(obj))
	obj.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("GetObject returned other bytes")
	}
	st := must(mc.StatObject(ctx, "media", "clips/a.bin", minio.StatObjectOptions{}))
	if st.ContentType != "video/mp4" || st.UserMetadata["Camera"] != "x1" || st.UserTagCount != 1 {
		t.Fatalf("StatObject: %+v", st)
	}
	var opts minio.GetObjectOptions
	opts.SetRange(10, 19)
	obj = must(mc.GetObject(ctx, "media", "clips/a.bin", opts))
	got = must(io.ReadAll(obj))
	obj.Close()
	if !bytes.Equal(got, data[10:20]) {
		t.Fatal("ranged GetObject")
	}
	tg := must(mc.GetObjectTagging(ctx, "media", "clips/a.bin", minio.GetObjectTaggingOptions{}))
	if tg.ToMap()["t"] != "1" {
		t.Fatalf("tags %v", tg.ToMap())
	}
	nt := must(tags.NewTags(map[string]string{"u": "2"}, true))
	if err := mc.PutObjectTagging(ctx, "media", "clips/a.bin", nt, minio.PutObjectTaggingOptions{}); err != nil {
		t.Fatal(err)
	}

	// Multipart: minio-go splits a large upload into parts in parallel.
	big := randBytes(12<<20 + 5)
	must(mc.PutObject(ctx, "media", "big.bin", bytes.NewReader(big), int64(len(big)), minio.PutObjectOptions{
		PartSize: 5 << 20, NumThreads: 3,
	}))
	obj = must(mc.GetObject(ctx, "media", "big.bin", minio.GetObjectOptions{}))
	got = must(io.ReadAll(obj))
	obj.Close()
	if !bytes.Equal(got, big) {
		t.Fatal("multipart object differs")
	}
	st = must(mc.StatObject(ctx, "media", "big.bin", minio.StatObjectOptions{}))
	if !strings.HasSuffix(st.ETag, "-3") {
		t.Fatalf("multipart ETag %s", st.ETag)
	}
	// Unknown length: minio-go streams multipart with 5 MiB+ buffers.
	must(mc.PutObject(ctx, "media", "stream.bin", io.MultiReader(bytes.NewReader(big[:6<<20])), -1, minio.PutObjectOptions{PartSize: 5 << 20}))
	st = must(mc.StatObject(ctx, "media", "stream.bin", minio.StatObjectOptions{}))
	if st.Size != 6<<20 {
		t.Fatalf("streamed size %d", st.Size)
	}

	// Server-side copy.
	must(mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: "media", Object: "copy.bin"}, minio.CopySrcOptions{Bucket: "media", Object: "big.bin"}))
	st = must(mc.StatObject(ctx, "media", "copy.bin", minio.StatObjectOptions{}))
	if st.Size != int64(len(big)) {
		t.Fatalf("copy size %d", st.Size)
	}

	// Listing.
	var keys []string
	for o := range mc.ListObjects(ctx, "media", minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	if strings.Join(keys, ",") != "big.bin,clips/a.bin,copy.bin,stream.bin" {
		t.Fatalf("ListObjects: %q", keys)
	}
	keys = nil
	for o := range mc.ListObjects(ctx, "media", minio.ListObjectsOptions{UseV1: true}) {
		keys = append(keys, o.Key)
	}
	if strings.Join(keys, ",") != "big.bin,copy.bin,stream.bin,clips/" {
		t.Fatalf("ListObjects V1 delimited: %q", keys)
	}

	// Presigned GET and PUT.
	pu := must(mc.PresignedPutObject(ctx, "media", "pre.txt", time.Minute))
	req := must(http.NewRequest(http.MethodPut, pu.String(), strings.NewReader("via presigned put")))
	resp := must(http.DefaultClient.Do(req))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %d", resp.StatusCode)
	}
	pg := must(mc.PresignedGetObject(ctx, "media", "pre.txt", time.Minute, url.Values{"response-content-type": {"text/x-pre"}}))
	resp = must(http.Get(pg.String()))
	body := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if string(body) != "via presigned put" || resp.Header.Get("Content-Type") != "text/x-pre" {
		t.Fatalf("presigned GET: %q %s", body, resp.Header.Get("Content-Type"))
	}

	// Removal, one and many.
	if err := mc.RemoveObject(ctx, "media", "pre.txt", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	ch := make(chan minio.ObjectInfo, 4)
	for _, k := range []string{"big.bin", "clips/a.bin", "copy.bin", "stream.bin"} {
		ch <- minio.ObjectInfo{Key: k}
	}
	close(ch)
	for e := range mc.RemoveObjects(ctx, "media", ch, minio.RemoveObjectsOptions{}) {
		t.Fatalf("RemoveObjects: %v", e.Err)
	}
	if err := mc.RemoveBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	_, err := mc.GetObjectTagging(ctx, "media", "x", minio.GetObjectTaggingOptions{})
	if minio.ToErrorResponse(err).Code != "NoSuchBucket" {
		t.Fatalf("an object in a removed bucket: %v", err)
	}
}
