package s3_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/minio/minio-go/v7"

	"cairn/server"
)

// anonStatus makes an unsigned request over plain HTTP and returns its
// status (and the error code of a refusal).
func anonStatus(t *testing.T, s *server.Server, method, path string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req := must(http.NewRequest(method, s.S3URL()+path, strings.NewReader(body)))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp := must(http.DefaultClient.Do(req))
	defer resp.Body.Close()
	b := must(io.ReadAll(resp.Body))
	code := ""
	if i := strings.Index(string(b), "<Code>"); i >= 0 {
		code = string(b[i+6:])
		code = code[:strings.Index(code, "<")]
	}
	return resp.StatusCode, code
}

func wantAnon(t *testing.T, s *server.Server, method, path string, hdr map[string]string, want int) {
	t.Helper()
	if got, code := anonStatus(t, s, method, path, hdr, "anonymous bytes"); got != want {
		t.Fatalf("anonymous %s %s: %d %s, want %d", method, path, got, code, want)
	}
}

func putPolicy(c *s3.Client, bucket, doc string) error {
	_, err := c.PutBucketPolicy(context.Background(), &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(doc)})
	return err
}

// TestBucketPolicy: Put/Get/DeleteBucketPolicy and GetBucketPolicyStatus
// over aws-sdk-go-v2, with every refusal, and the policy enforced for
// anonymous callers over plain HTTP and for other users.
func TestBucketPolicy(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	m := s.Client().Meta()
	ak := newKey(t, m, "alice", nil)
	bk := newKey(t, m, "bob", nil)
	ck := newKey(t, m, "carol", nil)
	alice := sdk(t, s, ak.Key.AccessKey, ak.Secret)
	bob := sdk(t, s, bk.Key.AccessKey, bk.Secret)
	carol := sdk(t, s, ck.Key.AccessKey, ck.Secret)
	must(alice.CreateBucket(ctx, bucketInput("pol")))
	for _, k := range []string{"pub/a", "priv/a", "keep/a", "web/i.png", "pub/b"} {
		must(alice.PutObject(ctx, putInput("pol", k, "alice's "+k)))
	}

	_, err := alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pol")})
	wantCode(t, err, "NoSuchBucketPolicy")
	_, err = alice.GetBucketPolicyStatus(ctx, &s3.GetBucketPolicyStatusInput{Bucket: aws.String("pol")})
	wantCode(t, err, "NoSuchBucketPolicy")
	_, err = alice.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String("pol")})
	if err != nil {
		t.Fatalf("DeleteBucketPolicy without a policy: %v", err)
	}
	_, err = alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("absent")})
	wantCode(t, err, "NoSuchBucket")

	for name, doc := range map[string]string{
		"not json":     `Version: 2012`,
		"NotPrincipal": `{"Statement":[{"Effect":"Deny","NotPrincipal":{"AWS":"bob"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*"}]}`,
		"other bucket": `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}]}`,
		"condition":    `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pol/*","Condition":{"DateLessThan":{"aws:CurrentTime":"2030-01-01T00:00:00Z"}}}]}`,
		"owner action": `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:PutBucketPolicy","Resource":"arn:aws:s3:::pol"}]}`,
	} {
		if err := putPolicy(alice, "pol", doc); err == nil {
			t.Fatalf("%s: policy accepted", name)
		} else {
			wantCode(t, err, "MalformedPolicy")
		}
	}

	doc := `{
  "Version": "2012-10-17",
  "Statement": [
    {"Sid": "PublicRead", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::pol/pub/*"},
    {"Sid": "PublicList", "Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::pol",
     "Condition": {"StringLike": {"s3:prefix": "pub/*"}}},
    {"Sid": "BobWrites", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"}, "Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": "arn:aws:s3:::pol/bob/*"},
    {"Sid": "Keep", "Effect": "Deny", "Principal": "*", "Action": "s3:Delete*", "Resource": "arn:aws:s3:::pol/keep/*"},
    {"Sid": "Web", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::pol/web/*",
     "Condition": {"StringLike": {"aws:Referer": ["https://example.com/*"]}}},
    {"Sid": "Local", "Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::pol/priv/*",
     "Condition": {"NotIpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]}}}
  ]
}`
	if err := putPolicy(bob, "pol", doc); err == nil {
		t.Fatal("bob put a policy on alice's bucket")
	} else {
		wantCode(t, err, "AccessDenied")
	}
	if err := putPolicy(alice, "pol", doc); err != nil {
		t.Fatal(err)
	}
	got := must(alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pol")}))
	if aws.ToString(got.Policy) != doc {
		t.Fatalf("GetBucketPolicy: %q", aws.ToString(got.Policy))
	}
	_, err = bob.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pol")})
	wantCode(t, err, "AccessDenied")
	st := must(alice.GetBucketPolicyStatus(ctx, &s3.GetBucketPolicyStatusInput{Bucket: aws.String("pol")}))
	if !aws.ToBool(st.PolicyStatus.IsPublic) {
		t.Fatal("GetBucketPolicyStatus: a policy allowing * is not public")
	}

	// Anonymous callers, plain HTTP.
	wantAnon(t, s, "GET", "/pol/pub/a", nil, 200)
	wantAnon(t, s, "HEAD", "/pol/pub/a", nil, 200)
	wantAnon(t, s, "GET", "/pol/priv/a", nil, 403)
	wantAnon(t, s, "PUT", "/pol/pub/new", nil, 403)
	wantAnon(t, s, "DELETE", "/pol/pub/a", nil, 403)
	wantAnon(t, s, "GET", "/pol?list-type=2&prefix=pub/", nil, 200)
	wantAnon(t, s, "GET", "/pol?list-type=2&prefix=priv/", nil, 403)
	wantAnon(t, s, "GET", "/pol?list-type=2", nil, 403)
	wantAnon(t, s, "GET", "/pol/web/i.png", map[string]string{"Referer": "https://example.com/page"}, 200)
	wantAnon(t, s, "GET", "/pol/web/i.png", map[string]string{"Referer": "https://elsewhere.example/"}, 403)
	wantAnon(t, s, "GET", "/pol/web/i.png", nil, 403)
	// The policy grants no more than it says: anonymous reads of pub/ do
	// not reach the ACL or tags.
	wantAnon(t, s, "GET", "/pol/pub/a?tagging", nil, 403)
	wantAnon(t, s, "GET", "/pol?policy", nil, 403)

	// Other users: bob may write and delete under bob/ only, and not read.
	if _, err := bob.PutObject(ctx, putInput("pol", "bob/f", "bob's")); err != nil {
		t.Fatalf("bob's PutObject the policy allows: %v", err)
	}
	if string(getBody(t, alice, "pol", "bob/f")) != "bob's" {
		t.Fatal("bob's object has other bytes")
	}
	_, err = bob.PutObject(ctx, putInput("pol", "pub/x", "bob's"))
	wantCode(t, err, "AccessDenied")
	_, err = bob.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pol"), Key: aws.String("bob/f")})
	wantCode(t, err, "AccessDenied")
	if _, err := bob.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("pol"), Key: aws.String("bob/f")}); err != nil {
		t.Fatalf("bob's DeleteObject the policy allows: %v", err)
	}
	_, err = carol.PutObject(ctx, putInput("pol", "bob/f", "carol's"))
	wantCode(t, err, "AccessDenied")
	// Authenticated users are "*" too.
	if string(getBody(t, carol, "pol", "pub/a")) != "alice's pub/a" {
		t.Fatal("carol read other bytes")
	}

	// An explicit Deny wins over the owner's rights, per key in a
	// DeleteObjects.
	_, err = alice.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("pol"), Key: aws.String("keep/a")})
	wantCode(t, err, "AccessDenied")
	out := must(alice.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("pol"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("keep/a")}, {Key: aws.String("pub/b")}}}}))
	if len(out.Errors) != 1 || aws.ToString(out.Errors[0].Key) != "keep/a" || aws.ToString(out.Errors[0].Code) != "AccessDenied" ||
		len(out.Deleted) != 1 || aws.ToString(out.Deleted[0].Key) != "pub/b" {
		t.Fatalf("DeleteObjects: deleted %+v, errors %+v", out.Deleted, out.Errors)
	}
	if string(getBody(t, alice, "pol", "keep/a")) != "alice's keep/a" {
		t.Fatal("keep/a changed")
	}
	// Root is never denied.
	if _, err := root(t, s).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("pol"), Key: aws.String("keep/a")}); err != nil {
		t.Fatalf("root's DeleteObject: %v", err)
	}

	// A policy that denies everything to everyone: the owner can still
	// read and delete it.
	denyAll := `{"Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::pol","arn:aws:s3:::pol/*"]}]}`
	if err := putPolicy(alice, "pol", denyAll); err != nil {
		t.Fatal(err)
	}
	_, err = alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("pol"), Key: aws.String("pub/a")})
	wantCode(t, err, "AccessDenied")
	_, err = alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("pol")})
	wantCode(t, err, "AccessDenied")
	st = must(alice.GetBucketPolicyStatus(ctx, &s3.GetBucketPolicyStatusInput{Bucket: aws.String("pol")}))
	if aws.ToBool(st.PolicyStatus.IsPublic) {
		t.Fatal("a Deny-only policy is public")
	}
	if _, err := alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pol")}); err != nil {
		t.Fatalf("the owner's GetBucketPolicy under a deny-all policy: %v", err)
	}
	if _, err := alice.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String("pol")}); err != nil {
		t.Fatalf("the owner's DeleteBucketPolicy under a deny-all policy: %v", err)
	}
	_, err = alice.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String("pol")})
	wantCode(t, err, "NoSuchBucketPolicy")
	getBody(t, alice, "pol", "pub/a")
	wantAnon(t, s, "GET", "/pol/pub/a", nil, 403)
}

