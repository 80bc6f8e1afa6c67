package s3_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"cairn/internal/await"
	"cairn/server"
	"cairn/server/servertest"
)

// lifecycleClock is a store whose lifecycle clock runs ahead of the
// wall clock by what the test sets: objects age days in no time.
type lifecycleClock struct {
	s     *server.Server
	ahead atomic.Int64 // ns
}

func startLifecycle(t *testing.T) *lifecycleClock {
	lc := &lifecycleClock{}
	lc.s = servertest.Start(t, func(c *server.Config) {
		c.LifecycleClock = func() time.Time { return time.Now().Add(time.Duration(lc.ahead.Load())) }
	})
	return lc
}

// age moves the clock to d ahead of now and waits for a lifecycle pass
// that began at or after it.
func (lc *lifecycleClock) age(t *testing.T, d time.Duration) {
	t.Helper()
	lc.ahead.Store(int64(d))
	at := time.Now().Add(d)
	await.Until(t, 30*time.Second, "a lifecycle pass "+d.String()+" ahead", func() bool {
		last, _ := lc.s.Meta().LifecyclePassed()
		return !last.Before(at)
	})
}

func keysOf(t *testing.T, c *s3.Client, bucket string) []string {
	t.Helper()
	out := must(c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)}))
	var ks []string
	for _, o := range out.Contents {
		ks = append(ks, *o.Key)
	}
	return ks
}

// versionsOf lists "key:version-id" and "key:marker" in listing order.
func versionsOf(t *testing.T, c *s3.Client, bucket string) []string {
	t.Helper()
	out := must(c.ListObjectVersions(context.Background(), &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)}))
	var vs []string
	for _, v := range out.Versions {
		vs = append(vs, *v.Key+":"+*v.VersionId)
	}
	for _, m := range out.DeleteMarkers {
		vs = append(vs, *m.Key+":marker")
	}
	sort.Strings(vs)
	return vs
}

func TestLifecycle(t *testing.T) {
	lc := startLifecycle(t)
	s := lc.s
	c := root(t, s)
	ctx := context.Background()
	for _, b := range []string{"lc-plain", "lc-vers"} {
		must(c.CreateBucket(ctx, bucketInput(b)))
	}
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("lc-vers"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}))

	_, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lc-plain")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")

	plain := &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{
		{ID: aws.String("logs"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("logs/")},
			Expiration: &types.LifecycleExpiration{Days: aws.Int32(30)}},
		{ID: aws.String("tmp"), Status: types.ExpirationStatusEnabled,
			Filter:     &types.LifecycleRuleFilter{Tag: &types.Tag{Key: aws.String("class"), Value: aws.String("tmp")}},
			Expiration: &types.LifecycleExpiration{Days: aws.Int32(1)}},
		{ID: aws.String("uploads"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("up/")},
			AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(7)}},
		{ID: aws.String("off"), Status: types.ExpirationStatusDisabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("")},
			Expiration: &types.LifecycleExpiration{Days: aws.Int32(1)}},
	}}
	must(c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("lc-plain"), LifecycleConfiguration: plain}))
	got := must(c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lc-plain")}))
	if len(got.Rules) != 4 || *got.Rules[0].Filter.Prefix != "logs/" || *got.Rules[0].Expiration.Days != 30 ||
		*got.Rules[1].Filter.Tag.Value != "tmp" || *got.Rules[2].AbortIncompleteMultipartUpload.DaysAfterInitiation != 7 ||
		got.Rules[3].Status != types.ExpirationStatusDisabled {
		t.Fatalf("lifecycle read back: %+v", got.Rules)
	}
	must(c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("lc-vers"),
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{
			{ID: aws.String("old"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("")},
				NoncurrentVersionExpiration: &types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(10)}},
			{ID: aws.String("markers"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("")},
				Expiration: &types.LifecycleExpiration{ExpiredObjectDeleteMarker: aws.Bool(true)}},
		}}}))

	put := func(bucket, key, body, tags string) {
		in := putInput(bucket, key, body)
		if tags != "" {
			in.Tagging = aws.String(tags)
		}
		must(c.PutObject(ctx, in))
	}
	put("lc-plain", "logs/a", "a", "")
	put("lc-plain", "logs/b", "b", "class=keep")
	put("lc-plain", "keep/c", "c", "")
	put("lc-plain", "keep/tmp", "t", "class=tmp")
	up := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("lc-plain"), Key: aws.String("up/big")}))
	other := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("lc-plain"), Key: aws.String("keep/big")}))
	for _, body := range []string{"v1", "v2", "v3"} {
		put("lc-vers", "k", body, "")
	}
	put("lc-vers", "gone", "x", "")
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("lc-vers"), Key: aws.String("gone")}))
	if vs := versionsOf(t, c, "lc-vers"); len(vs) != 5 {
		t.Fatalf("versions before: %v", vs)
	}

	// Two days on: only the object tagged tmp (one day) is due.
	lc.age(t, 2*24*time.Hour)
	if ks := strings.Join(keysOf(t, c, "lc-plain"), " "); ks != "keep/c logs/a logs/b" {
		t.Fatalf("after 2 days: %s", ks)
	}
	if vs := versionsOf(t, c, "lc-vers"); len(vs) != 5 {
		t.Fatalf("versions after 2 days: %v", vs)
	}
	// Thirty-one days on: logs/ expired, the upload under up/ aborted
	// (the other kept), noncurrent versions gone.
	lc.age(t, 31*24*time.Hour)
	if ks := strings.Join(keysOf(t, c, "lc-plain"), " "); ks != "keep/c" {
		t.Fatalf("after 31 days: %s", ks)
	}
	ups := must(c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("lc-plain")}))
	if len(ups.Uploads) != 1 || *ups.Uploads[0].UploadId != *other.UploadId {
		t.Fatalf("uploads after 31 days: %+v (aborted: %s)", ups.Uploads, *up.UploadId)
	}
	if got := string(getBody(t, c, "lc-vers", "k")); got != "v3" {
		t.Fatalf("current version after 31 days: %q", got)
	}
	// The marker of "gone" was all that key had left after this pass
	// removed its noncurrent version: the next pass removes it.
	lc.age(t, 32*24*time.Hour)
	vs := versionsOf(t, c, "lc-vers")
	if len(vs) != 1 || !strings.HasPrefix(vs[0], "k:") {
		t.Fatalf("versions after 32 days: %v", vs)
	}

	must(c.DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: aws.String("lc-plain")}))
	_, err = c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lc-plain")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")
	put("lc-plain", "logs/new", "n", "")
	lc.age(t, 100*24*time.Hour)
	if ks := strings.Join(keysOf(t, c, "lc-plain"), " "); ks != "keep/c logs/new" {
		t.Fatalf("after the configuration was deleted: %s", ks)
	}
}

