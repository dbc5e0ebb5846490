package integration

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	_ "modernc.org/sqlite"
)

// ledgerRow is one ledger record as stored.
type ledgerRow struct {
	KeyID, Model, Candidate, Protocol, Operation string
	Status                                       int
	Input, Cached, CacheWrite, Output, Reasoning int64
	Estimated                                    bool
	Cost                                         int64
	LatencyMs, TTFBMs                            int64
	Attempts                                     int
	Time                                         time.Time
}

// meteredGateway runs the gateway with priced models and a store the test can read.
func meteredGateway(t *testing.T) (*gateway, *sql.DB) {
	up := newUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	models := "\t\tmodel priced {\n\t\t\tprice input 2 cached_input 0.5 output 8 reasoning 20\n" +
		candidate("a", "family_a", a, "up-priced") + candidate("b", "family_b", b, "up-priced") + "\t\t}\n" +
		// Its final usage comes well after the 2 s a departed client's stream is read on.
		"\t\tmodel drip {\n\t\t\tprice input 2 output 8\n" + candidate("b", "family_b", b, "up+drip-300ms+usage-delay-30s") + "\t\t}\n" +
		"\t\tmodel slow {\n\t\t\tprice input 2 output 8\n" + candidate("a", "family_a", a, "up+slow-headers-1s") + "\t\t}\n" +
		"\t\tmodel paced {\n\t\t\tprice input 2 output 8\n" + candidate("b", "family_b", b, "up+drip-100ms") + "\t\t}\n" +
		"\t\tmodel fails-over {\n\t\t\tprice input 2 output 8\n" +
		candidate("refused", "family_a", "http://127.0.0.1:1/v1", "up-dead", "priority 1") +
		candidate("broken", "family_a", a, "up+fail-503", "priority 2") +
		candidate("good", "family_a", a, "up-good", "priority 3") + "\t\t}\n" +
		// Each candidate at its own price; the first always fails over to the second.
		"\t\tmodel regional {\n\t\t\tprice input 2 output 8\n" +
		candidate("dear", "family_a", a, "up+fail-503", "priority 1", "price input 100 output 100") +
		candidate("cheap", "family_a", a, "up-cheap", "priority 2", "price input 1 output 4") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "\t\tstore sqlite "+dbPath+"\n")
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return g, db
}

// record waits for the ledger row of a request (the ledger writes in batches).
func record(t *testing.T, db *sql.DB, requestID string) ledgerRow {
	t.Helper()
	var r ledgerRow
	var key sql.NullString
	var ts int64
	var err error
	require.Eventually(t, func() bool {
		err = db.QueryRow(`SELECT key_id, model, candidate, protocol, operation, status, input, cached_input, cache_write,
			output, reasoning, estimated, cost_micros, latency_ms, ttfb_ms, attempts, ts FROM usage_records WHERE request_id = ?`, requestID).
			Scan(&key, &r.Model, &r.Candidate, &r.Protocol, &r.Operation, &r.Status, &r.Input, &r.Cached, &r.CacheWrite,
				&r.Output, &r.Reasoning, &r.Estimated, &r.Cost, &r.LatencyMs, &r.TTFBMs, &r.Attempts, &ts)
		return err == nil
	}, waitShort, pollEvery, "no ledger row for %s", requestID)
	r.KeyID = key.String
	r.Time = time.UnixMicro(ts)
	return r
}

// An answer is billed at the prices of the candidate that served it, and usage can be
// summed by candidate and by channel.
func TestEachCandidateBillsAtItsOwnPrice(t *testing.T) {
	g, db := meteredGateway(t)
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"regional","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	rec := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, "cheap", rec.Candidate)
	wantInput := int64(len(g.up.last(t).Body)/4 + 1)
	assert.Equal(t, (wantInput*1_000_000+10*4_000_000+500_000)/1_000_000, rec.Cost,
		"at the serving candidate's prices (input 1, output 4), not the model's or the failed one's")

	resp, err := http.Get(g.admin + "/switchyard/usage?group=model,candidate,channel")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	var found bool
	for _, row := range gjson.GetBytes(b, "rows").Array() {
		if row.Get("model").Str == "regional" {
			found = true
			assert.Equal(t, "cheap", row.Get("candidate").Str)
			assert.Equal(t, "api", row.Get("channel").Str, "through the family's own API")
			assert.Equal(t, rec.Cost, row.Get("cost_micros").Int())
		}
	}
	assert.True(t, found, "no row for the model in %s", b)
}

