package console

import (
	"net/url"
	"strconv"
	"testing"
)

// FuzzParsePart: a part number from the URL is 1..maxParts written
// canonically, or refused.
func FuzzParsePart(f *testing.F) {
	for _, s := range []string{"1", "1000", "0", "1001", "01", "+1", "-1", " 1", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parsePart(s)
		if err != nil {
			return
		}
		if n < 1 || n > maxParts || strconv.Itoa(n) != s {
			t.Fatalf("parsePart(%q) = %d", s, n)
		}
	})
}

// FuzzS3Escape: the escaped path decodes to the path and holds only
// unreserved characters, '/' and escapes.
func FuzzS3Escape(f *testing.F) {
	for _, s := range []string{"a b", "dir/ü.txt", "<img src=x>", "%41", "a+b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := s3Escape(s)
		d, err := url.PathUnescape(e)
		if err != nil || d != s {
			t.Fatalf("s3Escape(%q) = %q decodes to %q, %v", s, e, d, err)
		}
		for i := 0; i < len(e); i++ {
			c := e[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/' || c == '%') {
				t.Fatalf("s3Escape(%q) = %q keeps %q", s, e, c)
			}
		}
	})
}
