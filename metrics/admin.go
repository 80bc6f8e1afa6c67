package metrics

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves a role's admin endpoints:
//
//	/metrics        Prometheus text format
//	/debug/profile  JSON rows of every Ops given (for `cairn admin profile`)
//	/debug/pprof/   the Go profiler
//
// gatherer nil means the default registry.
func AdminHandler(gatherer prometheus.Gatherer, ops ...*Ops) http.Handler {
	if gatherer == nil {
		gatherer = prometheus.DefaultGatherer
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/profile", func(w http.ResponseWriter, r *http.Request) {
		var rows []OpStat
		for _, o := range ops {
			rows = append(rows, o.Snapshot()...)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rows)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