// TestPolicyTransportAndAddress: aws:SecureTransport and aws:SourceIp
// against plain HTTP from loopback.
func TestPolicyTransportAndAddress(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	c := root(t, s)
	must(c.CreateBucket(ctx, bucketInput("tls")))
	ak := newKey(t, s.Client().Meta(), "alice", nil)
	alice := sdk(t, s, ak.Key.AccessKey, ak.Secret)
	must(alice.CreateBucket(ctx, bucketInput("mine")))
	must(alice.PutObject(ctx, putInput("mine", "k", "v")))
	doc := `{"Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::mine/*","Condition":{"Bool":{"aws:SecureTransport":"false"}}}]}`
	if err := putPolicy(alice, "mine", doc); err != nil {
		t.Fatal(err)
	}
	_, err := alice.PutObject(ctx, putInput("mine", "k", "over plain HTTP"))
	wantCode(t, err, "AccessDenied")
	getBody(t, alice, "mine", "k")

	// Allowed only from an address the test does not have.
	doc = `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::mine/*","Condition":{"IpAddress":{"aws:SourceIp":"192.0.2.0/24"}}}]}`
	if err := putPolicy(alice, "mine", doc); err != nil {
		t.Fatal(err)
	}
	wantAnon(t, s, "GET", "/mine/k", nil, 403)
	st := must(alice.GetBucketPolicyStatus(ctx, &s3.GetBucketPolicyStatusInput{Bucket: aws.String("mine")}))
	if aws.ToBool(st.PolicyStatus.IsPublic) {
		t.Fatal("a policy limited to an address block is public")
	}
	doc = `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::mine/*","Condition":{"IpAddress":{"aws:SourceIp":["127.0.0.0/8","::1"]}}}]}`
	if err := putPolicy(alice, "mine", doc); err != nil {
		t.Fatal(err)
	}
	wantAnon(t, s, "GET", "/mine/k", nil, 200)
}

