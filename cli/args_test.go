package cli

import (
	"strings"
	"testing"

	"cairn/errors"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    target
		errPart string // "" means valid
	}{
		{"photos/a.jpg", target{"photos", "a.jpg", false}, ""},
		{"photos/2024/a.jpg", target{"photos", "2024/a.jpg", false}, ""},
		{"photos/2024/", target{"photos", "2024", true}, ""},
		{"photos", target{"photos", "", true}, ""},
		{"photos/", target{"photos", "", true}, ""},
		{"my-ns.v2/x y", target{"my-ns.v2", "x y", false}, ""},
		{"", target{}, "empty path"},
		{"/tmp/x", target{}, "looks like a local path"},
		{"./x", target{}, "looks like a local path"},
		{"..", target{}, "looks like a local path"},
		{"ab/x", target{}, "3 to 63"},
		{"Photos/x", target{}, "lowercase"},
		{"photos/a//b", target{}, "empty component"},
		{"photos/a/../b", target{}, "'..'"},
		{"photos/a\x00b", target{}, "NUL"},
		{"photos/" + strings.Repeat("x", 256), target{}, "longer than 255"},
	} {
		got, err := parseTarget(tc.in)
		if tc.errPart == "" {
			if err != nil || got != tc.want {
				t.Errorf("parseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("parseTarget(%q) error = %v; want one mentioning %q", tc.in, err, tc.errPart)
		}
	}
}

func TestParseFile(t *testing.T) {
	for in, ok := range map[string]bool{"ns1/a": true, "ns1/a/b": true, "ns1": false, "ns1/": false, "ns1/dir/": false} {
		if _, err := parseFile(in); (err == nil) != ok {
			t.Errorf("parseFile(%q) = %v; want ok=%v", in, err, ok)
		}
	}
}

func TestRemoteName(t *testing.T) {
	for _, tc := range []struct {
		dst, src, want string
	}{
		{"ns1/a.txt", "/tmp/b.txt", "ns1/a.txt"},
		{"ns1/dir/", "/tmp/b.txt", "ns1/dir/b.txt"},
		{"ns1", "b.txt", "ns1/b.txt"},
		{"ns1/", "x/b.txt", "ns1/b.txt"},
	} {
		dst, err := parseTarget(tc.dst)
		if err != nil {
			t.Fatal(err)
		}
		if got := remoteName(dst, tc.src).String(); got != tc.want {
			t.Errorf("remoteName(%q, %q) = %q, want %q", tc.dst, tc.src, got, tc.want)
		}
	}
}

func TestErrorLine(t *testing.T) {
	err := errors.E(errors.Op("api.Get"), errors.Path("ns1/a"), errors.NotExist, "no such key\nsecond line")
	if got, want := ErrorLine(err), "ns1/a: does not exist: no such key; second line"; got != want {
		t.Errorf("ErrorLine = %q, want %q", got, want)
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"photos/a.jpg", "ns1/", "ns1", "/x", "a//b", "abc/\xff", "abc/./d", "x.y-z/q/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTarget(s)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\x00\n") {
				t.Fatalf("error message carries raw control bytes: %q", err.Error())
			}
			return
		}
		// A valid target prints as an argument that parses to itself.
		again, err := parseTarget(got.String())
		if err != nil {
			t.Fatalf("parseTarget(%q) = %+v, but its String %q fails: %v", s, got, got.String(), err)
		}
		if again.ns != got.ns || again.path != got.path {
			t.Fatalf("round trip of %q: %+v then %+v", s, got, again)
		}
	})
}
