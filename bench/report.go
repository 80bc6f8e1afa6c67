package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// PrintResults writes results as a table, one line per run.
func PrintResults(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BENCH\tCONC\tOPS/S\tMB/S\tP50\tP90\tP99\tMAX\tOPS\tERRORS\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1f\t%s\t%s\t%s\t%s\t%d\t%d\t\n", r.Name, r.Concurrency,
			r.OpsPerSec, r.MBPerSec, FormatDuration(r.P50), FormatDuration(r.P90),
			FormatDuration(r.P99), FormatDuration(r.Max), r.Ops, r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s c=%d: first error: %s\n", r.Name, r.Concurrency, r.FirstError)
		}
	}
	return nil
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
