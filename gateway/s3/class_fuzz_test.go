package s3

import (
	"testing"

	"cairn/proto/metapb"
)

// FuzzUploadClass: any upload id a client sends parses without failing,
// and the ids the gateway makes carry their class back.
func FuzzUploadClass(f *testing.F) {
	for _, s := range []string{"", "ec-4+2", "cold", "0123abcdx", "x", "xzz", uploadID("ec-8+4")} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uploadClass(s)
		if got := uploadClass(uploadID(s)); got != s {
			t.Fatalf("uploadClass(uploadID(%q)) = %q", s, got)
		}
	})
}

// TestClassNames: the S3 name a read answers for a file's class.
func TestClassNames(t *testing.T) {
	c := newS3Classes(map[string]string{"STANDARD_IA": "cold", "COLD": "cold", "GLACIER_IR": "ec-8+4"})
	for _, tc := range []struct {
		bucket, file, header, want string
	}{
		{"", "", "", "STANDARD"},
		{"hot", "", "", "STANDARD"},
		{"", "replicated", "", "STANDARD"},
		{"hot", "hot", "", "STANDARD"},
		{"hot", "replicated", "", "replicated"}, // no S3 name: the Cairn name
		{"", "cold", "", "COLD"},                // two names: the first sorted
		{"", "ec-8+4", "", "GLACIER_IR"},
		{"", "", "STANDARD_IA", "STANDARD_IA"}, // an older PUT's kept name
	} {
		n := &metapb.Inode{StorageClass: tc.file}
		if tc.header != "" {
			n.Headers = map[string]string{"X-Amz-Storage-Class": tc.header}
		}
		if got := c.name(&metapb.Namespace{StorageClass: tc.bucket}, n); got != tc.want {
			t.Errorf("bucket %q, file %q: %q, want %q", tc.bucket, tc.file, got, tc.want)
		}
	}
	if cls, err := c.class("STANDARD"); err != nil || cls != "" {
		t.Errorf("STANDARD: %q %v", cls, err)
	}
	if _, err := c.class("DEEP_ARCHIVE"); err == nil {
		t.Error("DEEP_ARCHIVE accepted")
	}
}
