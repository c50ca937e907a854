// Package metrics is what modelserve tells Prometheus: jobs started and
// ended, how long each step took, what the mirror fetched and how often it
// failed, how many models the catalog holds, checks for new weights and
// the updates they noticed, eval runs and their cases, and the fleet's
// replicas and nodes (fleet.go).
//
// One registry per server rather than the global default, so tests can run
// servers side by side and read their own figures.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the collectors. Its methods are safe for concurrent use.
type Metrics struct {
	reg             *prometheus.Registry
	jobsStarted     prometheus.Counter
	jobsEnded       *prometheus.CounterVec
	stepSeconds     *prometheus.HistogramVec
	mirrorBytes     prometheus.Counter
	mirrorFailed    prometheus.Counter
	mirrorRefetched prometheus.Counter
	mirrorConns     prometheus.Gauge
	// updateChecks and updatesNoticed are the watcher's (package updates).
	updateChecks   *prometheus.CounterVec
	updatesNoticed prometheus.Counter
	// evalRuns and evalCases are the eval runner's (package evals).
	evalRuns  *prometheus.CounterVec
	evalCases *prometheus.CounterVec
}

// New registers the collectors. catalogSize, when not nil, is read at each
// scrape, so the figure is never stale.
func New(catalogSize func(context.Context) (int, error)) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		jobsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_jobs_started_total", Help: "Serve jobs started.",
		}),
		jobsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_jobs_ended_total", Help: "Serve jobs ended, by final state.",
		}, []string{"state"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "modelserve_step_duration_seconds", Help: "How long each step of a job took.",
			// From a cached registry read to a multi-hour download.
			Buckets: []float64{.01, .05, .25, 1, 5, 30, 120, 600, 1800, 7200},
		}, []string{"step"}),
		mirrorBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_mirror_fetched_bytes_total", Help: "Bytes the mirror fetched from registries.",
		}),
		mirrorFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_mirror_failures_total", Help: "Files the mirror failed to fetch (after its retries).",
		}),
		mirrorRefetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_mirror_parts_refetched_total", Help: "Parts of files the mirror fetched again over another connection, the first one having stalled or fallen far behind.",
		}),
		mirrorConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "modelserve_mirror_connections", Help: "Connections the mirror is fetching over now.",
		}),
		updateChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_update_checks_total", Help: "Checks of a served model's branch for new weights, by result (up_to_date, update_available, failed).",
		}, []string{"result"}),
		updatesNoticed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "modelserve_updates_noticed_total", Help: "Updates noticed: a served model's branch moved to new weights (each move counted once).",
		}),
		evalRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_eval_runs_total", Help: "Eval runs ended, by result: done (every case judged) or failed (the run could not finish).",
		}, []string{"result"}),
		evalCases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "modelserve_eval_cases_total", Help: "Eval cases judged, by result (pass, fail).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.jobsStarted, m.jobsEnded, m.stepSeconds, m.mirrorBytes, m.mirrorFailed, m.mirrorRefetched, m.mirrorConns, m.updateChecks, m.updatesNoticed,
		m.evalRuns, m.evalCases, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if catalogSize != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "modelserve_catalog_models", Help: "Models in the catalog.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := catalogSize(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}))
	}
	return m
}

// JobStarted counts a job begun (a retry is a new job).
func (m *Metrics) JobStarted() { m.jobsStarted.Inc() }

// JobEnded counts a job that reached a final state.
func (m *Metrics) JobEnded(state string) { m.jobsEnded.WithLabelValues(state).Inc() }

// StepDone records how long a step took. The step's label is its name
// with "_" for spaces (smoke_test): label values with spaces need quoting
// in every PromQL selector and read as two words in a legend.
func (m *Metrics) StepDone(step string, d time.Duration) {
	m.stepSeconds.WithLabelValues(stepLabel(step)).Observe(d.Seconds())
}

// stepLabel is a step's name as a label value: lower case, "_" between
// words.
func stepLabel(step string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(step)), " ", "_")
}

// MirrorFetched counts bytes that arrived from a registry.
func (m *Metrics) MirrorFetched(n int64) { m.mirrorBytes.Add(float64(n)) }

// MirrorFailed counts a file the mirror gave up on.
func (m *Metrics) MirrorFailed() { m.mirrorFailed.Inc() }

// MirrorPartRefetched counts a part of a file fetched again.
func (m *Metrics) MirrorPartRefetched() { m.mirrorRefetched.Inc() }

// MirrorConnections moves the count of connections fetching now.
func (m *Metrics) MirrorConnections(delta int) { m.mirrorConns.Add(float64(delta)) }

// UpdateChecked counts a check for new weights by its result.
func (m *Metrics) UpdateChecked(result string) { m.updateChecks.WithLabelValues(result).Inc() }

// UpdateNoticed counts an update recorded for the first time.
func (m *Metrics) UpdateNoticed() { m.updatesNoticed.Inc() }

// EvalRun counts an eval run that ended, by its state (done, failed).
func (m *Metrics) EvalRun(state string) { m.evalRuns.WithLabelValues(state).Inc() }

// EvalCase counts an eval case judged.
func (m *Metrics) EvalCase(pass bool) {
	result := "fail"
	if pass {
		result = "pass"
	}
	m.evalCases.WithLabelValues(result).Inc()
}

// Registerer is the registry others add their figures to (the gateway's),
// so that /metrics serves them all.
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }

// Handler serves the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