// TestMinioBucketPolicy: minio-go's SetBucketPolicy / GetBucketPolicy (an
// empty policy deletes it), and its refusals.
func TestMinioBucketPolicy(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	ak := newKey(t, s.Client().Meta(), "alice", nil)
	bk := newKey(t, s.Client().Meta(), "bob", nil)
	mc := minioAs(t, s, ak.Key.AccessKey, ak.Secret)
	if err := mc.MakeBucket(ctx, "mpol", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	must(mc.PutObject(ctx, "mpol", "shared/a", strings.NewReader("a"), 1, minio.PutObjectOptions{}))
	if got, err := mc.GetBucketPolicy(ctx, "mpol"); err != nil || got != "" {
		t.Fatalf("GetBucketPolicy of a bucket without one: %q, %v", got, err)
	}
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::mpol/shared/*"]}]}`
	if err := mc.SetBucketPolicy(ctx, "mpol", doc); err != nil {
		t.Fatal(err)
	}
	if got := must(mc.GetBucketPolicy(ctx, "mpol")); got != doc {
		t.Fatalf("GetBucketPolicy: %q", got)
	}
	wantAnon(t, s, "GET", "/mpol/shared/a", nil, 200)
	err := mc.SetBucketPolicy(ctx, "mpol", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::mpol/*","Condition":{"StringEquals":{"aws:username":"x"}}}]}`)
	if minio.ToErrorResponse(err).Code != "MalformedPolicy" {
		t.Fatalf("an unsupported condition key: %v", err)
	}
	err = minioAs(t, s, bk.Key.AccessKey, bk.Secret).SetBucketPolicy(ctx, "mpol", doc)
	if minio.ToErrorResponse(err).Code != "AccessDenied" {
		t.Fatalf("bob's SetBucketPolicy: %v", err)
	}
	if err := mc.SetBucketPolicy(ctx, "mpol", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := mc.GetBucketPolicy(ctx, "mpol"); err != nil || got != "" {
		t.Fatalf("GetBucketPolicy after deleting it: %q, %v", got, err)
	}
	wantAnon(t, s, "GET", "/mpol/shared/a", nil, 403)
}
