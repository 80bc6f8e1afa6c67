package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// classOf answers the class meta records for bucket/key and the classes
// of the volumes its bytes are in.
func classOf(t *testing.T, s *server.Server, bucket, key string) (string, []string) {
	t.Helper()
	ctx := context.Background()
	f := must(s.Client().StatFresh(ctx, bucket, key))
	var ids []uint32
	for _, e := range f.Extents {
		ids = append(ids, e.Volume)
	}
	vs := must(s.Client().Meta().Volumes(ctx, &metapb.VolumesRequest{Ids: ids}))
	var vols []string
	for _, v := range vs.Volumes {
		vols = append(vols, v.StorageClass)
	}
	return f.Inode.StorageClass, vols
}

func wantClass(t *testing.T, s *server.Server, bucket, key, class string) {
	t.Helper()
	got, vols := classOf(t, s, bucket, key)
	if got != class {
		t.Fatalf("%s/%s: meta records class %q, want %q", bucket, key, got, class)
	}
	for _, v := range vols {
		if v != class {
			t.Fatalf("%s/%s (class %q): bytes in a volume of class %q", bucket, key, class, v)
		}
	}
}

// TestStorageClassBothWays: the class a PUT, CreateMultipartUpload, POST
// or CopyObject names is where the bytes go and what the file records;
// HEAD, GET, GetObjectAttributes, ListObjects (V1, V2), ListObjectVersions
// and ListMultipartUploads answer it by its S3 name; a tier move shows.
func TestStorageClassBothWays(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "classes"
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}))
	put := func(key string, class types.StorageClass) {
		t.Helper()
		must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: strings.NewReader("bytes of " + key), StorageClass: class}))
	}
	put("ia", types.StorageClassStandardIa)
	put("std", "")
	put("glacier", types.StorageClassGlacierIr)
	wantClass(t, s, b, "ia", "ec-4+2")
	wantClass(t, s, b, "std", "")
	wantClass(t, s, b, "glacier", "ec-8+4")

	// Multipart: the parts are written in the upload's class.
	mp := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(b), Key: aws.String("mp"), StorageClass: types.StorageClassGlacierIr}))
	ups := must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(b)}))
	if len(ups.Uploads) != 1 || ups.Uploads[0].StorageClass != types.StorageClassGlacierIr {
		t.Fatalf("ListMultipartUploads: %+v", ups.Uploads)
	}
	part := must(c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(b), Key: aws.String("mp"), UploadId: mp.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("one part"))}))
	must(c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(b), Key: aws.String("mp"), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}}}))
	wantClass(t, s, b, "mp", "ec-8+4")

	// A copy onto itself with another class moves the bytes; one into
	// the class it is in shares them.
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("std"), CopySource: aws.String(b + "/std"), StorageClass: types.StorageClassStandardIa}))
	wantClass(t, s, b, "std", "ec-4+2")
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("std-copy"), CopySource: aws.String(b + "/std")}))
	wantClass(t, s, b, "std-copy", "ec-4+2")
	must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("std"), CopySource: aws.String(b + "/std"), StorageClass: types.StorageClassStandard}))
	wantClass(t, s, b, "std", "")
	if got := must(io.ReadAll(must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("std")})).Body)); string(got) != "bytes of std" {
		t.Fatalf("after two class changes std reads %q", got)
	}

	want := map[string]types.StorageClass{"ia": "STANDARD_IA", "std": "STANDARD", "std-copy": "STANDARD_IA", "glacier": "GLACIER_IR", "mp": "GLACIER_IR"}
	check := func(when string) {
		t.Helper()
		for key, cls := range want {
			h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String(key)}))
			headWant := cls
			if cls == "STANDARD" {
				headWant = "" // S3 sends no header for STANDARD
			}
			if h.StorageClass != headWant {
				t.Errorf("%s: HEAD %s: %q, want %q", when, key, h.StorageClass, headWant)
			}
			g := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String(key)}))
			g.Body.Close()
			if g.StorageClass != headWant {
				t.Errorf("%s: GET %s: %q, want %q", when, key, g.StorageClass, headWant)
			}
			a := must(c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String(b), Key: aws.String(key),
				ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesStorageClass}}))
			if string(a.StorageClass) != string(cls) {
				t.Errorf("%s: GetObjectAttributes %s: %q, want %q", when, key, a.StorageClass, cls)
			}
		}
		l2 := must(c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b)}))
		l1 := must(c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: aws.String(b)}))
		lv := must(c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b)}))
		if len(l2.Contents) != len(want) || len(l1.Contents) != len(want) || len(lv.Versions) != len(want) {
			t.Fatalf("%s: listed %d, %d, %d objects, want %d", when, len(l2.Contents), len(l1.Contents), len(lv.Versions), len(want))
		}
		for i, o := range l2.Contents {
			if w := want[*o.Key]; o.StorageClass != types.ObjectStorageClass(w) || l1.Contents[i].StorageClass != types.ObjectStorageClass(w) {
				t.Errorf("%s: ListObjects %s: %q (V1 %q), want %q", when, *o.Key, o.StorageClass, l1.Contents[i].StorageClass, w)
			}
		}
		for _, v := range lv.Versions {
			if w := want[*v.Key]; v.StorageClass != types.ObjectVersionStorageClass(w) {
				t.Errorf("%s: ListObjectVersions %s: %q, want %q", when, *v.Key, v.StorageClass, w)
			}
		}
	}
	check("as written")

	// POST Object's form field.
	postClass(t, s, b, "posted", "STANDARD_IA")
	wantClass(t, s, b, "posted", "ec-4+2")
	want["posted"] = "STANDARD_IA"

	// minio-go reads the same names, and writes them.
	u := must(url.Parse(s.S3URL()))
	mc := must(minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(servertest.Root, servertest.RootSecret, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath}))
	must(mc.PutObject(ctx, b, "by-minio", strings.NewReader("minio bytes"), 11, minio.PutObjectOptions{StorageClass: "GLACIER_IR"}))
	wantClass(t, s, b, "by-minio", "ec-8+4")
	want["by-minio"] = "GLACIER_IR"
	for o := range mc.ListObjects(ctx, b, minio.ListObjectsOptions{}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.StorageClass != string(want[o.Key]) {
			t.Errorf("minio ListObjects %s: %q, want %q", o.Key, o.StorageClass, want[o.Key])
		}
	}
	st := must(mc.StatObject(ctx, b, "ia", minio.StatObjectOptions{}))
	if got := st.Metadata.Get("X-Amz-Storage-Class"); got != "STANDARD_IA" {
		t.Errorf("minio StatObject: %q, want STANDARD_IA", got)
	}

	// A tier move shows: everything goes to ec-8+4 (GLACIER_IR).
	must(s.Meta().TierSetPolicy(ctx, &metapb.TierPolicy{Ns: b, Rules: []*metapb.TierRule{{To: "ec-8+4"}}}))
	await.Until(t, 60*time.Second, "every object to move to ec-8+4", func() bool {
		for key := range want {
			if cls, _ := classOf(t, s, b, key); cls != "ec-8+4" {
				return false
			}
		}
		return true
	})
	for key := range want {
		want[key] = "GLACIER_IR"
	}
	check("after a tier move")
}

