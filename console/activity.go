package console

import (
	"net/http"
	"sort"
	"sync"
	"time"

	"cairn/metrics"
)

// window is how much history the activity charts show.
const window = 15 * time.Minute

// activity samples the roles' counters (the same ones /metrics exports)
// every Config.Sample and keeps 15 minutes of per-interval rates and
// latencies in a ring.
type activity struct {
	ops   []*metrics.Ops
	every time.Duration

	mu      sync.Mutex
	last    []metrics.Totals
	lastAt  time.Time
	samples []sample // oldest first, at most window/every
}

type sample struct {
	T     string                `json:"t"`
	Roles map[string]roleSample `json:"roles"`
}

type roleSample struct {
	RPS      float64            `json:"rps"`       // requests per second
	EPS      float64            `json:"eps"`       // errors per second
	InBPS    float64            `json:"in_bps"`    // request bytes per second
	OutBPS   float64            `json:"out_bps"`   // response bytes per second
	P50ms    float64            `json:"p50_ms"`    // of the calls that finished in the interval
	P99ms    float64            `json:"p99_ms"`    //
	ErrorsOp map[string]float64 `json:"errors_op"` // errors per second by operation
}

func newActivity(ops []*metrics.Ops, every time.Duration) *activity {
	a := &activity{ops: ops, every: every}
	a.sample(time.Now()) // the baseline
	return a
}

func (a *activity) sample(now time.Time) {
	cur := make([]metrics.Totals, len(a.ops))
	for i, o := range a.ops {
		cur[i] = o.Totals()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last != nil {
		secs := now.Sub(a.lastAt).Seconds()
		s := sample{T: now.UTC().Format(time.RFC3339Nano), Roles: map[string]roleSample{}}
		for i, o := range a.ops {
			d := cur[i].Sub(a.last[i])
			rs := roleSample{RPS: float64(d.Calls) / secs, EPS: float64(d.Errors) / secs,
				InBPS: float64(d.BytesIn) / secs, OutBPS: float64(d.BytesOut) / secs,
				P50ms: ms(d.Quantile(0.5)), P99ms: ms(d.Quantile(0.99)), ErrorsOp: map[string]float64{}}
			for op, t := range d.PerOp {
				if t.Errors > 0 {
					rs.ErrorsOp[op] = float64(t.Errors) / secs
				}
			}
			s.Roles[roleName(o.Role())] = rs
		}
		a.samples = append(a.samples, s)
		if n := int(window / a.every); len(a.samples) > n {
			a.samples = append(a.samples[:0], a.samples[len(a.samples)-n:]...)
		}
	}
	a.last, a.lastAt = cur, now
}

// roleName is what the page calls an API.
func roleName(role string) string {
	if role == "gateway" {
		return "native"
	}
	return role
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// activityJSON: GET /api/activity, the samples of the last 15 minutes.
func (c *Console) activityJSON(w http.ResponseWriter, r *http.Request, s *session) {
	a := c.activity
	a.mu.Lock()
	out := struct {
		Every   float64  `json:"every_s"`
		APIs    []string `json:"apis"`
		Samples []sample `json:"samples"`
	}{Every: a.every.Seconds(), APIs: []string{}, Samples: append([]sample{}, a.samples...)}
	a.mu.Unlock()
	for _, o := range a.ops {
		out.APIs = append(out.APIs, roleName(o.Role()))
	}
	sort.Strings(out.APIs)
	writeJSON(w, http.StatusOK, out)
}
