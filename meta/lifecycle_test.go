package meta

import (
	"testing"
	"time"
)

// TestDueAfter: S3 ages objects in whole days, rounded up to the next
// midnight UTC after creation plus the days.
func TestDueAfter(t *testing.T) {
	day := func(s string) time.Time {
		d, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		made string
		days int32
		want string
	}{
		{"2026-01-01T00:00:00Z", 1, "2026-01-02T00:00:00Z"},
		{"2026-01-01T00:00:01Z", 1, "2026-01-03T00:00:00Z"},
		{"2026-01-01T23:59:59Z", 30, "2026-02-01T00:00:00Z"},
		{"2026-01-01T10:00:00+05:00", 1, "2026-01-03T00:00:00Z"},
	} {
		if got := dueAfter(day(tc.made).UnixNano(), tc.days); !got.Equal(day(tc.want)) {
			t.Errorf("made %s + %d days: due %s, want %s", tc.made, tc.days, got, tc.want)
		}
	}
}
