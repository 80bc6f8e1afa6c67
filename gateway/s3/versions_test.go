package s3_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

func getVersion(t *testing.T, c *s3.Client, bucket, key, vid string) (string, string) {
	t.Helper()
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	out, err := c.GetObject(context.Background(), in)
	if err != nil {
		t.Fatalf("GET %s?versionId=%s: %v", key, vid, err)
	}
	defer out.Body.Close()
	return string(must(io.ReadAll(out.Body))), aws.ToString(out.VersionId)
}

// listed is one entry of a version listing, as "key vid [latest] [marker]".
func listAll(t *testing.T, c *s3.Client, bucket string, maxKeys int32, delimiter string) (out []string) {
	t.Helper()
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), MaxKeys: aws.Int32(maxKeys)}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("ListObjectVersions does not end")
		}
		l := must(c.ListObjectVersions(context.Background(), in))
		// The SDK splits versions and markers; put them back in key order,
		// each key's newest first (as LastModified then says).
		type e struct {
			s   string
			key string
			at  time.Time
		}
		var page []e
		for _, v := range l.Versions {
			page = append(page, e{fmt.Sprintf("%s %s %v", *v.Key, *v.VersionId, *v.IsLatest), *v.Key, *v.LastModified})
		}
		for _, m := range l.DeleteMarkers {
			page = append(page, e{fmt.Sprintf("%s %s %v marker", *m.Key, *m.VersionId, *m.IsLatest), *m.Key, *m.LastModified})
		}
		for i := 1; i < len(page); i++ {
			for j := i; j > 0 && (page[j].key < page[j-1].key || page[j].key == page[j-1].key && page[j].at.After(page[j-1].at)); j-- {
				page[j], page[j-1] = page[j-1], page[j]
			}
		}
		for _, p := range page {
			out = append(out, p.s)
		}
		for _, p := range l.CommonPrefixes {
			out = append(out, "prefix "+*p.Prefix)
		}
		if n := len(l.Versions) + len(l.DeleteMarkers) + len(l.CommonPrefixes); n > int(maxKeys) {
			t.Fatalf("a page of %d entries, max-keys %d", n, maxKeys)
		}
		if !aws.ToBool(l.IsTruncated) {
			return out
		}
		in.KeyMarker, in.VersionIdMarker = l.NextKeyMarker, l.NextVersionIdMarker
	}
}

