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
// gatherer nil means the default registry; no ops means every Ops in the
// process (metrics.All at request time).
func AdminHandler(gatherer prometheus.Gatherer, ops ...*Ops) http.Handler {
	if gatherer == nil {
		gatherer = prometheus.DefaultGatherer
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/profile", func(w http.ResponseWriter, r *http.Request) {
		var rows []OpStat
		list := ops
		if len(list) == 0 {
			list = All()
		}
		for _, o := range list {
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

// RoleAdmin is the handler of a role's admin listener. /metrics is always
// served; the profiling endpoints (/debug/pprof/, /debug/profile) only
// when debug is set (the roles' --pprof), since heap dumps and command
// lines are not for whoever reaches the port. Without it they answer 403
// saying how to turn them on.
func RoleAdmin(debug bool) http.Handler {
	if debug {
		return AdminHandler(nil)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.DefaultGatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "profiling is off: start the server with --pprof", http.StatusForbidden)
	})
	return mux
}
