package s3

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// BenchmarkVerifyHeader is the SigV4 cost of one header-signed GET.
func BenchmarkVerifyHeader(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:9000/bucket/some/key.bin", nil)
	req.RequestURI = "/bucket/some/key.bin"
	req.Header.Set("X-Amz-Content-Sha256", unsignedPayload)
	creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, unsignedPayload, "s3", "us-east-1", time.Now()); err != nil {
		b.Fatal(err)
	}
	c, err := parseAuthorization(req.Header.Get("Authorization"))
	if err != nil {
		b.Fatal(err)
	}
	if c.when, err = requestTime(req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := verifySignature(context.Background(), req, &c, "secret", unsignedPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChunkedSigned decodes and verifies a 1 MiB aws-chunked body in
// 64 KiB chunks.
func BenchmarkChunkedSigned(b *testing.B) {
	when := time.Now()
	seed := bytes.Repeat([]byte{7}, 32)
	var chunks [][]byte
	for range 16 {
		chunks = append(chunks, bytes.Repeat([]byte("x"), 64<<10))
	}
	body := signedChunks(b, seed, when, chunks...)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.Copy(io.Discard, newChunkedReader(bytes.NewReader(body), testSigner(seed, when))); err != nil {
			b.Fatal(err)
		}
	}
}