// TestLifecycleRefused: configurations S3 refuses, and actions this store
// does not have, are refused whole; nothing is stored.
func TestLifecycleRefused(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("lc-bad")))
	rule := func(inner string) []byte {
		return []byte(`<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule><ID>r</ID>` + inner + `</Rule></LifecycleConfiguration>`)
	}
	const on, all = `<Status>Enabled</Status>`, `<Filter><Prefix></Prefix></Filter>`
	for _, tc := range []struct {
		body   []byte
		status int
		code   string
	}{
		{rule(on + all + `<Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition>`), 501, "NotImplemented"},
		{rule(on + `<Filter><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></Filter><Expiration><Days>1</Days></Expiration>`), 501, "NotImplemented"},
		{rule(on + all + `<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration>`), 501, "NotImplemented"},
		{rule(on + all + `<Expiration><Days>-1</Days></Expiration>`), 400, "InvalidArgument"},
		{rule(on + all + `<Expiration><Date>2030-01-01T12:00:00Z</Date></Expiration>`), 400, "InvalidArgument"},
		{rule(on + all + `<Expiration><Days>1</Days><Date>2030-01-01T00:00:00Z</Date></Expiration>`), 400, "MalformedXML"},
		{rule(on + all), 400, "InvalidArgument"},
		{rule(`<Status>On</Status>` + all + `<Expiration><Days>1</Days></Expiration>`), 400, "MalformedXML"},
		{rule(on + `<Expiration><Days>1</Days></Expiration>`), 400, "MalformedXML"},
		{rule(on + `<Filter><Tag><Key>a</Key><Value>b</Value></Tag></Filter><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload>`), 400, "InvalidArgument"},
		{[]byte(`<LifecycleConfiguration><Rule><ID>a</ID>` + on + all + `<Expiration><Days>1</Days></Expiration></Rule><Rule><ID>a</ID>` + on + all + `<Expiration><Days>2</Days></Expiration></Rule></LifecycleConfiguration>`), 400, "InvalidArgument"},
		{[]byte(`<LifecycleConfiguration>`), 400, "MalformedXML"},
	} {
		status, code := rawS3(t, s, http.MethodPut, "/lc-bad?lifecycle", nil, tc.body)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.body, status, code, tc.status, tc.code)
		}
	}
	_, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lc-bad")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")
	// A date at midnight is taken.
	if status, code := rawS3(t, s, http.MethodPut, "/lc-bad?lifecycle", nil, rule(on+all+`<Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration>`)); status != 200 {
		t.Fatalf("a midnight date: %d %s", status, code)
	}
}