// TestVersioning walks S3 versioning with aws-sdk-go-v2: ids on PUT and
// copy, GET/HEAD/DELETE by id, delete markers, the null version before
// versioning and while suspended, CopyObject from a version, and old
// versions' data outliving a garbage collection pass.
func TestVersioning(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "vers"
	must(c.CreateBucket(ctx, bucketInput(b)))
	if v := must(c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(b)})); v.Status != "" {
		t.Fatalf("a new bucket's versioning: %q", v.Status)
	}
	if out := must(c.PutObject(ctx, putInput(b, "k", "v0"))); out.VersionId != nil {
		t.Fatalf("PUT into a never-versioned bucket answered version %q", *out.VersionId)
	}
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}))
	if v := must(c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(b)})); v.Status != types.BucketVersioningStatusEnabled {
		t.Fatalf("versioning: %q", v.Status)
	}
	v1 := aws.ToString(must(c.PutObject(ctx, putInput(b, "k", "v1"))).VersionId)
	v2 := aws.ToString(must(c.PutObject(ctx, putInput(b, "k", "v2-longer"))).VersionId)
	if v1 == "" || v2 == "" || v1 == v2 || v1 == "null" {
		t.Fatalf("version ids %q %q", v1, v2)
	}
	// The versions replaced keep their data through a collection pass.
	waitCollected(t, s)
	for vid, want := range map[string]string{"": "v2-longer", v2: "v2-longer", v1: "v1", "null": "v0"} {
		got, gotID := getVersion(t, c, b, "k", vid)
		if got != want || vid != "" && gotID != vid || vid == "" && gotID != v2 {
			t.Fatalf("GET ?versionId=%q: %q (version %q), want %q", vid, got, gotID, want)
		}
	}
	h := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String(v1)}))
	if *h.ContentLength != 2 || *h.VersionId != v1 {
		t.Fatalf("HEAD ?versionId=v1: %d %q", *h.ContentLength, *h.VersionId)
	}
	_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String("00000000000000ff")})
	wantCode(t, err, "NoSuchVersion")
	// The mount's and native API's view is the current version.
	if f, err := s.Client().StatFresh(ctx, b, "k"); err != nil || f.Size() != int64(len("v2-longer")) {
		t.Fatalf("the namespace's file: %v %v", f, err)
	}
	// The native API reads a version by id too.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.UserTLS()}}
	for vid, want := range map[string]string{"": "v2-longer", v1: "v1", "null": "v0"} {
		req := must(http.NewRequest(http.MethodGet, s.URL()+"/"+b+"/k?versionId="+vid, nil))
		req.SetBasicAuth(servertest.Root, servertest.RootSecret)
		resp := must(hc.Do(req))
		body := must(io.ReadAll(resp.Body))
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("native GET ?versionId=%s: %d %q, want %q", vid, resp.StatusCode, body, want)
		}
	}
	want := []string{"k " + v2 + " true", "k " + v1 + " false", "k null false"}
	if got := listAll(t, c, b, 1000, ""); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("versions %v, want %v", got, want)
	}

	// A delete leaves a marker; the versions stay.
	del := must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("k")}))
	marker := aws.ToString(del.VersionId)
	if !aws.ToBool(del.DeleteMarker) || marker == "" {
		t.Fatalf("DELETE: marker %v version %q", del.DeleteMarker, marker)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k")})
	wantCode(t, err, "NoSuchKey")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String(marker)})
	wantHTTP(t, err, http.StatusMethodNotAllowed)
	if _, err := s.Client().StatFresh(ctx, b, "k"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the namespace still has the deleted file: %v", err)
	}
	want = []string{"k " + marker + " true marker", "k " + v2 + " false", "k " + v1 + " false", "k null false"}
	if got := listAll(t, c, b, 1000, ""); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("versions %v, want %v", got, want)
	}

	// CopyObject from a version.
	cp := must(c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("copy"),
		CopySource: aws.String(b + "/k?versionId=" + v1)}))
	if aws.ToString(cp.CopySourceVersionId) != v1 || aws.ToString(cp.VersionId) == "" {
		t.Fatalf("copy: source version %q, version %q", aws.ToString(cp.CopySourceVersionId), aws.ToString(cp.VersionId))
	}
	if got := string(getBody(t, c, b, "copy")); got != "v1" {
		t.Fatalf("copy of v1: %q", got)
	}
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(b), Key: aws.String("copy2"),
		CopySource: aws.String(b + "/k?versionId=" + marker)})
	wantCode(t, err, "InvalidRequest")

	// Deleting the marker brings v2 back; deleting v2 then makes v1 current.
	dm := must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String(marker)}))
	if !aws.ToBool(dm.DeleteMarker) || aws.ToString(dm.VersionId) != marker {
		t.Fatalf("DELETE of the marker: %v %q", dm.DeleteMarker, aws.ToString(dm.VersionId))
	}
	if got, id := getVersion(t, c, b, "k", ""); got != "v2-longer" || id != v2 {
		t.Fatalf("after the marker's delete: %q %q", got, id)
	}
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String(v2)}))
	if got, id := getVersion(t, c, b, "k", ""); got != "v1" || id != v1 {
		t.Fatalf("after v2's delete: %q %q", got, id)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b), Key: aws.String("k"), VersionId: aws.String(v2)})
	wantCode(t, err, "NoSuchVersion")

	// Suspended: writes are the null version, replacing the stored one.
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusSuspended}}))
	if id := aws.ToString(must(c.PutObject(ctx, putInput(b, "k", "s"))).VersionId); id != "null" {
		t.Fatalf("PUT while suspended: version %q", id)
	}
	want = []string{"k null true", "k " + v1 + " false"}
	if got := listAll(t, c, b, 1000, ""); fmt.Sprint(got[len(got)-2:]) != fmt.Sprint(want) {
		t.Fatalf("versions %v, want %v at the end", got, want)
	}
	if got, _ := getVersion(t, c, b, "k", "null"); got != "s" {
		t.Fatalf("null version %q", got)
	}

	// A bucket with versions is not empty; without them it can go.
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)})
	wantCode(t, err, "BucketNotEmpty")
	var ids []types.ObjectIdentifier
	l := must(c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b)}))
	for _, v := range l.Versions {
		ids = append(ids, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
	}
	for _, m := range l.DeleteMarkers {
		ids = append(ids, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
	}
	res := must(c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(b), Delete: &types.Delete{Objects: ids}}))
	if len(res.Errors) != 0 || len(res.Deleted) != len(ids) {
		t.Fatalf("DeleteObjects of every version: %+v %+v", res.Deleted, res.Errors)
	}
	if got := listAll(t, c, b, 1000, ""); len(got) != 0 {
		t.Fatalf("left after deleting every version: %v", got)
	}
	must(c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}))
}

