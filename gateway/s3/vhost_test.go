package s3_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"cairn/server"
	"cairn/server/servertest"
)

// TestVirtualHost: with --s3-domain, bucket.domain/key names the object,
// and path-style requests keep working.
func TestVirtualHost(t *testing.T) {
	s := servertest.Start(t, func(c *server.Config) { c.S3Domain = "s3.cairn.test" })
	addr := s.Addr("s3")
	_, port, _ := net.SplitHostPort(addr)
	// Every host name dials the server: no DNS for *.s3.cairn.test needed.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	vc := s3.New(s3.Options{
		BaseEndpoint: aws.String("http://s3.cairn.test:" + port), Region: "us-east-1", HTTPClient: hc,
		Credentials: credentials.NewStaticCredentialsProvider(servertest.Root, servertest.RootSecret, ""), RetryMaxAttempts: 1,
	})
	ctx := context.Background()
	must(vc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vhosted")}))
	must(vc.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("vhosted"), Key: aws.String("dir/obj"), Body: strings.NewReader("virtual")}))
	if got := getBody(t, vc, "vhosted", "dir/obj"); string(got) != "virtual" {
		t.Fatalf("virtual-host GET: %q", got)
	}
	l := must(vc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("vhosted")}))
	if len(l.Contents) != 1 || *l.Contents[0].Key != "dir/obj" {
		t.Fatalf("virtual-host list: %+v", l.Contents)
	}
	if got := getBody(t, root(t, s), "vhosted", "dir/obj"); string(got) != "virtual" {
		t.Fatalf("path-style GET: %q", got)
	}
}
