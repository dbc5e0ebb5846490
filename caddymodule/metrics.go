package caddymodule

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

// gatewayMetrics are created once per process and registered with every configuration's
// registry, so counts run on across reloads.
type gatewayMetrics struct {
	requests  *prometheus.CounterVec
	attempts  *prometheus.HistogramVec
	failovers *prometheus.CounterVec
	retries   *prometheus.CounterVec
	retryWait *prometheus.HistogramVec
	ttfb      *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	duration  *prometheus.HistogramVec
	probes    *prometheus.CounterVec
}

// loadMetrics gives the process-wide collectors, made on first use.
var loadMetrics = sync.OnceValue(func() *gatewayMetrics {
	const ns = "switchyard"
	return &gatewayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "requests_total",
			Help: "Requests that reached candidate selection, by service model, protocol, the candidate that served (none when none did) and outcome.",
		}, []string{"model", "protocol", "candidate", "outcome"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "attempts_per_request",
			Help:    "Candidates tried per request.",
			Buckets: []float64{0, 1, 2, 3, 4, 6, 8},
		}, []string{"model", "protocol"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "failovers_total",
			Help: "Attempts that failed before the first byte and moved the request on, by candidate and reason.",
		}, []string{"model", "candidate", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "retries_total",
			Help: "Attempts that retried a candidate within one request, by candidate.",
		}, []string{"model", "candidate"}),
		retryWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "retry_wait_seconds",
			Help:    "Back-off waited before each retry, the upstream's Retry-After included.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8},
		}, []string{"model"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "time_to_first_byte_seconds",
			Help:    "Time from the request reaching the relay to its first byte sent to the client, by serving candidate.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"model", "candidate"}),
		// A stream's first byte sent is its first event, so for streams time to first
		// byte is time to first token; a separate metric holds only those, because a
		// non-streamed answer's first byte comes with its last token and would drag the
		// percentiles of the two kinds together.
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "time_to_first_token_seconds",
			Help:    "Streamed answers only: time from the request reaching the relay to its first event sent to the client, by serving candidate.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"model", "candidate"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds",
			Help:    "Time from the request reaching the relay to the end of its answer, by serving candidate.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
		}, []string{"model", "candidate"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "probes_total",
			Help: "Background probes of candidates whose circuit is open, by result: pass (it closed), fail, not_offered (404/405: left to live requests).",
		}, []string{"model", "candidate", "result"}),
	}
})

// register adds the collectors to a configuration's registry (the app's Provision does,
// once per configuration).
func (m *gatewayMetrics) register(reg prometheus.Registerer) error {
	return registerCollectors(reg, m.requests, m.attempts, m.failovers, m.retries, m.retryWait, m.ttfb, m.ttft, m.duration, m.probes)
}

// registerCollectors adds process-wide collectors to a configuration's registry. Each
// configuration has a registry of its own, so the counters carry on across reloads
// while each one is registered once.
func registerCollectors(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observe records one request's outcome.
func (m *gatewayMetrics) observe(model string, family protocols.Family, out *relay.Outcome) {
	proto := family.Token()
	served := "none"
	if out.Served != nil {
		served = out.Served.Candidate.Name
		if out.TimeToFirstByte > 0 { // none for an answer metered after its client left
			m.ttfb.WithLabelValues(model, served).Observe(out.TimeToFirstByte.Seconds())
			if out.Stream {
				m.ttft.WithLabelValues(model, served).Observe(out.TimeToFirstByte.Seconds())
			}
		}
		m.duration.WithLabelValues(model, served).Observe(out.Latency.Seconds())
	}
	m.requests.WithLabelValues(model, proto, served, out.Result()).Inc()
	m.attempts.WithLabelValues(model, proto).Observe(float64(len(out.Attempts)))
	for _, a := range out.Attempts {
		if a.Retry > 0 {
			m.retries.WithLabelValues(model, a.Candidate).Inc()
			m.retryWait.WithLabelValues(model).Observe(a.Wait.Seconds())
		}
		if a.Reason != routing.ReasonNone && a.Reason != routing.ReasonClientGone {
			m.failovers.WithLabelValues(model, a.Candidate, string(a.Reason)).Inc()
		}
	}
}

// registerAppMetrics adds the collectors that read this app's live state when scraped
// (circuits, body memory) to its configuration's registry. Caddy gives each configuration
// a registry of its own, so after a reload the endpoint serves the new app's collectors
// and the old app's leave with its registry; a second registration in one registry is
// an error, not something to skip.
func (a *App) registerAppMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{circuitCollector{a}, bodyMemoryGauge(a)} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// bodyMemoryGauge reports the request-body bytes app holds against its max_body_memory.
func bodyMemoryGauge(app *App) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "body_memory_bytes",
		Help: "Request-body bytes held at once, counted against max_body_memory.",
	}, func() float64 { return float64(app.bodyMemory.Held()) })
}

// circuitCollector reports each candidate's circuit state when scraped, read from the
// app's live health; it costs the request path nothing.
type circuitCollector struct{ app *App }

var circuitDesc = prometheus.NewDesc("switchyard_circuit_state",
	"Circuit state per candidate: 0 closed, 1 half-open, 2 open.", []string{"model", "candidate"}, nil)

func (circuitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- circuitDesc }

func (cc circuitCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, m := range cc.app.catalog.Models() {
		for _, c := range m.Candidates {
			state := cc.app.upstreams[c].Health.State(now)
			ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, float64(state), m.ID, c.Name)
		}
	}
}