// TestListObjectVersionsPages: a listing read page by page (max-keys 1 to
// 4, with and without a delimiter) is the listing read at once, with
// markers and versions of one key split across pages.
func TestListObjectVersionsPages(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "pages"
	must(c.CreateBucket(ctx, bucketInput(b)))
	must(c.PutObject(ctx, putInput(b, "a", "null-a"))) // a null version
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}))
	for _, k := range []string{"a", "a", "b", "d/x", "d/y", "d/y", "e", "e", "f/g/h"} {
		must(c.PutObject(ctx, putInput(b, k, k)))
	}
	for _, k := range []string{"e", "d/x", "gone"} {
		must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String(k)}))
	}
	full := listAll(t, c, b, 1000, "")
	if len(full) != 13 {
		t.Fatalf("%d entries: %v", len(full), full)
	}
	for _, want := range []string{"a null false", "gone", "e"} {
		if !strings.Contains(strings.Join(full, "\n"), want) {
			t.Fatalf("%q missing from %v", want, full)
		}
	}
	for n := int32(1); n <= 4; n++ {
		if got := listAll(t, c, b, n, ""); fmt.Sprint(got) != fmt.Sprint(full) {
			t.Fatalf("max-keys %d:\n%v\nwant\n%v", n, got, full)
		}
	}
	delimited := listAll(t, c, b, 1000, "/")
	for _, want := range []string{"prefix d/", "prefix f/"} {
		if !strings.Contains(strings.Join(delimited, "\n"), want) {
			t.Fatalf("%q missing from %v", want, delimited)
		}
	}
	for n := int32(1); n <= 3; n++ {
		got := listAll(t, c, b, n, "/")
		// Pages list common prefixes after their page's versions.
		if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(delimited)) {
			t.Fatalf("delimited, max-keys %d:\n%v\nwant\n%v", n, got, delimited)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestObjectLock: a bucket created with object lock is versioned for
// good; retention (GOVERNANCE, bypassed only on request, COMPLIANCE
// never) and legal hold refuse the deletion of the versions they protect,
// in meta as well as through S3; a default retention applies to new
// versions.
func TestObjectLock(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "locked"
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b), ObjectLockEnabledForBucket: aws.Bool(true)}))
	if v := must(c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(b)})); v.Status != types.BucketVersioningStatusEnabled {
		t.Fatalf("versioning of a lock bucket: %q", v.Status)
	}
	lc := must(c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(b)}))
	if lc.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled || lc.ObjectLockConfiguration.Rule != nil {
		t.Fatalf("lock configuration %+v", lc.ObjectLockConfiguration)
	}
	_, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusSuspended}})
	wantCode(t, err, "InvalidBucketState")

	hour := time.Now().Add(time.Hour).Truncate(time.Second)
	retain := func(key, vid string, mode types.ObjectLockRetentionMode, until time.Time, bypass bool) error {
		_, err := c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String(b), Key: aws.String(key), VersionId: aws.String(vid),
			Retention: &types.ObjectLockRetention{Mode: mode, RetainUntilDate: aws.Time(until)}, BypassGovernanceRetention: aws.Bool(bypass)})
		return err
	}
	deleteVersion := func(key, vid string, bypass bool) error {
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String(key), VersionId: aws.String(vid), BypassGovernanceRetention: aws.Bool(bypass)})
		return err
	}

	// GOVERNANCE: kept, shortened or deleted only with the bypass.
	gv := aws.ToString(must(c.PutObject(ctx, putInput(b, "gov", "g"))).VersionId)
	if err := retain("gov", gv, types.ObjectLockRetentionModeGovernance, hour, false); err != nil {
		t.Fatal(err)
	}
	r := must(c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String(b), Key: aws.String("gov"), VersionId: aws.String(gv)}))
	if r.Retention.Mode != types.ObjectLockRetentionModeGovernance || !r.Retention.RetainUntilDate.Equal(hour) {
		t.Fatalf("retention %+v", r.Retention)
	}
	head := must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("gov")}))
	if head.ObjectLockMode != types.ObjectLockModeGovernance || !head.ObjectLockRetainUntilDate.Equal(hour) {
		t.Fatalf("HEAD lock %q %v", head.ObjectLockMode, head.ObjectLockRetainUntilDate)
	}
	wantCode(t, deleteVersion("gov", gv, false), "AccessDenied")
	wantCode(t, retain("gov", gv, types.ObjectLockRetentionModeGovernance, hour.Add(-time.Minute), false), "AccessDenied")
	// A writer who does not own the bucket may not bypass, through S3 or
	// asking meta directly.
	dave := newKey(t, s.Client().Meta(), "dave", map[string]metapb.S3Access{b: metapb.S3Access_S3_WRITE})
	_, err = sdk(t, s, dave.Key.AccessKey, dave.Secret).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("gov"),
		VersionId: aws.String(gv), BypassGovernanceRetention: aws.Bool(true)})
	wantCode(t, err, "AccessDenied")
	asDave := meta.OnBehalfOf(ctx, dave.Key.AccessKey)
	if _, err := s.Client().Meta().S3DeleteVersion(asDave, &metapb.S3VersionRequest{Ns: b, Path: "gov", VersionId: gv, BypassGovernance: true}); !errors.Is(errors.Permission, err) {
		t.Fatalf("meta let a non-owner bypass: %v", err)
	}
	// An overwrite and a plain delete keep the locked version.
	must(c.PutObject(ctx, putInput(b, "gov", "g2")))
	must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String("gov")}))
	if got, _ := getVersion(t, c, b, "gov", gv); got != "g" {
		t.Fatalf("locked version %q", got)
	}
	// Meta refuses on its own, whoever asks.
	if _, err := s.Meta().S3DeleteVersion(ctx, &metapb.S3VersionRequest{Ns: b, Path: "gov", VersionId: gv}); !errors.Is(errors.Permission, err) {
		t.Fatalf("meta deleted a locked version: %v", err)
	}
	if err := retain("gov", gv, types.ObjectLockRetentionModeGovernance, hour.Add(-time.Minute), true); err != nil {
		t.Fatalf("shortening with the bypass: %v", err)
	}
	if err := deleteVersion("gov", gv, true); err != nil {
		t.Fatalf("delete with the bypass: %v", err)
	}

	// COMPLIANCE: never shortened nor deleted, bypass or not; lengthened.
	cv := aws.ToString(must(c.PutObject(ctx, putInput(b, "comp", "c"))).VersionId)
	if err := retain("comp", cv, types.ObjectLockRetentionModeCompliance, hour, false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, deleteVersion("comp", cv, true), "AccessDenied")
	wantCode(t, retain("comp", cv, types.ObjectLockRetentionModeCompliance, hour.Add(-time.Minute), true), "AccessDenied")
	wantCode(t, retain("comp", cv, types.ObjectLockRetentionModeGovernance, hour.Add(time.Hour), true), "AccessDenied")
	if err := retain("comp", cv, types.ObjectLockRetentionModeCompliance, hour.Add(time.Hour), false); err != nil {
		t.Fatalf("lengthening: %v", err)
	}

	// Legal hold.
	hv := aws.ToString(must(c.PutObject(ctx, putInput(b, "held", "h"))).VersionId)
	must(c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String(b), Key: aws.String("held"), VersionId: aws.String(hv),
		LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOn}}))
	lh := must(c.GetObjectLegalHold(ctx, &s3.GetObjectLegalHoldInput{Bucket: aws.String(b), Key: aws.String("held")}))
	if lh.LegalHold.Status != types.ObjectLockLegalHoldStatusOn {
		t.Fatalf("legal hold %q", lh.LegalHold.Status)
	}
	wantCode(t, deleteVersion("held", hv, true), "AccessDenied")
	must(c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String(b), Key: aws.String("held"), VersionId: aws.String(hv),
		LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOff}}))
	if err := deleteVersion("held", hv, false); err != nil {
		t.Fatalf("delete after the hold's release: %v", err)
	}

	// Default retention applies to new versions.
	must(c.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String(b),
		ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled,
			Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeGovernance, Days: aws.Int32(1)}}}}))
	lc = must(c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(b)}))
	if d := lc.ObjectLockConfiguration.Rule.DefaultRetention; d.Mode != types.ObjectLockRetentionModeGovernance || aws.ToInt32(d.Days) != 1 {
		t.Fatalf("default retention %+v", d)
	}
	dv := aws.ToString(must(c.PutObject(ctx, putInput(b, "dflt", "d"))).VersionId)
	head = must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("dflt")}))
	if head.ObjectLockMode != types.ObjectLockModeGovernance || time.Until(*head.ObjectLockRetainUntilDate) < 23*time.Hour {
		t.Fatalf("default retention on a new version: %q %v", head.ObjectLockMode, head.ObjectLockRetainUntilDate)
	}
	wantCode(t, deleteVersion("dflt", dv, false), "AccessDenied")

	// PutObject's lock headers lock the new version in the same commit.
	pv := aws.ToString(must(c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("put-locked"), Body: strings.NewReader("p"),
		ObjectLockMode: types.ObjectLockModeCompliance, ObjectLockRetainUntilDate: aws.Time(hour), ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn})).VersionId)
	head = must(c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(b), Key: aws.String("put-locked")}))
	if head.ObjectLockMode != types.ObjectLockModeCompliance || !head.ObjectLockRetainUntilDate.Equal(hour) || head.ObjectLockLegalHoldStatus != types.ObjectLockLegalHoldStatusOn {
		t.Fatalf("lock from PutObject's headers: %q %v %q", head.ObjectLockMode, head.ObjectLockRetainUntilDate, head.ObjectLockLegalHoldStatus)
	}
	wantCode(t, deleteVersion("put-locked", pv, true), "AccessDenied")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("past"), Body: strings.NewReader("p"),
		ObjectLockMode: types.ObjectLockModeGovernance, ObjectLockRetainUntilDate: aws.Time(time.Now().Add(-time.Hour))})
	wantCode(t, err, "InvalidArgument")

	// A locked bucket is not deleted while it holds versions.
	_, err = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)})
	wantCode(t, err, "BucketNotEmpty")
}
