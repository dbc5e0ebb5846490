package console

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// The period GET /latency looks back over: an hour unless asked, and never more than a
// day, which keeps the query to a day's range of the time index.
const (
	defaultLatencyWindow = time.Hour
	maxLatencyWindow     = 24 * time.Hour
)

// LatencyView is one model's candidate over the period: its requests, their error rate
// and latency percentiles. A percentile is the upper bound of the bucket holding it
// (metering.LatencyBoundsMs), so the true value is at most that; the first-byte ones
// are left out when no request sent one. For a stream the first byte is its first
// event: the time to first token.
type LatencyView struct {
	Model         string  `json:"model"`
	Candidate     string  `json:"candidate,omitempty"` // empty in a model's total
	Requests      int64   `json:"requests"`
	Errors        int64   `json:"errors"`
	ErrorRate     float64 `json:"error_rate"`
	TTFTP50Ms     *int64  `json:"ttft_p50_ms"`
	TTFTP95Ms     *int64  `json:"ttft_p95_ms"`
	DurationP50Ms *int64  `json:"duration_p50_ms"`
	DurationP95Ms *int64  `json:"duration_p95_ms"`
}

// latencyViews summarises the store's bucket counts.
func latencyViews(rows []metering.LatencyRow) []LatencyView {
	pct := func(counts []int64, percent int) *int64 {
		if v, ok := metering.Percentile(counts, percent); ok {
			return &v
		}
		return nil
	}
	out := make([]LatencyView, 0, len(rows))
	for _, r := range rows {
		v := LatencyView{Model: r.Model, Candidate: r.Candidate, Requests: r.Requests, Errors: r.Errors,
			TTFTP50Ms: pct(r.FirstByte, 50), TTFTP95Ms: pct(r.FirstByte, 95),
			DurationP50Ms: pct(r.Duration, 50), DurationP95Ms: pct(r.Duration, 95)}
		if r.Requests > 0 {
			// Four decimals: a rate, not a float's noise.
			v.ErrorRate = math.Round(float64(r.Errors)/float64(r.Requests)*1e4) / 1e4
		}
		out = append(out, v)
	}
	return out
}

// queryLatency serves GET /latency?window=1h: per model and candidate, the requests that
// ended in the window (up to 24h; default 1h) as the ledger holds them, all gateways
// sharing the store together.
func (a *API) queryLatency(w http.ResponseWriter, r *http.Request) {
	if a.Latency == nil {
		writeError(w, http.StatusServiceUnavailable, "this gateway's store keeps no usage")
		return
	}
	window := defaultLatencyWindow
	if s := r.URL.Query().Get("window"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Minute || d > maxLatencyWindow {
			writeError(w, http.StatusBadRequest, "window: a duration from 1m to 24h, like 1h or 15m")
			return
		}
		window = d
	}
	// One query at a time, and an answer reused for latencyFresh: the query reads every
	// row of the window (about 3 s at a million rows an hour on SQLite), and every open
	// console asks for it.
	c := &a.latency
	c.mu.Lock()
	defer c.mu.Unlock()
	now := a.now().UTC()
	if c.at.IsZero() || c.window != window || now.Sub(c.at) >= latencyFresh || now.Before(c.at) {
		rows, err := a.Latency.QueryLatency(r.Context(), now.Add(-window), now)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "the latency query failed; see the gateway's log")
			return
		}
		c.rows, c.window, c.at = rows, window, now
	}
	to, rows := c.at, c.rows
	from := to.Add(-window)
	writeJSON(w, http.StatusOK, LatencyAnswer{
		From: from.Format(time.RFC3339), To: to.Format(time.RFC3339), Window: window.String(),
		BoundsMs: metering.LatencyBoundsMs, Rows: latencyViews(rows), Models: latencyViews(perModel(rows)),
	})
}

// latencyFresh is how long a latency answer is served again: the table is a glance at an
// hour, and a quarter of a minute is within its bucket's precision.
const latencyFresh = 15 * time.Second

// latencyCache is the last latency answer, for one window.
type latencyCache struct {
	mu     sync.Mutex
	window time.Duration
	at     time.Time
	rows   []metering.LatencyRow
}

// perModel sums each model's candidates into one row (Candidate empty): the buckets
// add up, so its percentiles are those of all the model's requests, not an average of
// its candidates'.
func perModel(rows []metering.LatencyRow) []metering.LatencyRow {
	var out []metering.LatencyRow
	for _, r := range rows { // ordered by model, so a model's rows are together
		if len(out) == 0 || out[len(out)-1].Model != r.Model {
			out = append(out, metering.LatencyRow{Model: r.Model,
				FirstByte: make([]int64, len(r.FirstByte)), Duration: make([]int64, len(r.Duration))})
		}
		m := &out[len(out)-1]
		m.Requests += r.Requests
		m.Errors += r.Errors
		for i, c := range r.FirstByte {
			m.FirstByte[i] += c
		}
		for i, c := range r.Duration {
			m.Duration[i] += c
		}
	}
	return out
}
