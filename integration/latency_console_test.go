package integration

// The console's Models view shows the last hour's latency per model and candidate, as
// the latency API answers it from the ledger, after real requests through the gateway.

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

type latencyReport struct {
	browserReport
	Heading  string `json:"heading"`
	Overflow bool   `json:"overflow"`
	Rows     []struct {
		Model       string `json:"model"`
		Candidate   string `json:"candidate"`
		Total       bool   `json:"total"`
		Requests    string `json:"requests"`
		Errors      string `json:"errors"`
		TTFTP50     string `json:"ttft_p50"`
		TTFTP95     string `json:"ttft_p95"`
		DurationP50 string `json:"duration_p50"`
		DurationP95 string `json:"duration_p95"`
	} `json:"rows"`
}

// latencyShown is how the page writes a percentile bound of ms milliseconds.
func latencyShown(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("≤ %d ms", ms)
	}
	return fmt.Sprintf("≤ %g s", float64(ms)/1000)
}

// startLatencyConsoleGateway runs the gateway with the console, like
// startConsoleGateway, and one model whose upstream takes 120 ms to its headers: the
// simulator otherwise answers within the millisecond, which the ledger stores as 0;
// its streams drip, so that they are slower than whole answers and p50 and p95 differ.
func startLatencyConsoleGateway(t *testing.T, up *upstream) *gateway {
	t.Helper()
	a := "http://" + up.hostport() + "/v1"
	db := filepath.Join(t.TempDir(), "keys.db")
	models := "\t\tmodel chat-a {\n\t\t\tprotocols family_a\n\t\t\tprice input 2.5 output 10\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-lat+slow-headers-120ms+drip-100ms", "priority 1") +
		candidate("spare", "family_a", a, upstreamPrefix+"-lat", "priority 2") + "\t\t}\n"
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + db + "\n" + models + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n" +
			"\thandle_path /console/* {\n\t\tbasic_auth {\n\t\t\t" + consoleUser + " " + consolePasswordHash + "\n\t\t}\n\t\tswitchyard_console\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)
	return g
}

func TestConsoleInBrowserLatency(t *testing.T) {
	node := needBrowser(t)
	g := startLatencyConsoleGateway(t, newUpstream(t))
	_, secret := g.createKey(t, `{"name":"latency-test"}`)
	for i := range 4 {
		stream := i%2 == 0 // streams and whole answers alike
		body := fmt.Sprintf(`{"model":"chat-a","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
		r := g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+secret)
		require.Equal(t, 200, r.Status, "%s", r.Body)
	}
	// The ledger writes in batches: wait until the API counts all four.
	var api gjson.Result
	require.Eventually(t, func() bool {
		status, answer := g.adminCall(t, "GET", "/switchyard/latency?window=1h", "")
		api = answer
		return status == 200 && answer.Get(`rows.#(candidate=="main").requests`).Int() == 4
	}, waitLong, pollEvery, "the ledger did not store the four requests")
	main := api.Get(`rows.#(candidate=="main")`)
	require.Equal(t, "chat-a", main.Get("model").Str, api.Raw)
	assert.GreaterOrEqual(t, main.Get("ttft_p50_ms").Int(), int64(150), "120 ms to the headers is in the 150 ms bucket or later")
	assert.Greater(t, main.Get("duration_p95_ms").Int(), main.Get("duration_p50_ms").Int(), "the dripped streams are the slow half")

	var r latencyReport
	runBrowserScript(t, node, "latency.mjs", g, 2*time.Minute, &r, "SY_MODEL=chat-a")
	assert.Equal(t, 200, r.PageStatus)
	assert.Empty(t, r.PageErrors)
	assert.Empty(t, r.ConsoleErrors)
	assert.Equal(t, "Latency, last hour", r.Heading)
	assert.False(t, r.Overflow, "the latency table is wider than its panel at 1366 pixels")

	require.Len(t, r.Rows, 2, "chat-a's total and its one candidate with traffic: %+v", r.Rows)
	total, cand := r.Rows[0], r.Rows[1]
	assert.True(t, total.Total)
	assert.Equal(t, "chat-a", total.Model)
	assert.Equal(t, "main", cand.Candidate)
	for _, row := range r.Rows {
		assert.Equal(t, "4", row.Requests)
		assert.Equal(t, "0%", row.Errors)
		assert.Equal(t, latencyShown(main.Get("ttft_p50_ms").Int()), row.TTFTP50)
		assert.Equal(t, latencyShown(main.Get("ttft_p95_ms").Int()), row.TTFTP95)
		assert.Equal(t, latencyShown(main.Get("duration_p50_ms").Int()), row.DurationP50)
		assert.Equal(t, latencyShown(main.Get("duration_p95_ms").Int()), row.DurationP95)
		assert.Regexp(t, `^≤ \d+ (ms|s)$`, row.DurationP95, "a number, not a dash")
		assert.Regexp(t, `^≤ \d+ (ms|s)$`, row.TTFTP95, "a number, not a dash")
	}
}
