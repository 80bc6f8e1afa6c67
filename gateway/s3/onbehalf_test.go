package s3_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	cairns3 "cairn/gateway/s3"
	"cairn/proto/metapb"
)

// TestMetaChecksTheSigner: the S3 server names the request's signer to
// meta (meta.OnBehalfOf), so a key with a read grant cannot write even
// when this server's own check is wrong (ForgeGrant: its key cache says
// the key may write). Meta refuses the write; the read still works.
func TestMetaChecksTheSigner(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	if _, err := root(t, s).CreateBucket(ctx, bucketInput("guarded")); err != nil {
		t.Fatal(err)
	}
	if _, err := root(t, s).PutObject(ctx, putInput("guarded", "a", "root's bytes")); err != nil {
		t.Fatal(err)
	}
	k := newKey(t, s.Client().Meta(), "reader", map[string]metapb.S3Access{"guarded": metapb.S3Access_S3_READ})

	// A second S3 server on the same gateway client, whose key cache is
	// forged.
	srv, err := cairns3.New(cairns3.Config{Client: s.Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(lis)
	defer hs.Close()
	cairns3.ForgeGrant(srv, k.Key.AccessKey, k.Secret, "guarded")
	c := s3.New(s3.Options{BaseEndpoint: aws.String("http://" + lis.Addr().String()), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(k.Key.AccessKey, k.Secret, ""), RetryMaxAttempts: 1})

	_, err = c.PutObject(ctx, putInput("guarded", "b", "written past the gateway"))
	wantCode(t, err, "AccessDenied")
	_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("guarded"), Key: aws.String("a")})
	wantCode(t, err, "AccessDenied")
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("guarded"), Key: aws.String("a")})
	if err != nil {
		t.Fatalf("read with the read grant: %v", err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "root's bytes" {
		t.Fatalf("read %q", b)
	}
	l, err := root(t, s).ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("guarded")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range l.Contents {
		keys = append(keys, *o.Key)
	}
	if strings.Join(keys, ",") != "a" {
		t.Fatalf("objects after the refused writes: %v", keys)
	}
}
