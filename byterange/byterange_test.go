package byterange

import (
	"testing"

	"cairn/errors"
)

func TestParse(t *testing.T) {
	cases := []struct {
		h      string
		size   int64
		start  int64
		length int64
		ok     bool
		unsat  bool
	}{
		{"", 100, 0, 0, false, false},
		{"bytes=0-9", 100, 0, 10, true, false},
		{"bytes=10-", 100, 10, 90, true, false},
		{"bytes=-10", 100, 90, 10, true, false},
		{"bytes=-200", 100, 0, 100, true, false},
		{"bytes=90-200", 100, 90, 10, true, false},
		{"bytes=99-99", 100, 99, 1, true, false},
		{"bytes=100-", 100, 0, 0, false, true},
		{"bytes=100-200", 100, 0, 0, false, true},
		{"bytes=-0", 100, 0, 0, false, true},
		{"bytes=0-", 0, 0, 0, false, true},
		{"bytes=-5", 0, 0, 0, false, true},
		{"bytes=5-1", 100, 0, 0, false, false},
		{"bytes=a-b", 100, 0, 0, false, false},
		{"bytes=+1-2", 100, 0, 0, false, false},
		{"bytes=0-1,5-6", 100, 0, 0, false, false},
		{"items=0-1", 100, 0, 0, false, false},
		{"bytes=99999999999999999999-", 100, 0, 0, false, false},
		{"bytes= 3 - 4", 100, 3, 2, true, false},
	}
	for _, c := range cases {
		r, ok, err := Parse(c.h, c.size)
		if c.unsat {
			if !errors.Is(errors.Range, err) {
				t.Errorf("%q/%d: err %v, want Range", c.h, c.size, err)
			}
			continue
		}
		if err != nil || ok != c.ok || (ok && (r.Start != c.start || r.Length != c.length)) {
			t.Errorf("%q/%d = %+v %v %v, want %d+%d %v", c.h, c.size, r, ok, err, c.start, c.length, c.ok)
		}
	}
	if got := (Range{Start: 10, Length: 5}).ContentRange(100); got != "bytes 10-14/100" {
		t.Errorf("ContentRange = %q", got)
	}
}

// FuzzParse: never panics; an accepted range always lies inside the body.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=-5", "bytes=3-", "bytes=,", "bytes=9-1", "bytes=--1", "bytes=0-0"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		if size < 0 {
			return
		}
		r, ok, err := Parse(h, size)
		if err != nil && !errors.Is(errors.Range, err) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if ok && (r.Start < 0 || r.Length <= 0 || r.Start+r.Length > size) {
			t.Fatalf("%q/%d: bad range %+v", h, size, r)
		}
	})
}
