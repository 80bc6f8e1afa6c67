package s3_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/minio/minio-go/v7"

	"cairn/server/servertest"
)

// TestPostObjectChecksumTagging: a browser upload's x-amz-checksum-*
// fields are verified and stored as PutObject's headers are (HeadObject
// with ChecksumMode gives them back), its tagging field (a Tagging XML
// document) tags the object; a wrong checksum and an algorithm that names
// no checksum field are refused and commit nothing (TestParseTaggingXML
// and FuzzXMLBodies take malformed documents). The forms are signed by minio-go's PresignedPostPolicy.
func TestPostObjectChecksumTagging(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := root(t, s)
	must(c.CreateBucket(ctx, bucketInput("forms")))
	mc := minioAs(t, s, servertest.Root, servertest.RootSecret)
	data := []byte("a form's file, checksummed")
	crc := binary.BigEndian.AppendUint32(nil, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	sum := sha256.Sum256(data)
	const tags = `<Tagging><TagSet><Tag><Key>team</Key><Value>web</Value></Tag><Tag><Key>tier</Key><Value>1</Value></Tag></TagSet></Tagging>`

	sign := func(key string, edit func(p *minio.PostPolicy)) (string, map[string]string) {
		t.Helper()
		p := minio.NewPostPolicy()
		p.SetBucket("forms")
		p.SetKey(key)
		p.SetExpires(time.Now().Add(time.Hour))
		edit(p)
		u, f, err := mc.PresignedPostPolicy(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return u.String(), f
	}
	u, f := sign("good", func(p *minio.PostPolicy) {
		p.SetChecksum(minio.NewChecksum(minio.ChecksumCRC32C, crc))
		p.SetTagging(tags)
	})
	resp, body := postForm(t, u, f, "good", data)
	wantPost(t, "a checksummed, tagged form", resp, body, http.StatusNoContent, "")
	if got := resp.Header.Get("X-Amz-Checksum-Crc32c"); got != base64.StdEncoding.EncodeToString(crc) {
		t.Fatalf("POST answered x-amz-checksum-crc32c %q", got)
	}
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("forms"), Key: aws.String("good"), ChecksumMode: types.ChecksumModeEnabled}))
	if aws.ToString(h.ChecksumCRC32C) != base64.StdEncoding.EncodeToString(crc) {
		t.Fatalf("HeadObject's CRC32C %q", aws.ToString(h.ChecksumCRC32C))
	}
	tg := must(c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("forms"), Key: aws.String("good")}))
	if len(tg.TagSet) != 2 || *tg.TagSet[0].Key != "team" || *tg.TagSet[0].Value != "web" || *tg.TagSet[1].Value != "1" {
		t.Fatalf("tags %+v", tg.TagSet)
	}

	// SHA256, given as the field alone (no algorithm field).
	u, f = sign("sha", func(p *minio.PostPolicy) {
		p.SetUserData("checksum-sha256", base64.StdEncoding.EncodeToString(sum[:]))
	})
	resp, body = postForm(t, u, f, "sha", data)
	wantPost(t, "a SHA256 field", resp, body, http.StatusNoContent, "")
	h = must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("forms"), Key: aws.String("sha"), ChecksumMode: types.ChecksumModeEnabled}))
	if aws.ToString(h.ChecksumSHA256) != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("HeadObject's SHA256 %q", aws.ToString(h.ChecksumSHA256))
	}

	gone := func(key string) {
		t.Helper()
		_, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("forms"), Key: aws.String(key)})
		wantHTTP(t, err, http.StatusNotFound)
	}
	u, f = sign("bad", func(p *minio.PostPolicy) {
		p.SetChecksum(minio.NewChecksum(minio.ChecksumCRC32C, []byte{1, 2, 3, 4}))
	})
	resp, body = postForm(t, u, f, "bad", data)
	wantPost(t, "a wrong checksum", resp, body, http.StatusBadRequest, "BadDigest")
	gone("bad")
	u, f = sign("noval", func(p *minio.PostPolicy) { p.SetUserData("checksum-algorithm", "SHA1") })
	resp, body = postForm(t, u, f, "noval", data)
	wantPost(t, "an algorithm without its checksum", resp, body, http.StatusBadRequest, "InvalidRequest")
	gone("noval")
}
