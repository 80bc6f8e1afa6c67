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
