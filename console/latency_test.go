package console_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/store"
)

// GET /latency answers the window's requests per model and candidate with their error
// rate and percentiles; a record older than the window is left out.
func TestLatencyAPI(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite", filepath.Join(t.TempDir(), "usage.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var rs []metering.Record
	for i := range 20 {
		r := metering.Record{RequestID: fmt.Sprintf("r%02d", i), Model: "chat", Candidate: "primary", Protocol: "openai", Operation: "chat",
			Status: 200, TTFBMs: 40, LatencyMs: 900, Attempts: 1, Time: now.Add(-time.Duration(i+1) * time.Minute)}
		if i >= 18 {
			r.TTFBMs, r.LatencyMs = 2_500, 9_000 // the slowest tenth
		}
		if i < 4 {
			r.Status = 502
		}
		rs = append(rs, r)
	}
	old := rs[0]
	old.RequestID, old.Status, old.Time = "old", 500, now.Add(-61*time.Minute)
	rs = append(rs, old)
	for i := range 20 { // a backup that served as many, all slow
		rs = append(rs, metering.Record{RequestID: fmt.Sprintf("b%02d", i), Model: "chat", Candidate: "backup", Protocol: "openai", Operation: "chat",
			Status: 200, TTFBMs: 4_000, LatencyMs: 9_000, Attempts: 1, Time: now.Add(-time.Duration(i+1) * time.Minute)})
	}
	require.NoError(t, st.WriteUsage(ctx, "gw", 1, rs))
	h := console.New(&console.API{Latency: st, Now: func() time.Time { return now }})

	w := do(h, "GET", "/api/latency", "")
	require.Equal(t, 200, w.Code, w.Body.String())
	rows := gjson.Get(w.Body.String(), "rows").Array()
	require.Len(t, rows, 2, w.Body.String())
	assert.Equal(t, "backup", rows[0].Get("candidate").Str, "candidates in byte order")
	row := rows[1]
	assert.Equal(t, "chat", row.Get("model").Str)
	assert.Equal(t, "primary", row.Get("candidate").Str)
	assert.Equal(t, int64(20), row.Get("requests").Int(), "the record an hour and a minute old is outside")
	assert.Equal(t, 0.2, row.Get("error_rate").Float())
	assert.Equal(t, int64(50), row.Get("ttft_p50_ms").Int())
	assert.Equal(t, int64(3_000), row.Get("ttft_p95_ms").Int(), "the 19th of 20 is slow")
	assert.Equal(t, int64(1_000), row.Get("duration_p50_ms").Int())
	assert.Equal(t, int64(10_000), row.Get("duration_p95_ms").Int())

	// The model's total: its percentiles are of all 40 requests, half of them slow.
	total := gjson.Get(w.Body.String(), "models.0")
	assert.Equal(t, "chat", total.Get("model").Str)
	assert.False(t, total.Get("candidate").Exists())
	assert.Equal(t, int64(40), total.Get("requests").Int())
	assert.Equal(t, 0.1, total.Get("error_rate").Float())
	assert.Equal(t, int64(3_000), total.Get("ttft_p50_ms").Int(), "the 20th of 40 is one of primary's slow two")
	assert.Equal(t, int64(4_000), total.Get("ttft_p95_ms").Int())

	w = do(h, "GET", "/api/latency?window=2h", "")
	primary := gjson.Get(w.Body.String(), `rows.#(candidate=="primary")`)
	assert.Equal(t, int64(21), primary.Get("requests").Int())
	assert.Equal(t, 0.2381, primary.Get("error_rate").Float(), "5 of 21")

	for _, bad := range []string{"soon", "10s", "25h", "-1h"} {
		w = do(h, "GET", "/api/latency?window="+bad, "")
		assert.Equal(t, 400, w.Code, bad)
	}
	w = do(console.New(&console.API{}), "GET", "/api/latency", "")
	assert.Equal(t, 503, w.Code, "no store, no latency")
}

// Every open console asks for the latency table, and its query reads the whole window: an
// answer is served again for 15 s, then asked afresh.
func TestLatencyAnswersAreReusedForAQuarterMinute(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite", filepath.Join(t.TempDir(), "usage.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	clock := now
	record := func(id string) {
		require.NoError(t, st.WriteUsage(ctx, "gw", 1, []metering.Record{{RequestID: id, Model: "chat", Candidate: "primary",
			Protocol: "openai", Operation: "chat", Status: 200, TTFBMs: 40, LatencyMs: 900, Attempts: 1, Time: now.Add(-time.Minute)}}))
	}
	h := console.New(&console.API{Latency: st, Now: func() time.Time { return clock }})
	requests := func(query string) int64 {
		w := do(h, "GET", "/api/latency"+query, "")
		require.Equal(t, 200, w.Code, w.Body.String())
		return gjson.Get(w.Body.String(), "models.0.requests").Int()
	}
	record("a")
	assert.Equal(t, int64(1), requests(""))
	record("b")
	clock = now.Add(14 * time.Second)
	assert.Equal(t, int64(1), requests(""), "the answer of 14 s ago stands")
	assert.Equal(t, int64(2), requests("?window=2h"), "another window is its own query")
	clock = now.Add(30 * time.Second)
	assert.Equal(t, int64(2), requests(""), "a stale answer is asked afresh")
}
