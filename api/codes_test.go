package api

import (
	"testing"

	"cairn/errors"
)

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
		want   errors.Kind
	}{
		{"NoSuchKey", 404, errors.NotExist},
		{"NoSuchNamespace", 404, errors.NotExist},
		{"AccessDenied", 403, errors.Permission},
		{"NotEmpty", 409, errors.NotEmpty},
		{"IsDirectory", 409, errors.IsDir},
		{"InvalidRange", 416, errors.Range},
		{"Unavailable", 503, errors.Unavailable},
		{"", 404, errors.NotExist},    // no body: by status
		{"", 502, errors.Unavailable}, // a proxy in front
		{"SomethingNew", 418, errors.Other},
		{"", 304, errors.Precondition},
	} {
		if got := kindOf(tc.code, tc.status); got != tc.want {
			t.Errorf("kindOf(%q, %d) = %v, want %v", tc.code, tc.status, got, tc.want)
		}
	}
	seen := map[string]bool{}
	for _, c := range codes {
		if seen[c.code] {
			t.Errorf("code %s twice in the table", c.code)
		}
		seen[c.code] = true
	}
}