// The simulator's usage is deterministic: input tokens are len(upstream body)/4+1,
// answer text 10 tokens, reasoning or thinking 16 more. Prices per million: input 2,
// cached 0.5, output 8, reasoning 20.
func TestEveryShapeIsMeteredExactly(t *testing.T) {
	g, db := meteredGateway(t)
	cost := func(input, output, reasoning int64) int64 {
		return (input*2_000_000 + (output-reasoning)*8_000_000 + reasoning*20_000_000 + 500_000) / 1_000_000
	}
	cases := []struct {
		name, path, body string
		headers          []string
		reasoning        int64
		estimated        bool
		// What the record names: the candidate that served, the ingress protocol, the operation.
		candidate, protocol, operation string
	}{
		{"chat", "/v1/chat/completions", `{"model":"priced","messages":[{"role":"user","content":"hi"}]}`, nil, 0, false,
			"a", "family_a", "chat.completions"},
		{"chat streamed with reasoning", "/v1/chat/completions", `{"model":"priced","stream":true,"reasoning_effort":"low","messages":[{"role":"user","content":"hi"}]}`, nil, 16, false,
			"a", "family_a", "chat.completions"},
		{"responses with reasoning", "/v1/responses", `{"model":"priced","input":"hi","reasoning":{"effort":"low"}}`, nil, 16, false,
			"a", "family_a", "responses"},
		{"responses streamed", "/v1/responses", `{"model":"priced","input":"hi","stream":true}`, nil, 0, false,
			"a", "family_a", "responses"},
		{"messages with the thinking split", "/v1/messages", `{"model":"priced","max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"anthropic-version", v1, "anthropic-beta", "thinking-token-count-2026-05-13"}, 16, false,
			"b", "family_b", "messages"},
		{"messages streamed, thinking not split out", "/v1/messages", `{"model":"priced","max_tokens":4096,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`,
			[]string{"anthropic-version", v1}, 16, true,
			"b", "family_b", "messages"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now()
			r := g.call(t, "POST", c.path, c.body, c.headers...)
			after := time.Now()
			require.Equal(t, 200, r.Status, "%s", r.Body)
			sent := g.up.last(t).Body
			rec := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
			wantInput := int64(len(sent)/4 + 1)
			assert.Equal(t, "static:test", rec.KeyID)
			assert.Equal(t, "priced", rec.Model)
			assert.Equal(t, c.candidate, rec.Candidate)
			assert.Equal(t, c.protocol, rec.Protocol)
			assert.Equal(t, c.operation, rec.Operation)
			assert.Equal(t, 1, rec.Attempts, "one attempt, the one that served")
			assert.Equal(t, 200, rec.Status)
			// The gateway's clocks start after the client's and stop before its last byte.
			assert.LessOrEqual(t, rec.TTFBMs, rec.LatencyMs)
			assert.LessOrEqual(t, rec.LatencyMs, r.Elapsed.Milliseconds())
			assert.GreaterOrEqual(t, rec.TTFBMs, int64(0))
			assert.WithinRange(t, rec.Time, before.Truncate(time.Microsecond), after, "the record's time is when the request ended")
			assert.Equal(t, wantInput, rec.Input, "input tokens as the upstream reported them")
			assert.Equal(t, 10+c.reasoning, rec.Output, "output includes reasoning")
			assert.Equal(t, c.estimated, rec.Estimated)
			if c.estimated {
				// Derived from the thinking text forwarded: present, never above the output.
				assert.Positive(t, rec.Reasoning)
				assert.LessOrEqual(t, rec.Reasoning, rec.Output)
				assert.Equal(t, cost(wantInput, rec.Output, rec.Reasoning), rec.Cost)
			} else {
				assert.Equal(t, c.reasoning, rec.Reasoning)
				assert.Equal(t, cost(wantInput, 10+c.reasoning, c.reasoning), rec.Cost, "reasoning at its own price")
			}
		})
	}

	// Prometheus counts the same tokens by kind and the cost, by model and key id.
	resp, err := http.Get(g.admin + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`switchyard_tokens_total{key_id="static:test",kind="reasoning",model="priced"}`,
		`switchyard_tokens_total{key_id="static:test",kind="input",model="priced"}`,
		`switchyard_cost_micros_total{key_id="static:test",model="priced"}`,
	} {
		assert.True(t, strings.Contains(string(b), want), "the metrics lack %s", want)
	}
}

// A client that leaves mid-stream is billed for what was forwarded, flagged estimated.
func TestClientThatLeavesMidStreamIsBilledAsAnEstimate(t *testing.T) {
	g, db := meteredGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/messages",
		strings.NewReader(`{"model":"drip","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", v1)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	id := resp.Header.Get("X-Switchyard-Request-Id")
	buf := make([]byte, 4096)
	seen := ""
	for !strings.Contains(seen, "content_block_delta") { // read until some text has come
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		seen += string(buf[:n])
	}
	cancel()
	resp.Body.Close()

	rec := record(t, db, id)
	assert.True(t, rec.Estimated, "the upstream never reported its final usage")
	assert.Positive(t, rec.Input, "message_start's input count is kept")
	assert.Positive(t, rec.Output, "what was forwarded is billed")
	assert.Positive(t, rec.Cost)
}

// A client that leaves a non-streamed request once the upstream has its body, before the
// answer, is billed the upstream's own usage all the same: the work was done.
func TestClientThatLeavesBeforeTheAnswerIsBilled(t *testing.T) {
	g, db := meteredGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions",
		strings.NewReader(`{"model":"slow","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	failed := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	require.Eventually(t, func() bool { return g.up.count() > 0 }, waitShort, 5*time.Millisecond, "the upstream got the request")
	cancel()
	require.Error(t, <-failed, "the client left before any answer")

	var rows, input, output int64
	var estimated bool
	require.Eventually(t, func() bool {
		err := db.QueryRow(`SELECT COUNT(*), COALESCE(MAX(input), 0), COALESCE(MAX(output), 0), COALESCE(MAX(estimated), 0) FROM usage_records WHERE model = 'slow'`).
			Scan(&rows, &input, &output, &estimated)
		return err == nil && rows > 0
	}, waitShort, 20*time.Millisecond, "the answer read on after the client left is in the ledger")
	assert.Equal(t, int64(1), rows, "exactly once")
	assert.Equal(t, int64(len(g.up.last(t).Body)/4+1), input, "the upstream's own input count")
	assert.Equal(t, int64(10), output, "the upstream's own output count")
	assert.False(t, estimated)
}

// A record counts every attempt, the serving one included, and names the candidate that
// served; its time to first byte is the first event's, its latency the whole answer's.
func TestUsageRecordTimesAndAttempts(t *testing.T) {
	g, db := meteredGateway(t)

	// Two candidates fail (a refused connection, a 503) before the third serves.
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"fails-over","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	rec := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, "good", rec.Candidate)
	assert.Equal(t, 3, rec.Attempts, "two failed attempts and the serving one")
	assert.Equal(t, "fails-over", rec.Model)

	// A stream whose upstream waits 100 ms between events: the first event comes at once,
	// the answer takes (events - 1) × 100 ms. The figures are compared with the client's
	// own and with the upstream's pacing, not with a wall-clock limit.
	const drip = 100 * time.Millisecond
	req, err := http.NewRequest("POST", g.base+"/v1/messages",
		strings.NewReader(`{"model":"paced","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("x-api-key", testKey)
	req.Header.Set("anthropic-version", v1)
	start := time.Now()
	resp, err := boundedClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body []byte
	var firstEvent time.Duration
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		body = append(body, buf[:n]...)
		if firstEvent == 0 && strings.Contains(string(body), "\n\n") {
			firstEvent = time.Since(start)
		}
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
	}
	total := time.Since(start)
	events := parseSSE(t, body)
	require.Equal(t, "message_stop", events[len(events)-1].Name)
	rec = record(t, db, resp.Header.Get("X-Switchyard-Request-Id"))
	t.Logf("%d events 100 ms apart: record says first byte %d ms, latency %d ms; the client saw %v and %v",
		len(events), rec.TTFBMs, rec.LatencyMs, firstEvent.Round(time.Millisecond), total.Round(time.Millisecond))
	paced := time.Duration(len(events)-1) * drip
	assert.LessOrEqual(t, rec.TTFBMs, firstEvent.Milliseconds(), "the first byte, not a later one")
	assert.GreaterOrEqual(t, rec.LatencyMs, paced.Milliseconds(), "the whole answer, as the upstream paced it")
	assert.LessOrEqual(t, rec.LatencyMs, total.Milliseconds())
	assert.Equal(t, 1, rec.Attempts)
	assert.Equal(t, "b", rec.Candidate)
	assert.Equal(t, "messages", rec.Operation)
	assert.Equal(t, "family_b", rec.Protocol)
}
