package s3

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// BenchmarkResolve is the cost exhaustive routing adds to every request:
// a signed GET as an SDK sends it.
func BenchmarkResolve(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/bucket/some/key?x-id=GetObject", nil)
	for k, v := range map[string]string{"X-Amz-Date": "20261125T000000Z", "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
		"Authorization": "AWS4-HMAC-SHA256 ...", "User-Agent": "aws-sdk-go-v2", "Amz-Sdk-Invocation-Id": "x",
		"Amz-Sdk-Request": "attempt=1", "Accept-Encoding": "identity", "X-Amz-Checksum-Mode": "ENABLED"} {
		r.Header.Set(k, v)
	}
	q := &request{r: r, query: r.URL.Query(), bucket: "bucket", key: "some/key"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := resolve(q); err != nil {
			b.Fatal(err)
		}
	}
}
