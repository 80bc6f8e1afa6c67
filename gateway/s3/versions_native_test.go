package s3_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// TestVersionedNativeChanges: in a versioned bucket the native API's
// overwrite, append and rename, and a truncation by the data-plane client
// (the mount's SetAttr), keep the content they replace: aws-sdk-go-v2
// lists every version and reads each one's old bytes by version id, after
// a garbage collection pass.
func TestVersionedNativeChanges(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "nver"
	must(c.CreateBucket(ctx, bucketInput(b)))
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: s.UserTLS()}}
	native := func(method, path, body string) {
		t.Helper()
		req := must(http.NewRequest(method, s.URL()+"/"+b+"/"+path, strings.NewReader(body)))
		req.SetBasicAuth(servertest.Root, servertest.RootSecret)
		resp := must(hc.Do(req))
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("native %s %s: %d %s", method, path, resp.StatusCode, msg)
		}
	}
	// contents reads every version of key by its id, newest first.
	contents := func(key string) (out []string) {
		t.Helper()
		l := must(c.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(b), Prefix: aws.String(key)}))
		for _, m := range l.DeleteMarkers {
			if *m.Key == key && aws.ToBool(m.IsLatest) {
				out = append(out, "marker")
			}
		}
		for _, v := range l.Versions {
			if *v.Key != key {
				continue
			}
			got, id := getVersion(t, c, b, key, *v.VersionId)
			if id != *v.VersionId {
				t.Fatalf("GET %s?versionId=%s answered version %s", key, *v.VersionId, id)
			}
			out = append(out, got)
		}
		return out
	}
	check := func(key string, want ...string) {
		t.Helper()
		if got := contents(key); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("versions of %s: %q, want %q", key, got, want)
		}
	}

	native(http.MethodPut, "k", "one")
	native(http.MethodPut, "k", "two")
	native(http.MethodPost, "k?append", "+more")
	size := uint64(3)
	if _, err := s.Client().SetAttr(ctx, &metapb.SetAttrRequest{Ns: b, Path: "k", Size: &size}); err != nil {
		t.Fatal(err)
	}
	native(http.MethodPut, "other", "other's")
	native(http.MethodPost, "k?rename=other", "")
	waitCollected(t, s)
	check("other", "two", "other's")
	check("k", "marker", "two", "two+more", "two", "one")
	if got := string(getBody(t, c, b, "other")); got != "two" {
		t.Fatalf("current other: %q", got)
	}
}

// TestListObjectVersionsSteps: a bucket whose keys have zero to four
// stored versions (and some a delete marker as their latest) lists the
// same page by page, for page sizes that cut keys' versions apart, as at
// once; each key's latest is marked so exactly once. Meta lists each page
// in one scan of the tree and the stored versions (with_files).
func TestListObjectVersionsSteps(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	const b = "steps"
	must(c.CreateBucket(ctx, bucketInput(b)))
	must(c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(b),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}))
	const keys = 90
	want := 0
	for round := 0; round < 5; round++ {
		req := &metapb.CommitBatchRequest{}
		for i := 0; i < keys; i++ {
			if i%5 >= round {
				req.Commits = append(req.Commits, &metapb.CommitRequest{Ns: b, Path: fmt.Sprintf("d%d/k%03d", i%3, i), Parents: true, Etag: "d41d8cd98f00b204e9800998ecf8427e"})
				want++
			}
		}
		must(s.Meta().CommitBatch(ctx, req))
	}
	for i := 0; i < keys; i += 7 {
		must(c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: aws.String(fmt.Sprintf("d%d/k%03d", i%3, i))}))
		want++
	}
	full := listAll(t, c, b, 1000, "")
	if len(full) != want {
		t.Fatalf("%d entries, want %d", len(full), want)
	}
	latest := map[string]int{}
	for _, e := range full {
		if f := strings.Fields(e); f[2] == "true" {
			latest[f[0]]++
		}
	}
	if len(latest) != keys {
		t.Fatalf("%d keys have a latest version, want %d", len(latest), keys)
	}
	for k, n := range latest {
		if n != 1 {
			t.Fatalf("%s has %d latest versions", k, n)
		}
	}
	for _, n := range []int32{1, 3, 7, 16, 50, 333} {
		if got := listAll(t, c, b, n, ""); fmt.Sprint(got) != fmt.Sprint(full) {
			t.Fatalf("max-keys %d:\n%v\nwant\n%v", n, got, full)
		}
	}
	if got := listAll(t, c, b, 2, "/"); fmt.Sprint(got) != "[prefix d0/ prefix d1/ prefix d2/]" {
		t.Fatalf("delimited: %v", got)
	}
}