// postClass stores key with a browser-form POST (signed by minio-go's
// PresignedPostPolicy) whose x-amz-storage-class field names class.
func postClass(t *testing.T, s *server.Server, bucket, key, class string) {
	t.Helper()
	mc := minioAs(t, s, servertest.Root, servertest.RootSecret)
	p := minio.NewPostPolicy()
	p.SetBucket(bucket)
	p.SetKey(key)
	p.SetExpires(time.Now().Add(time.Hour))
	p.SetUserData("storage-class", class) // the field x-amz-storage-class, and its condition
	u, f, err := mc.PresignedPostPolicy(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := postForm(t, u.String(), f, "x", []byte("posted bytes"))
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST with x-amz-storage-class %s: %d %s", class, resp.StatusCode, body)
	}
}

// TestCachedReadsKeepFilesHot: a file read only through the gateway's
// caches (its metadata from the client's cache, its bytes from the hot
// cache: meta never resolves it) is not demoted by a rule for unread
// files, while a file nobody reads is.
func TestCachedReadsKeepFilesHot(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a file to go unread for 8 s and be demoted: not in the -short tier")
	}
	s := servertest.Start(t, func(c *server.Config) { c.TierInterval = time.Second })
	c := root(t, s)
	ctx := context.Background()
	const b = "reads"
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}))
	for _, key := range []string{"hot", "cold"} {
		must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: strings.NewReader("bytes of " + key)}))
	}
	const unread = 8 * time.Second // well above the 1 s grain of read times and the 1 s reports
	must(s.Meta().TierSetPolicy(ctx, &metapb.TierPolicy{Ns: b, Rules: []*metapb.TierRule{{To: "ec-4+2", UnreadNs: int64(unread)}}}))
	// Looked up without extents: not a read (classOf's lookup is one).
	class := func(key string) string {
		r := must(s.Meta().Resolve(ctx, &metapb.ResolveRequest{Ns: b, Path: key}))
		return r.Inode.StorageClass
	}
	hits := func() uint64 {
		st := must(s.Meta().TierStatus(ctx, &metapb.Empty{}))
		return st.CachedReads
	}
	await.Until(t, 120*time.Second, "the unread file to be demoted", func() bool {
		g := must(c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("hot")}))
		got, _ := io.ReadAll(g.Body)
		g.Body.Close()
		if string(got) != "bytes of hot" {
			t.Fatalf("GET hot: %q", got)
		}
		return class("cold") == "ec-4+2"
	})
	if cls := class("hot"); cls != "" {
		t.Fatalf("a file read throughout (from the gateway's caches) was demoted to %q", cls)
	}
	if hits() == 0 {
		t.Fatal("no cached read was reported to meta")
	}
}
