package pathname

import (
	"strings"
	"testing"
	"unicode/utf8"

	"cairn/errors"
)

func TestClean(t *testing.T) {
	long := strings.Repeat("a", 256)
	cases := []struct {
		in   string
		want string
		dir  bool
		kind errors.Kind // Other means no error
	}{
		{"", "", true, errors.Other},
		{"/", "", true, errors.Other},
		{"a", "a", false, errors.Other},
		{"/a/b/c.txt", "a/b/c.txt", false, errors.Other},
		{"a/b/", "a/b", true, errors.Other},
		{"héllo/wörld", "héllo/wörld", false, errors.Other},
		{"a//b", "", false, errors.Invalid},
		{"a/../b", "", false, errors.Invalid},
		{"..", "", false, errors.Invalid},
		{"./a", "", false, errors.Invalid},
		{"a/.", "", false, errors.Invalid},
		{"a\x00b", "", false, errors.Invalid},
		{"a\xffb", "", false, errors.Invalid},
		{long, "", false, errors.NameTooLong},
		{strings.Repeat("a/", 2049), "", false, errors.NameTooLong},
		{strings.Repeat("a", 255), strings.Repeat("a", 255), false, errors.Other},
		{"..a/b..", "..a/b..", false, errors.Other},
	}
	for _, c := range cases {
		got, dir, err := Clean(c.in)
		if c.kind != errors.Other {
			if !errors.Is(c.kind, err) {
				t.Errorf("Clean(%q): err %v, want kind %v", c.in, err, c.kind)
			}
			continue
		}
		if err != nil || got != c.want || dir != c.dir {
			t.Errorf("Clean(%q) = %q, %v, %v; want %q, %v", c.in, got, dir, err, c.want, c.dir)
		}
	}
}

func TestValidNamespace(t *testing.T) {
	good := []string{"abc", "my-bucket", "logs.2026", "a1b", strings.Repeat("x", 63)}
	bad := []string{"", "ab", "ABC", "-ab", "ab-", "a_b", "a..b", "a/b", strings.Repeat("x", 64), ".ab"}
	for _, ns := range good {
		if err := ValidNamespace(ns); err != nil {
			t.Errorf("%q: %v", ns, err)
		}
	}
	for _, ns := range bad {
		if err := ValidNamespace(ns); !errors.Is(errors.Invalid, err) {
			t.Errorf("%q: got %v, want Invalid", ns, err)
		}
	}
}

func TestSplit(t *testing.T) {
	ns, p, dir, err := Split("/photos/2026/cat.jpg")
	if err != nil || ns != "photos" || p != "2026/cat.jpg" || dir {
		t.Fatalf("got %q %q %v %v", ns, p, dir, err)
	}
	if _, _, _, err := Split("photos/../etc/passwd"); !errors.Is(errors.Invalid, err) {
		t.Fatalf("traversal accepted: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b", "a\x00", "\xff", strings.Repeat("n", 256)} {
		if ValidName(n) == nil {
			t.Errorf("ValidName(%q) accepted", n)
		}
	}
	if ValidName("ok.txt") != nil {
		t.Error("ok.txt refused")
	}
}

// FuzzSplit checks that Split never panics and that what it accepts is
// the namespace and the cleaned path of exactly the input: "ns//a" and
// "ns/a/../b" are refused, not stored under another name.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"ns/a", "ns//dbl", "/ns/a/", "ns", "ns/a//b", "ns/./a", "NS/a", "ns/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, p, dir, err := Split(s)
		if err != nil {
			if errors.KindOf(err) == errors.Other {
				t.Fatalf("error without kind: %v", err)
			}
			return
		}
		in := strings.TrimPrefix(s, "/")
		if strings.Contains(in, "//") || in != ns && !strings.HasPrefix(in, ns+"/") ||
			!strings.HasSuffix(strings.TrimSuffix(in, "/"), p) || len(in) > len(ns)+1+len(p)+1 {
			t.Fatalf("Split(%q) = %q, %q, %v: names another path", s, ns, p, dir)
		}
	})
}

// FuzzClean checks that Clean never panics, that what it accepts is
// canonical (cleaning again changes nothing) and obeys every rule.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "a/b", "/a/b/", "a//b", "../x", "a\x00", "\xff\xfe", "é/ü", strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, _, err := Clean(s)
		if err != nil {
			if errors.KindOf(err) == errors.Other {
				t.Fatalf("error without kind: %v", err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("error message is not UTF-8: %q", err.Error())
			}
			return
		}
		if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 || len(p) > MaxPath {
			t.Fatalf("accepted bad path %q", p)
		}
		for _, c := range strings.Split(p, "/") {
			if p != "" && (c == "" || c == "." || c == ".." || len(c) > MaxComponent) {
				t.Fatalf("accepted bad component %q in %q", c, p)
			}
		}
		again, _, err := Clean(p)
		if err != nil || again != p {
			t.Fatalf("not canonical: %q -> %q (%v)", p, again, err)
		}
	})
}
