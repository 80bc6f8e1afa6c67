package s3

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// FuzzPostForm: any body under any boundary either reads as fields (each
// and all within bounds) and a file, or fails with an S3 error; never a
// panic or an unbounded read before the file.
func FuzzPostForm(f *testing.F) {
	f.Add("XB", "--XB\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--XB--\r\n")
	f.Add("b", "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nv\r\n--b\r\nContent-Disposition: form-data; name=\"Key\"\r\n\r\nw\r\n--b--\r\n")
	f.Add("b", "--b\r\nContent-Disposition: form-data\r\n\r\nv\r\n--b--")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, boundary, body string) {
		form, err := readPostForm("multipart/form-data; boundary="+boundary, strings.NewReader(body))
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		total := 0
		for k, v := range form.fields {
			if k != strings.ToLower(k) || len(v) > maxPostField {
				t.Fatalf("field %q of %d bytes", k, len(v))
			}
			total += len(k) + len(v)
		}
		if total > maxPostFields {
			t.Fatalf("fields of %d bytes", total)
		}
		if form.file != nil {
			io.Copy(io.Discard, form.file)
		}
	})
}

// FuzzPostPolicy: any policy document parses or is refused with an S3
// error; one that parses checks any fields without a panic, and a
// content-length-range it accepts is ordered.
func FuzzPostPolicy(f *testing.F) {
	f.Add(`{"expiration":"2030-01-01T00:00:00.000Z","conditions":[{"bucket":"b"},["starts-with","$key","u/"],["content-length-range",1,"10"],["eq","$Content-Type","text/plain"]]}`, "u/x")
	f.Add(`{"expiration":"2030-01-01T00:00:00Z","conditions":[]}`, "")
	f.Add(`{"expiration":1,"conditions":{}}`, "")
	f.Add(`{"conditions":[["content-length-range",-1,5]]}`, "")
	f.Fuzz(func(t *testing.T, doc, key string) {
		for _, b64 := range []string{base64.StdEncoding.EncodeToString([]byte(doc)), doc} {
			p, err := parsePostPolicy(b64)
			if err != nil {
				var ae *apiError
				if !errors.As(err, &ae) {
					t.Fatalf("error of type %T: %v", err, err)
				}
				continue
			}
			if p.maxSize >= 0 && (p.minSize < 0 || p.maxSize < p.minSize) {
				t.Fatalf("content-length-range %d..%d", p.minSize, p.maxSize)
			}
			p.check(map[string]string{"key": key, "content-type": key, "policy": b64}, "b", time.Now())
		}
	})
}

// TestPostFormStopsAtFile: the fields after the file are not read (S3
// ignores them) and the file is streamed, not buffered.
func TestPostFormStopsAtFile(t *testing.T) {
	body := "--b\r\nContent-Disposition: form-data; name=\"Key\"\r\n\r\nk\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dir/x.bin\"\r\n\r\n" +
		strings.Repeat("z", 1<<20) + "\r\n--b\r\nContent-Disposition: form-data; name=\"late\"\r\n\r\nv\r\n--b--\r\n"
	form, err := readPostForm("multipart/form-data; boundary=b", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if form.fields["key"] != "k" || form.filename != "x.bin" || len(form.fields) != 1 {
		t.Fatalf("fields %v, filename %q", form.fields, form.filename)
	}
	data, err := io.ReadAll(form.file)
	if err != nil || !bytes.Equal(data, bytes.Repeat([]byte("z"), 1<<20)) {
		t.Fatalf("file of %d bytes, %v", len(data), err)
	}
	_, err = readPostForm("multipart/form-data; boundary=b", strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"k\"\r\n\r\n"+strings.Repeat("v", maxPostField+1)+"\r\n--b--\r\n"))
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != "MaxPostPreDataLengthExceeded" {
		t.Fatalf("an oversize field: %v", err)
	}
}
