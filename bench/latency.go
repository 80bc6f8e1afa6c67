package bench

import (
	"math"
	"slices"
	"time"
)

// Recorder keeps every latency one worker measured. Keeping all samples
// (8 bytes each: 4 MB for half a million operations) makes percentiles
// exact, where a histogram would round them. It is not safe for
// concurrent use: each worker has its own and Summarize merges them.
type Recorder struct {
	samples []time.Duration
}

// Add records one latency.
func (r *Recorder) Add(d time.Duration) { r.samples = append(r.samples, d) }

// Len is the number of latencies recorded.
func (r *Recorder) Len() int { return len(r.samples) }

// Summary is the distribution of a set of latencies.
type Summary struct {
	Count                    int
	Mean, P50, P90, P99, Max time.Duration
	P999                     time.Duration
}

// Summarize merges recorders and computes their distribution.
func Summarize(recs ...*Recorder) Summary {
	var all []time.Duration
	for _, r := range recs {
		all = append(all, r.samples...)
	}
	if len(all) == 0 {
		return Summary{}
	}
	slices.Sort(all)
	var sum float64
	for _, d := range all {
		sum += float64(d)
	}
	return Summary{
		Count: len(all),
		Mean:  time.Duration(sum / float64(len(all))),
		P50:   Percentile(all, 0.50),
		P90:   Percentile(all, 0.90),
		P99:   Percentile(all, 0.99),
		P999:  Percentile(all, 0.999),
		Max:   all[len(all)-1],
	}
}

// Percentile returns the q-quantile (0 < q <= 1) of sorted samples by the
// nearest-rank method: the smallest sample that at least q of all samples
// do not exceed. It is always a measured value, never an interpolation.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
