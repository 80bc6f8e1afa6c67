package s3_test

import (
	"bytes"
	"context"
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

// FuzzServe sends arbitrary requests, signed by root so that they get
// past authentication, to a real gateway: whatever the method, key,
// query, headers and body, the answer is an S3 answer with a request id,
// never an internal error, and the gateway keeps serving.
func FuzzServe(f *testing.F) {
	s := servertest.Start(f, nil)
	c := s3.New(s3.Options{BaseEndpoint: aws.String(s.S3URL()), Region: "us-east-1", UsePathStyle: true,
		Credentials: staticRoot{}, RetryMaxAttempts: 1})
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("fzz")))
	must(c.PutObject(ctx, putInput("fzz", "obj", "fuzzing")))
	up := must(c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("fzz"), Key: aws.String("mp")}))
	id := *up.UploadId

	f.Add(uint8(1), "obj", "", "Content-Type: text/plain", []byte("data"))
	f.Add(uint8(0), "obj", "", "Range: bytes=1-2\nIf-None-Match: *", []byte(nil))
	f.Add(uint8(0), "", "list-type=2&prefix=o&delimiter=/&max-keys=1&encoding-type=url&start-after=a", "", []byte(nil))
	f.Add(uint8(0), "", "marker=%ff&max-keys=abc", "", []byte(nil))
	f.Add(uint8(2), "", "delete", "", []byte(`<Delete><Object><Key>obj</Key></Object></Delete>`))
	f.Add(uint8(1), "obj", "tagging", "", []byte(`<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>`))
	f.Add(uint8(1), "", "cors", "", []byte(`<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>`))
	f.Add(uint8(1), "", "acl", "x-amz-acl: public-read", []byte(nil))
	f.Add(uint8(1), "copy", "", "x-amz-copy-source: fzz/obj\nx-amz-metadata-directive: REPLACE", []byte(nil))
	f.Add(uint8(1), "mp", "partNumber=1&uploadId="+id, "", []byte("part"))
	f.Add(uint8(1), "mp", "partNumber=2&uploadId="+id, "x-amz-copy-source: /fzz/obj\nx-amz-copy-source-range: bytes=0-3", []byte(nil))
	f.Add(uint8(0), "mp", "uploadId="+id+"&max-parts=1&part-number-marker=x", "", []byte(nil))
	f.Add(uint8(2), "mp", "uploadId="+id, "", []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>`))
	f.Add(uint8(2), "new", "uploads", "x-amz-tagging: a=1", []byte(nil))
	f.Add(uint8(3), "obj", "", "", []byte(nil))
	f.Add(uint8(1), "obj", "", "x-amz-checksum-crc32c: AAAAAA==\nContent-MD5: 1B2M2Y8AsgTpgAmY7PhCfg==", []byte("x"))

	methods := []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodHead}
	signer := v4.NewSigner()
	creds := aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret}
	alive := func(t *testing.T) {
		if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("fzz"), Key: aws.String("obj")}); err != nil &&
			!strings.Contains(err.Error(), "StatusCode: 404") && !strings.Contains(err.Error(), "StatusCode: 409") {
			t.Fatalf("the gateway stopped answering: %v", err)
		}
	}
	f.Fuzz(func(t *testing.T, m uint8, key, query, headers string, body []byte) {
		u := s.S3URL() + "/fzz/" + key
		if query != "" {
			u += "?" + query
		}
		req, err := http.NewRequest(methods[int(m)%len(methods)], u, bytes.NewReader(body))
		if err != nil {
			return
		}
		for _, l := range strings.Split(headers, "\n") {
			k, v, ok := strings.Cut(l, ":")
			if !ok {
				continue
			}
			k = strings.TrimSpace(k)
			switch strings.ToLower(k) {
			case "host", "content-length", "transfer-encoding", "connection", "authorization", "expect":
				continue
			}
			req.Header.Add(k, strings.TrimSpace(v))
		}
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		if err := signer.SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(cctx))
		if err != nil {
			alive(t) // the client may refuse what it cannot send
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Amz-Request-Id") == "" {
			t.Fatalf("%s %s: %d without a request id", req.Method, u, resp.StatusCode)
		}
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented {
			t.Fatalf("%s %s %q: %d %s", req.Method, u, headers, resp.StatusCode, out)
		}
		if resp.StatusCode >= 400 && req.Method != http.MethodHead && !bytes.Contains(out, []byte("<Code>")) {
			t.Fatalf("%s %s: %d without an S3 error body: %s", req.Method, u, resp.StatusCode, out)
		}
	})
}

// staticRoot is the root pair as an SDK credentials provider.
type staticRoot struct{}

func (staticRoot) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret, Source: "test"}, nil
}
