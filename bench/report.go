package bench

import (
	"fmt"
	"io"
	"time"
)

// Table prints results as fixed-width rows, each as soon as it is added,
// so a long run shows progress; the header comes with the first row.
type Table struct {
	w      io.Writer
	header bool
}

// NewTable returns a Table writing to w.
func NewTable(w io.Writer) *Table { return &Table{w: w} }

const rowFormat = "%-16s %5s %9s %8s %8s %8s %8s %8s %9s %7s\n"

// Add prints one result, and its first error if it had any.
func (t *Table) Add(r Result) error {
	if !t.header {
		t.header = true
		if _, err := fmt.Fprintf(t.w, rowFormat, "BENCH", "CONC", "OPS/S", "MB/S", "P50", "P90", "P99", "MAX", "OPS", "ERRORS"); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(t.w, rowFormat, r.Name, fmt.Sprint(r.Concurrency), fmt.Sprintf("%.0f", r.OpsPerSec),
		fmt.Sprintf("%.1f", r.MBPerSec), FormatDuration(r.P50), FormatDuration(r.P90), FormatDuration(r.P99),
		FormatDuration(r.Max), fmt.Sprint(r.Ops), fmt.Sprint(r.Errors))
	if err == nil && r.FirstError != "" {
		_, err = fmt.Fprintf(t.w, "  first error: %s\n", r.FirstError)
	}
	return err
}

// FormatDuration shows a latency to three significant digits in the unit
// that suits it: 850ns, 42.1µs, 6.40ms, 1.20s.
func FormatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case d < time.Millisecond:
		return threeDigits(float64(d)/1e3) + "µs"
	case d < time.Second:
		return threeDigits(float64(d)/1e6) + "ms"
	}
	return threeDigits(d.Seconds()) + "s"
}

func threeDigits(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	}
	return fmt.Sprintf("%.2f", f)
}
