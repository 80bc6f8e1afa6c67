package meta

import "testing"

func TestListCursorAfter(t *testing.T) {
	for _, tc := range []struct {
		delimited     bool
		prefix, after string
		last          string // "" for no cursor
		ok            bool
	}{
		{false, "", "", "", true},
		{false, "b/", "a", "", true},  // before the prefix: from the start
		{false, "b/", "c", "", false}, // after every key of the prefix
		{false, "b/", "b/x/y", "b/x/y", true},
		{false, "", "a//b", "", true}, // not a path: ignored
		{true, "d/", "d/x", "d/x", true},
		{true, "d/", "d/x/", "d/x/", true}, // a common prefix: skipped
		{true, "d/", "d/x/y", "d/x", true}, // deeper: its directory still listed
		{true, "", "x/y/z", "x", true},
	} {
		c, ok := ListCursorAfter(tc.delimited, tc.prefix, tc.after)
		want := ""
		if tc.last != "" {
			mode := byte(modeRecursive)
			if tc.delimited {
				mode = modeDelimited
			}
			want = encodeCursor(mode, tc.last)
		}
		if c != want || ok != tc.ok {
			t.Errorf("ListCursorAfter(%v, %q, %q) = %q %v, want %q %v", tc.delimited, tc.prefix, tc.after, c, ok, want, tc.ok)
		}
	}
}
