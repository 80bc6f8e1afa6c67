package s3_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"cairn/server"
)

func minioAs(t *testing.T, s *server.Server, key, secret string) *minio.Client {
	t.Helper()
	u := must(url.Parse(s.S3URL()))
	return must(minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(key, secret, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath}))
}

// postForm posts a browser-upload form (fields in order, then the file)
// and returns the response with its body read.
func postForm(t *testing.T, u string, fields map[string]string, filename string, file []byte) (*http.Response, []byte) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		w.WriteField(k, v)
	}
	if file != nil {
		fw := must(w.CreateFormFile("file", filename))
		fw.Write(file)
	}
	w.Close()
	req := must(http.NewRequest(http.MethodPost, u, &buf))
	req.Header.Set("Content-Type", w.FormDataContentType())
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp := must(c.Do(req))
	defer resp.Body.Close()
	return resp, must(io.ReadAll(resp.Body))
}

func errCode(body []byte) string {
	var e struct{ Code string }
	xml.Unmarshal(body, &e)
	return e.Code
}

func wantPost(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status || errCode(body) != code {
		t.Fatalf("%s: %d %s, want %d %s (%s)", what, resp.StatusCode, errCode(body), status, code, body)
	}
}

func copyFields(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestPostObject: browser uploads signed by minio-go's PresignedPostPolicy,
// each condition and each error case; nothing refused is committed.
func TestPostObject(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	m := s.Client().Meta()
	ak := newKey(t, m, "alice", nil)
	bk := newKey(t, m, "bob", nil)
	alice := sdk(t, s, ak.Key.AccessKey, ak.Secret)
	must(alice.CreateBucket(ctx, bucketInput("uploadbox")))
	must(alice.PutObject(ctx, putInput("uploadbox", "uploads/old.txt", "the old bytes")))
	mc := minioAs(t, s, ak.Key.AccessKey, ak.Secret)

	sign := func(mc *minio.Client, edit func(p *minio.PostPolicy)) (string, map[string]string) {
		t.Helper()
		p := minio.NewPostPolicy()
		p.SetBucket("uploadbox")
		p.SetKeyStartsWith("uploads/")
		p.SetExpires(time.Now().Add(time.Hour))
		p.SetContentType("text/plain")
		p.SetContentLengthRange(1, 64)
		p.SetUserMetadata("origin", "browser")
		if edit != nil {
			edit(p)
		}
		u, f, err := mc.PresignedPostPolicy(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return u.String(), f
	}

	u, f := sign(mc, func(p *minio.PostPolicy) { p.SetSuccessStatusAction("201") })
	f["key"] = "uploads/${filename}"
	resp, body := postForm(t, u, f, `C:\docs\note.txt`, []byte("hello from a form"))
	wantPost(t, "201", resp, body, http.StatusCreated, "")
	var pr struct{ Bucket, Key, ETag, Location string }
	if err := xml.Unmarshal(body, &pr); err != nil || pr.Bucket != "uploadbox" || pr.Key != "uploads/note.txt" || pr.ETag != resp.Header.Get("ETag") {
		t.Fatalf("PostResponse %+v (%v), ETag %s", pr, err, resp.Header.Get("ETag"))
	}
	out := must(alice.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("uploadbox"), Key: aws.String("uploads/note.txt")}))
	got := must(io.ReadAll(out.Body))
	out.Body.Close()
	if string(got) != "hello from a form" || aws.ToString(out.ContentType) != "text/plain" || out.Metadata["origin"] != "browser" {
		t.Fatalf("the posted object: %q %s %v", got, aws.ToString(out.ContentType), out.Metadata)
	}

	// success_action_status 200 and the default 204; a redirect.
	u, f = sign(mc, func(p *minio.PostPolicy) { p.SetSuccessStatusAction("200") })
	f["key"] = "uploads/a"
	resp, body = postForm(t, u, f, "a", []byte("a"))
	wantPost(t, "200", resp, body, http.StatusOK, "")
	u, f = sign(mc, nil)
	f["key"] = "uploads/b"
	resp, body = postForm(t, u, f, "b", []byte("b"))
	wantPost(t, "204", resp, body, http.StatusNoContent, "")
	u, f = sign(mc, func(p *minio.PostPolicy) { p.SetSuccessActionRedirect("https://app.example/done?x=1") })
	f["key"] = "uploads/c"
	resp, body = postForm(t, u, f, "c", []byte("c"))
	wantPost(t, "redirect", resp, body, http.StatusSeeOther, "")
	loc := must(url.Parse(resp.Header.Get("Location")))
	if loc.Host != "app.example" || loc.Query().Get("key") != "uploads/c" || loc.Query().Get("bucket") != "uploadbox" ||
		loc.Query().Get("x") != "1" || loc.Query().Get("etag") == "" {
		t.Fatalf("redirect Location %s", loc)
	}

	// Refusals. None may change uploads/old.txt.
	old := func(what string) {
		t.Helper()
		if got := string(getBody(t, alice, "uploadbox", "uploads/old.txt")); got != "the old bytes" {
			t.Fatalf("after %s: uploads/old.txt holds %q", what, got)
		}
	}
	u, f = sign(mc, nil)
	f["key"] = "uploads/old.txt"
	resp, body = postForm(t, u, f, "x", bytes.Repeat([]byte("x"), 65))
	wantPost(t, "over content-length-range", resp, body, http.StatusBadRequest, "EntityTooLarge")
	old("an oversize POST")
	resp, body = postForm(t, u, f, "x", []byte{})
	wantPost(t, "under content-length-range", resp, body, http.StatusBadRequest, "EntityTooSmall")
	old("an undersize POST")
	g := copyFields(f)
	g["key"] = "elsewhere/x"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "key outside starts-with", resp, body, http.StatusForbidden, "AccessDenied")
	g = copyFields(f)
	g["Content-Type"] = "text/html"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "content type not eq", resp, body, http.StatusForbidden, "AccessDenied")
	g = copyFields(f)
	g["x-amz-meta-extra"] = "unsigned"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "a field no condition names", resp, body, http.StatusForbidden, "AccessDenied")
	g = copyFields(f)
	g["x-amz-website-redirect-location"] = "/elsewhere"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "an unsupported field", resp, body, http.StatusNotImplemented, "NotImplemented")
	g = copyFields(f)
	doc := must(base64.StdEncoding.DecodeString(g["policy"]))
	g["policy"] = base64.StdEncoding.EncodeToString(bytes.Replace(doc, []byte("uploads/"), []byte(""), 1))
	g["key"] = "elsewhere/x"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "a tampered policy", resp, body, http.StatusForbidden, "SignatureDoesNotMatch")
	g = copyFields(f)
	g["policy"] = "not base64!"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "a policy that is not base64", resp, body, http.StatusBadRequest, "InvalidPolicyDocument")
	resp, body = postForm(t, u, f, "", nil)
	wantPost(t, "no file", resp, body, http.StatusBadRequest, "InvalidArgument")
	g = copyFields(f)
	delete(g, "key")
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "no key", resp, body, http.StatusBadRequest, "InvalidArgument")
	g = copyFields(f)
	g["bucket"] = "other"
	resp, body = postForm(t, u, g, "x", []byte("x"))
	wantPost(t, "another bucket", resp, body, http.StatusBadRequest, "InvalidArgument")
	u2, f2 := sign(mc, func(p *minio.PostPolicy) { p.SetExpires(time.Now().Add(-time.Minute)) })
	f2["key"] = "uploads/late"
	resp, body = postForm(t, u2, f2, "x", []byte("x"))
	wantPost(t, "an expired policy", resp, body, http.StatusForbidden, "AccessDenied")
	wrong := minioAs(t, s, ak.Key.AccessKey, "not the secret")
	u2, f2 = sign(wrong, nil)
	f2["key"] = "uploads/wrong"
	resp, body = postForm(t, u2, f2, "x", []byte("x"))
	wantPost(t, "a wrong secret", resp, body, http.StatusForbidden, "SignatureDoesNotMatch")
	u2, f2 = sign(minioAs(t, s, bk.Key.AccessKey, bk.Secret), nil)
	f2["key"] = "uploads/bob"
	resp, body = postForm(t, u2, f2, "x", []byte("x"))
	wantPost(t, "a signer without rights", resp, body, http.StatusForbidden, "AccessDenied")
	req := must(http.NewRequest(http.MethodPost, u, strings.NewReader("key=a")))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r := must(http.DefaultClient.Do(req))
	b := must(io.ReadAll(r.Body))
	r.Body.Close()
	wantPost(t, "not multipart", r, b, http.StatusBadRequest, "MalformedPOSTRequest")
	for _, k := range []string{"uploads/late", "uploads/wrong", "uploads/bob", "elsewhere/x", "uploads/x"} {
		if _, err := alice.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("uploadbox"), Key: aws.String(k)}); err == nil {
			t.Fatalf("a refused POST made %s", k)
		}
	}
	old("the refusals")

	// Anonymous forms: only where the bucket policy lets anyone write.
	if err := putPolicy(alice, "uploadbox", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:PutObject","Resource":"arn:aws:s3:::uploadbox/drop/*"}]}`); err != nil {
		t.Fatal(err)
	}
	resp, body = postForm(t, s.S3URL()+"/uploadbox", map[string]string{"key": "drop/${filename}"}, "anon.txt", []byte("anonymous"))
	wantPost(t, "an anonymous POST the policy allows", resp, body, http.StatusNoContent, "")
	if string(getBody(t, alice, "uploadbox", "drop/anon.txt")) != "anonymous" {
		t.Fatal("the anonymous upload has other bytes")
	}
	resp, body = postForm(t, s.S3URL()+"/uploadbox", map[string]string{"key": "uploads/old.txt"}, "x", []byte("anonymous"))
	wantPost(t, "an anonymous POST elsewhere", resp, body, http.StatusForbidden, "AccessDenied")
	old("an anonymous POST")
}
