// Package byterange parses HTTP Range headers (RFC 9110 §14) against a
// representation of known size. Only single ranges are served: a request
// for several is answered with the whole body, which RFC 9110 allows and
// which every client handles.
package byterange

import (
	"fmt"
	"strconv"
	"strings"

	"cairn/errors"
)

// Range is a satisfiable byte range [Start, Start+Length).
type Range struct {
	Start, Length int64
}

// ContentRange is the Content-Range header value for r within size.
func (r Range) ContentRange(size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", r.Start, r.Start+r.Length-1, size)
}

// Parse interprets header against a body of size bytes.
//
//   - ok=false, err=nil: serve the whole body (no header, a multi-range
//     request, a unit other than bytes, or a syntactically invalid header,
//     which RFC 9110 says to ignore).
//   - err of kind errors.Range: no range is satisfiable (416).
//   - otherwise r is the range to serve (206).
func Parse(header string, size int64) (r Range, ok bool, err error) {
	if header == "" {
		return Range{}, false, nil
	}
	spec, found := strings.CutPrefix(header, "bytes=")
	if !found {
		return Range{}, false, nil
	}
	spec = strings.TrimSpace(spec)
	if strings.Contains(spec, ",") {
		return Range{}, false, nil
	}
	first, last, found := strings.Cut(spec, "-")
	if !found {
		return Range{}, false, nil
	}
	first, last = strings.TrimSpace(first), strings.TrimSpace(last)
	unsat := errors.E(errors.Op("byterange.Parse"), errors.Range,
		fmt.Sprintf("range %q not satisfiable for %d bytes", header, size))
	if first == "" {
		// Suffix: the last n bytes.
		n, perr := parseNum(last)
		if perr != nil {
			return Range{}, false, nil
		}
		if n == 0 || size == 0 {
			return Range{}, false, unsat
		}
		n = min(n, size)
		return Range{Start: size - n, Length: n}, true, nil
	}
	start, perr := parseNum(first)
	if perr != nil {
		return Range{}, false, nil
	}
	end := size - 1
	if last != "" {
		e, perr := parseNum(last)
		if perr != nil || e < start {
			return Range{}, false, nil
		}
		end = min(e, size-1)
	}
	if start >= size {
		return Range{}, false, unsat
	}
	return Range{Start: start, Length: end - start + 1}, true, nil
}

// parseNum accepts only ASCII digits: strconv alone would take "+5".
func parseNum(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
