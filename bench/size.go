package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"cairn/errors"
)

// units are the size suffixes ParseSize knows. Binary (KiB) and bare (K)
// suffixes are powers of 1024, as in dd and nginx; KB is 1000, as in
// marketing and in S3's documentation.
var units = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50}, {"eib", 1 << 60},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15}, {"eb", 1e18},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"p", 1 << 50}, {"e", 1 << 60},
	{"b", 1}, {"", 1},
}

// ParseSize parses a byte count: "4096", "155KiB", "1GiB", "1.5MiB", "10MB"
// (suffixes are case-insensitive; a space before one is allowed).
func ParseSize(s string) (int64, error) {
	const op = errors.Op("bench.ParseSize")
	t := strings.ToLower(strings.TrimSpace(s))
	for _, u := range units {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		if num == "" || strings.ContainsAny(num, "+-eEnNxX_") {
			break // no sign, exponent, hex, NaN, Inf or underscores
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil {
			if n > math.MaxInt64/u.mult {
				return 0, errors.Errorf(op, errors.Invalid, "size %q is too large", s)
			}
			return n * u.mult, nil
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			break
		}
		v := f * float64(u.mult)
		if v >= math.MaxInt64 {
			return 0, errors.Errorf(op, errors.Invalid, "size %q is too large", s)
		}
		return int64(v), nil
	}
	return 0, errors.Errorf(op, errors.Invalid, "bad size %q: want a number of bytes like 4096, 155KiB or 1GiB", s)
}

// FormatSize formats a byte count for people: exact when it is a whole
// number of a binary unit ("155KiB"), else to three significant digits
// ("1.50MiB").
func FormatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return strconv.FormatInt(n, 10) + "B"
	}
	f := float64(n)
	i := -1
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	suffix := string(units[i]) + "iB"
	if f == math.Trunc(f) {
		return strconv.FormatFloat(f, 'f', 0, 64) + suffix
	}
	switch {
	case math.Abs(f) >= 100:
		return fmt.Sprintf("%.0f%s", f, suffix)
	case math.Abs(f) >= 10:
		return fmt.Sprintf("%.1f%s", f, suffix)
	}
	return fmt.Sprintf("%.2f%s", f, suffix)
}
