package s3_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"cairn/server/servertest"
)

// TestSigV2Presign: awscli v1's `aws s3 presign` makes SigV2 query URLs
// (AWSAccessKeyId, Signature, Expires); they are accepted as signed, and
// a changed path, expiry or signature, a past expiry and an unknown key
// are refused. Where the aws on PATH is awscli v2 (Debian's package),
// whose presign signs V4, the URL comes from botocore's V2 presigner
// (Debian's python3-boto3), which is what awscli v1 calls.
func TestSigV2Presign(t *testing.T) {
	awsBin := tool(t, "aws", "awscli")
	s, home := smokeServer(t)
	r := runner{t: t, dir: t.TempDir(), env: awsEnv(home)}
	presign := []string{awsBin, "--endpoint-url=" + s.S3URL(), "s3", "presign", "s3://sig-v2/dir/a b+c.txt", "--expires-in", "300"}
	if v := r.run(awsBin, "--version"); !strings.HasPrefix(v, "aws-cli/1.") {
		py := "/usr/bin/python3"
		if _, err := os.Stat(py); err != nil {
			py = tool(t, "python3", "python3-boto3")
		}
		presign = []string{py, "-c", `import sys, boto3
from botocore.config import Config
c = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", config=Config(signature_version="s3", s3={"addressing_style": "path"}))
print(c.generate_presigned_url("get_object", Params={"Bucket": "sig-v2", "Key": "dir/a b+c.txt"}, ExpiresIn=300))`, s.S3URL()}
	}
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("sig-v2")))
	must(c.PutObject(ctx, putInput("sig-v2", "dir/a b+c.txt", "signed the old way")))
	u := strings.TrimSpace(r.run(presign[0], presign[1:]...))
	if !strings.Contains(u, "AWSAccessKeyId=") || strings.Contains(u, "X-Amz-Signature") {
		t.Fatalf("aws s3 presign did not make a V2 URL: %s", u)
	}
	status := func(u string) (int, string) {
		t.Helper()
		resp := must(http.Get(u))
		defer resp.Body.Close()
		return resp.StatusCode, string(must(io.ReadAll(resp.Body)))
	}
	if code, body := status(u); code != 200 || body != "signed the old way" {
		t.Fatalf("V2 presigned GET: %d %q", code, body)
	}
	pu := must(url.Parse(u))
	q := pu.Query()
	exp := must(strconv.ParseInt(q.Get("Expires"), 10, 64))
	with := func(path string, set map[string]string) string {
		v := pu.Query()
		for k, x := range set {
			v.Set(k, x)
		}
		c := *pu
		c.RawPath, c.Path, c.RawQuery = "", path, v.Encode()
		return c.String()
	}
	sig := must(base64.StdEncoding.DecodeString(q.Get("Signature")))
	sig[0] ^= 1
	for name, bad := range map[string]string{
		"another key":       with("/sig-v2/dir/a b+c.tx", nil),
		"a longer expiry":   with("/sig-v2/dir/a b+c.txt", map[string]string{"Expires": strconv.FormatInt(exp+1, 10)}),
		"a changed sig":     with("/sig-v2/dir/a b+c.txt", map[string]string{"Signature": base64.StdEncoding.EncodeToString(sig)}),
		"an unknown key":    with("/sig-v2/dir/a b+c.txt", map[string]string{"AWSAccessKeyId": "NOSUCHKEY"}),
		"a missing expiry":  strings.Replace(u, "&Expires=", "&X=", 1),
		"a sub-resource":    with("/sig-v2/dir/a b+c.txt", map[string]string{"tagging": ""}),
		"a past expiry":     v2URL(s.S3URL(), "GET", "/sig-v2/dir/a%20b%2Bc.txt", time.Now().Add(-time.Second), servertest.Root, servertest.RootSecret),
		"a malformed value": with("/sig-v2/dir/a b+c.txt", map[string]string{"Signature": "!!"}),
	} {
		if code, body := status(bad); code != 403 {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	// Signed per the reference here, a future expiry works (the check
	// above is of the expiry, not of this signer).
	if code, body := status(v2URL(s.S3URL(), "GET", "/sig-v2/dir/a%20b%2Bc.txt", time.Now().Add(time.Minute), servertest.Root, servertest.RootSecret)); code != 200 {
		t.Fatalf("V2 URL signed by the test: %d %s", code, body)
	}
}

// v2URL presigns a request with SigV2 as the V2 reference describes.
func v2URL(base, method, path string, expires time.Time, key, secret string) string {
	e := strconv.FormatInt(expires.Unix(), 10)
	m := hmac.New(sha1.New, []byte(secret))
	io.WriteString(m, method+"\n\n\n"+e+"\n"+path)
	return base + path + "?AWSAccessKeyId=" + url.QueryEscape(key) + "&Expires=" + e +
		"&Signature=" + url.QueryEscape(base64.StdEncoding.EncodeToString(m.Sum(nil)))
}
