package caddymodule

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/relay"
	"github.com/switchyard-gw/switchyard/routing"
)

// histogramOf reads one series of a histogram: its count and sum.
func histogramOf(t *testing.T, h *prometheus.HistogramVec, labels ...string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	require.NoError(t, h.WithLabelValues(labels...).(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// A streamed answer counts in time to first token and duration; a non-streamed one only
// in duration, so the first-token percentiles are streams' alone.
func TestLatencyHistogramsObserveServedRequests(t *testing.T) {
	m := loadMetrics()
	const model = "histogram-model"
	up := &relay.Upstream{Candidate: &routing.Candidate{Name: "histogram-cand"}, ModelID: model}
	stream := &relay.Outcome{Served: up, Status: 200, Stream: true, TimeToFirstByte: 300 * time.Millisecond, Latency: 2 * time.Second}
	plain := &relay.Outcome{Served: up, Status: 200, TimeToFirstByte: 900 * time.Millisecond, Latency: 900 * time.Millisecond}
	m.observe(model, protocols.FamilyA, stream)
	m.observe(model, protocols.FamilyA, plain)

	n, sum := histogramOf(t, m.ttft, model, "histogram-cand")
	assert.Equal(t, uint64(1), n, "only the stream has a first token")
	assert.InDelta(t, 0.3, sum, 1e-9)
	n, sum = histogramOf(t, m.duration, model, "histogram-cand")
	assert.Equal(t, uint64(2), n)
	assert.InDelta(t, 2.9, sum, 1e-9)
	n, _ = histogramOf(t, m.ttfb, model, "histogram-cand")
	assert.Equal(t, uint64(2), n, "first byte stays for both")
}
