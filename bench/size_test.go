package bench

import (
	"math"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true},
		{"0", 0, true},
		{"155KiB", 155 << 10, true},
		{"155kib", 155 << 10, true},
		{"4KiB", 4096, true},
		{"1GiB", 1 << 30, true},
		{"1 GiB", 1 << 30, true},
		{"1.5MiB", 3 << 19, true},
		{"10MB", 10e6, true},
		{"2k", 2048, true},
		{"512B", 512, true},
		{"8EiB", 0, false},
		{"7EiB", 7 << 60, true},
		{"1e", 1 << 60, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"9223372036854775807K", 0, false},
		{"1e3", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"0x10", 0, false},
		{"NaN", 0, false},
		{"inf", 0, false},
		{"KiB", 0, false},
		{"", 0, false},
		{"12 apples", 0, false},
		{"1_000", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1023: "1023B", 1024: "1KiB", 155 << 10: "155KiB", 1 << 30: "1GiB",
		3 << 19: "1.50MiB", 10*1024 + 512: "10.5KiB", 1000 << 20: "1000MiB",
	} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"155KiB", "1GiB", "1.5 MB", "-3", "9223372036854775807", "1e400", "0.0000001k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, n)
		}
		if n > 1<<62 {
			return // rounding up to a whole unit may not fit in an int64
		}
		// A formatted size parses back: exactly when it has no fraction,
		// within 1% otherwise (three significant digits, truncated on parsing).
		f := FormatSize(n)
		m, err := ParseSize(f)
		if err != nil {
			t.Fatalf("ParseSize(FormatSize(%d) = %q): %v", n, f, err)
		}
		exact := !strings.Contains(f, ".") && (n < 1024 || m == n)
		if d := math.Abs(float64(m - n)); !exact && d > float64(n)/100 {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d", n, f, m)
		}
	})
}
