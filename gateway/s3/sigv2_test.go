package s3

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestV2StringToSign checks the canonicalization against the examples of
// S3's V2 reference ("Signing and authenticating REST requests"), whose
// signatures are published there with the example secret.
func TestV2StringToSign(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	for _, tc := range []struct {
		method, target, resource string
		h                        map[string]string
		wantSTS, wantSig         string
	}{
		{ // Object GET
			"GET", "/photos/puppy.jpg", "/awsexamplebucket1/photos/puppy.jpg",
			map[string]string{"Date": "Tue, 27 Mar 2007 19:36:42 +0000"},
			"GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/awsexamplebucket1/photos/puppy.jpg",
			"qgk2+6Sv9/oM7G3qLEjTH1a1l1g=",
		},
		{ // x-amz-* headers: lower-cased, sorted, values of one name joined
			"PUT", "/db-backup.dat.gz", "/static.example.com/db-backup.dat.gz",
			map[string]string{"Date": "Tue, 27 Mar 2007 21:06:08 +0000", "Content-Type": "application/x-download",
				"Content-MD5": "4gJE4saaMU4BqNR0kLY+lw==", "X-Amz-Acl": "public-read", "X-Amz-Meta-ReviewedBy": "joe@example.com,jane@example.com",
				"X-Amz-Meta-FileChecksum": "0x02661779", "X-Amz-Meta-ChecksumAlgorithm": "crc32"},
			"PUT\n4gJE4saaMU4BqNR0kLY+lw==\napplication/x-download\nTue, 27 Mar 2007 21:06:08 +0000\n" +
				"x-amz-acl:public-read\nx-amz-meta-checksumalgorithm:crc32\nx-amz-meta-filechecksum:0x02661779\n" +
				"x-amz-meta-reviewedby:joe@example.com,jane@example.com\n/static.example.com/db-backup.dat.gz",
			"jtBQa0Aq+DkULFI8qrpwIjGEx0E=",
		},
		{ // sub-resources sorted, other parameters left out
			"GET", "/k?versionId=v1&acl&max-keys=3&response-content-type=text%2Fplain", "/b/k",
			map[string]string{"Date": "Tue, 27 Mar 2007 19:36:42 +0000"},
			"GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/b/k?acl&response-content-type=text/plain&versionId=v1",
			"",
		},
	} {
		r, err := http.NewRequest(tc.method, "http://example.com"+tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.h {
			r.Header.Set(k, v)
		}
		sts := v2StringToSign(r, r.URL.Query(), r.Header.Get("Date"), tc.resource)
		if sts != tc.wantSTS {
			t.Errorf("string to sign\n%q\nwant\n%q", sts, tc.wantSTS)
		}
		if tc.wantSig != "" {
			if got := base64.StdEncoding.EncodeToString(v2Sign(secret, sts)); got != tc.wantSig {
				t.Errorf("signature %s, want %s", got, tc.wantSig)
			}
		}
	}
}

func FuzzParseV2Authorization(f *testing.F) {
	f.Add("AWS AKID:qgk2+6Sv9/oM7G3qLEjTH1a1l1g=")
	f.Add("AWS :qgk2+6Sv9/oM7G3qLEjTH1a1l1g=")
	f.Add("AWS AKID:")
	f.Add("AWS a:b:c")
	f.Add("AWS4-HMAC-SHA256 Credential=x")
	f.Fuzz(func(t *testing.T, h string) {
		c, err := parseV2Authorization(h)
		if err != nil {
			return
		}
		if c.access == "" || strings.ContainsAny(c.access, " \t:") || len(c.signature) != 20 || c.presigned {
			t.Fatalf("accepted %+v from %q", c, h)
		}
	})
}

func FuzzParseV2Presigned(f *testing.F) {
	f.Add("AWSAccessKeyId=AK&Signature=qgk2%2B6Sv9%2FoM7G3qLEjTH1a1l1g%3D&Expires=1795645104")
	f.Add("AWSAccessKeyId=AK&Signature=x&Expires=-1")
	f.Add("AWSAccessKeyId=AK&AWSAccessKeyId=B&Signature=qgk2%2B6Sv9%2FoM7G3qLEjTH1a1l1g%3D&Expires=1")
	f.Add("Expires=99999999999999999999")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		c, err := parseV2Presigned(v)
		if err != nil {
			return
		}
		if c.access == "" || len(c.signature) != 20 || c.expires < 0 || !c.presigned || len(v["AWSAccessKeyId"]) != 1 {
			t.Fatalf("accepted %+v from %q", c, q)
		}
	})
}
