package s3_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"cairn/server/servertest"
)

// TestMalformed sends requests no client library would: each must get an
// S3 error with a request id, never crash the gateway, and never leave an
// object (whole or partial) behind.
func TestMalformed(t *testing.T) {
	s := start(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bad")}))
	creds := aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret}
	signer := v4.NewSigner()

	// streamingPut sends an aws-chunked PUT whose chunks are signed by
	// the SDK's stream signer and then altered by mutate.
	streamingPut := func(key string, mutate func([]byte) []byte) *http.Response {
		now := time.Now().UTC()
		chunks := [][]byte{bytes.Repeat([]byte("a"), 70000), []byte("tail")}
		decoded := 70004
		req := must(http.NewRequest(http.MethodPut, s.S3URL()+"/bad/"+key, nil))
		req.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(decoded))
		if err := signer.SignHTTP(ctx, creds, req, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "s3", "us-east-1", now); err != nil {
			t.Fatal(err)
		}
		seedHex := req.Header.Get("Authorization")[strings.LastIndex(req.Header.Get("Authorization"), "=")+1:]
		seed := must(hex.DecodeString(seedHex))
		ss := v4.NewStreamSigner(creds, "s3", "us-east-1", seed)
		var b bytes.Buffer
		for _, ch := range append(chunks, nil) {
			sig := must(ss.GetSignature(ctx, nil, ch, now))
			fmt.Fprintf(&b, "%x;chunk-signature=%x\r\n", len(ch), sig)
			b.Write(ch)
			b.WriteString("\r\n")
		}
		body := mutate(b.Bytes())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		resp := must(http.DefaultClient.Do(req))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := streamingPut("good", func(b []byte) []byte { return b }); r.StatusCode != 200 {
		t.Fatalf("a well-formed streaming PUT: %d", r.StatusCode)
	}
	if got := getBody(t, c, "bad", "good"); len(got) != 70004 {
		t.Fatalf("streamed object has %d bytes", len(got))
	}
	bad := map[string]func([]byte) []byte{
		"tampered":  func(b []byte) []byte { return bytes.Replace(b, []byte("tail"), []byte("TAIL"), 1) },
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"no-final":  func(b []byte) []byte { return b[:bytes.LastIndex(b, []byte("0;chunk"))] },
		"garbage":   func(b []byte) []byte { return []byte("zz;chunk-signature=00\r\n") },
	}
	for name, mutate := range bad {
		r := streamingPut(name, mutate)
		if r.StatusCode < 400 || r.StatusCode >= 500 || r.Header.Get("X-Amz-Request-Id") == "" {
			t.Errorf("%s streaming PUT: status %d", name, r.StatusCode)
		}
		if _, err := s.Client().StatFresh(ctx, "bad", name); err == nil {
			t.Errorf("%s streaming PUT left an object", name)
		}
	}

	var rawTrailerPut func(key, body string) int
	// Unsigned chunks with a trailing checksum, as SDKs send when they
	// cannot hash the body first: a right checksum stores, a wrong one not.
	trailerPut := func(key, crc string) int {
		return rawTrailerPut(key, "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:"+crc+"\r\n\r\n")
	}
	rawTrailerPut = func(key, body string) int {
		req := must(http.NewRequest(http.MethodPut, s.S3URL()+"/bad/"+key, strings.NewReader(body)))
		req.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
		req.Header.Set("Content-Encoding", "aws-chunked")
		req.Header.Set("X-Amz-Trailer", "x-amz-checksum-crc32")
		req.Header.Set("X-Amz-Decoded-Content-Length", "11")
		if err := signer.SignHTTP(ctx, creds, req, "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp := must(http.DefaultClient.Do(req))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := trailerPut("trailer-ok", "DUoRhQ=="); code != 200 {
		t.Fatalf("trailer checksum PUT: %d", code)
	}
	if got := getBody(t, c, "bad", "trailer-ok"); string(got) != "hello world" {
		t.Fatalf("trailer PUT stored %q", got)
	}
	if code := trailerPut("trailer-bad", "AAAAAA=="); code != 400 {
		t.Fatalf("wrong trailer checksum: %d", code)
	}
	// Trailer lines ended by a bare LF (as minio-go ends them) are read,
	// and so checked; an announced trailer that never comes fails.
	if code := rawTrailerPut("trailer-lf", "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\n\r\n"); code != 200 {
		t.Fatalf("trailer ended by LF: %d", code)
	}
	for name, body := range map[string]string{
		"trailer-bad-lf":  "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\n\r\n",
		"trailer-missing": "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
		"trailer-cut":     "5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==",
	} {
		if code := rawTrailerPut(name, body); code != 400 {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	for _, k := range []string{"trailer-bad", "trailer-bad-lf", "trailer-missing", "trailer-cut"} {
		if _, err := s.Client().StatFresh(ctx, "bad", k); err == nil {
			t.Errorf("%s: a body with a wrong or missing trailing checksum was stored", k)
		}
	}

	// A signed payload hash that does not match the body.
	req := must(http.NewRequest(http.MethodPut, s.S3URL()+"/bad/hash", strings.NewReader("the body")))
	sum := strings.Repeat("ab", 32)
	req.Header.Set("X-Amz-Content-Sha256", sum)
	if err := signer.SignHTTP(ctx, creds, req, sum, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp := must(http.DefaultClient.Do(req))
	msg := must(io.ReadAll(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != 400 || !bytes.Contains(msg, []byte("XAmzContentSHA256Mismatch")) {
		t.Fatalf("payload hash mismatch: %d %s", resp.StatusCode, msg)
	}
	if _, err := s.Client().StatFresh(ctx, "bad", "hash"); err == nil {
		t.Fatal("a body that failed its hash was stored")
	}

	// Headers and bodies that are not what they claim.
	raw := func(method, path, authz, body string) (int, string) {
		req := must(http.NewRequest(method, s.S3URL()+path, strings.NewReader(body)))
		if authz != "" {
			req.Header.Set("Authorization", authz)
			req.Header.Set("X-Amz-Date", time.Now().UTC().Format("20060102T150405Z"))
			req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		}
		resp := must(http.DefaultClient.Do(req))
		b := must(io.ReadAll(resp.Body))
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, a := range []string{"AWS4-HMAC-SHA256", "AWS4-HMAC-SHA256 Credential=x", "Bearer abc",
		"AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=00",
		"AWS4-HMAC-SHA256 Credential=" + servertest.Root + "/20990101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("0", 64)} {
		if code, body := raw(http.MethodGet, "/bad/good", a, ""); code < 400 || code >= 500 || !strings.Contains(body, "<Code>") {
			t.Errorf("Authorization %q: %d %s", a, code, body)
		}
	}
	signedRaw := func(method, path, body string, hdr map[string]string) (int, string) {
		req := must(http.NewRequest(method, s.S3URL()+path, strings.NewReader(body)))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		if err := signer.SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp := must(http.DefaultClient.Do(req))
		b := must(io.ReadAll(resp.Body))
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, body string
		hdr                map[string]string
		code               string
	}{
		{"POST", "/bad?delete", "<Delete><Object><Key>", nil, "MalformedXML"},
		{"POST", "/bad?delete", "not xml at all", nil, "MalformedXML"},
		{"PUT", "/bad?cors", "<CORSConfiguration></CORSConfiguration>", nil, "MalformedXML"},
		{"PUT", "/bad/k?tagging", "<Tagging><TagSet>", nil, "MalformedXML"},
		{"PUT", "/bad/k2", "x", map[string]string{"X-Amz-Copy-Source": "%zz"}, "InvalidRequest"},
		{"PUT", "/bad/k3", "x", map[string]string{"Content-MD5": "not-base64!"}, "InvalidDigest"},
		{"PUT", "/bad/k5", "x", map[string]string{"X-Amz-Checksum-Sha256": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, "BadDigest"},
		{"PUT", "/bad/k5", "x", map[string]string{"X-Amz-Checksum-Crc32c": "AAAAAA=="}, "BadDigest"},
		{"PUT", "/bad/k4?partNumber=0&uploadId=nope", "x", nil, "InvalidArgument"},
		{"PUT", "/bad/k4?partNumber=1&uploadId=nope", "x", nil, "NoSuchUpload"},
		{"POST", "/bad/k4?uploadId=nope", "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>", nil, "NoSuchUpload"},
		{"GET", "/bad?list-type=2&continuation-token=bm9udWw", "", nil, "InvalidArgument"},
		{"GET", "/bad?list-type=2&continuation-token=Zm9vAA", "", nil, "InvalidArgument"},
		{"GET", "/bad?list-type=2&max-keys=-1", "", nil, "InvalidArgument"},
	} {
		code, body := signedRaw(tc.method, tc.path, tc.body, tc.hdr)
		if !strings.Contains(body, "<Code>"+tc.code+"</Code>") {
			t.Errorf("%s %s: %d %s, want %s", tc.method, tc.path, code, body, tc.code)
		}
	}
	for _, k := range []string{"k", "k2", "k3", "k4", "k5"} {
		if _, err := s.Client().StatFresh(ctx, "bad", k); err == nil {
			t.Errorf("a malformed request left object %s", k)
		}
	}
}
