package integration

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// The fault-injection suite: a provider that breaks in the ways real ones do, each fault
// once behind a healthy fallback and once as a model's only candidate, with the gateway's
// default retries (one, 500 ms to 8 s back-off) and deadline. For each, what the client
// got and how long it waited, how many attempts each candidate saw and when, what the
// ledger recorded, and that the gateway serves the next request.

type faultCase struct {
	name   string
	tokens string   // the simulator's behaviours for the faulty candidate
	extra  []string // further lines of the faulty candidate
	shape  string   // chat (default) or messages
	stream bool
	// modelExtra are further lines of both models' blocks.
	modelExtra []string

	// With a healthy fallback behind the faulty candidate.
	foPrimary  int  // attempts the faulty candidate sees
	foFallback int  // attempts the fallback sees
	foBroken   bool // the answer starts, then ends with the family's error event
	// foEstimated: the record bills an abandoned attempt's input, estimated, besides the
	// answer's reported usage.
	foEstimated bool

	// As the model's only candidate.
	onlyStatus   int           // what the client gets
	onlyAttempts int           // attempts the candidate sees
	onlyGap      time.Duration // the least time between its first two attempts (a back-off of at most 500 ms may follow)
	onlyWithin   time.Duration // the longest the client waits
	onlyBroken   bool          // a 200 stream that ends with the family's error event
	onlyNext     int           // the next request's status
}

var faultCases = []faultCase{
	{name: "500-once", tokens: "fail-500+first-1",
		foPrimary: 1, foFallback: 1,
		onlyStatus: 200, onlyAttempts: 2, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "429-retry-after-once", tokens: "rate-limit+retry-after-1s+first-1",
		foPrimary: 1, foFallback: 1,
		onlyStatus: 200, onlyAttempts: 2, onlyGap: time.Second, onlyWithin: 4 * time.Second, onlyNext: 200},
	{name: "429-bare-once", tokens: "rate-limit+no-retry-after+first-1",
		foPrimary: 1, foFallback: 1,
		onlyStatus: 200, onlyAttempts: 2, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "429-always", tokens: "rate-limit+retry-after-1s",
		foPrimary: 1, foFallback: 1,
		// Retried once after its pause, then answered; the pause then holds the next.
		onlyStatus: 503, onlyAttempts: 2, onlyGap: time.Second, onlyWithin: 4 * time.Second, onlyNext: 503},
	{name: "429-long-pause", tokens: "rate-limit+retry-after-30s",
		foPrimary: 1, foFallback: 1,
		// A pause longer than the longest back-off is the client's to wait out.
		onlyStatus: 503, onlyAttempts: 1, onlyWithin: 2 * time.Second, onlyNext: 503},
	{name: "503-always", tokens: "fail-503",
		foPrimary: 1, foFallback: 1,
		onlyStatus: 503, onlyAttempts: 2, onlyWithin: 3 * time.Second, onlyNext: 503},
	{name: "reset-once", tokens: "reset+first-1",
		foPrimary: 1, foFallback: 1,
		onlyStatus: 200, onlyAttempts: 2, onlyWithin: 3 * time.Second, onlyNext: 200},
	// A timeout once the upstream has the whole request is not retried: it may still be
	// generating. These models opt in to failing over after it; alone, the candidate's
	// timeout is the client's answer (504), billed, and its health does not move.
	{name: "silent", tokens: "silent", extra: []string{"first_byte_timeout 700ms"}, modelExtra: []string{"failover_after_timeout"},
		foPrimary: 1, foFallback: 1, foEstimated: true,
		onlyStatus: 504, onlyAttempts: 1, onlyWithin: 3 * time.Second, onlyNext: 504},
	{name: "slow-first-token", tokens: "slow-first-event-20s", extra: []string{"first_token_timeout 700ms"}, stream: true,
		modelExtra: []string{"failover_after_timeout"},
		foPrimary:  1, foFallback: 1, foEstimated: true,
		onlyStatus: 504, onlyAttempts: 1, onlyWithin: 3 * time.Second, onlyNext: 504},
	{name: "cut-mid-stream", tokens: "cut", stream: true,
		foPrimary: 1, foBroken: true,
		onlyStatus: 200, onlyAttempts: 1, onlyBroken: true, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "stall-mid-stream", tokens: "stall", extra: []string{"idle_timeout 700ms"}, stream: true, shape: "messages",
		foPrimary: 1, foBroken: true,
		onlyStatus: 200, onlyAttempts: 1, onlyBroken: true, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "malformed-event", tokens: "malformed-event", stream: true,
		foPrimary: 1, foBroken: true,
		onlyStatus: 200, onlyAttempts: 1, onlyBroken: true, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "no-done", tokens: "no-done", stream: true,
		foPrimary:  1,
		onlyStatus: 200, onlyAttempts: 1, onlyWithin: 3 * time.Second, onlyNext: 200},
	{name: "context-length", tokens: "context-length",
		foPrimary:  1,
		onlyStatus: 400, onlyAttempts: 1, onlyWithin: 2 * time.Second, onlyNext: 400},
	{name: "content-policy", tokens: "content-policy", shape: "messages",
		foPrimary:  1,
		onlyStatus: 400, onlyAttempts: 1, onlyWithin: 2 * time.Second, onlyNext: 400},
}

// faultModels declares, for each case, <name>-fo (the faulty candidate, then a healthy
// fallback) and <name>-only; every candidate asks for an upstream model of its own, so
// the attempts each saw can be told apart.
func faultModels(up *upstream) string {
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	var s strings.Builder
	for _, fc := range faultCases {
		proto, url := "family_a", a
		if fc.shape == "messages" {
			proto, url = "family_b", b
		}
		lines := ""
		for _, l := range fc.modelExtra {
			lines += "\t\t\t" + l + "\n"
		}
		s.WriteString("\t\tmodel " + fc.name + "-fo {\n" + lines +
			candidate("faulty", proto, url, faultyName(fc, "fo"), fc.extra...) +
			candidate("fallback", proto, url, fallbackName(fc), "priority 1") + "\t\t}\n")
		s.WriteString("\t\tmodel " + fc.name + "-only {\n" + lines + candidate("faulty", proto, url, faultyName(fc, "only"), fc.extra...) + "\t\t}\n")
	}
	return s.String()
}

func faultyName(fc faultCase, variant string) string {
	return upstreamPrefix + "-" + fc.name + "-" + variant + "+" + fc.tokens
}

func fallbackName(fc faultCase) string { return upstreamPrefix + "-" + fc.name + "-fallback" }

func faultRequest(fc faultCase, model string) (path, body string, headers []string) {
	if fc.shape == "messages" {
		return "/v1/messages", `{"model":"` + model + `","max_tokens":64,"stream":` + boolStr(fc.stream) +
			`,"messages":[{"role":"user","content":"hi"}]}`, []string{"anthropic-version", v1}
	}
	return "/v1/chat/completions", `{"model":"` + model + `","stream":` + boolStr(fc.stream) +
		`,"stream_options":` + map[bool]string{true: `{"include_usage":true}`, false: `null`}[fc.stream] +
		`,"messages":[{"role":"user","content":"hi"}]}`, nil
}

func TestFaultInjection(t *testing.T) {
	up := newUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	g := startGatewayWith(t, up, faultModels(up), "\t\tstore sqlite "+dbPath+"\n")
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	// Counters are process-wide: this test's retries are what they gain while it runs.
	retried := `switchyard_retries_total{candidate="faulty",model="500-once-only"}`
	waited := `switchyard_retry_wait_seconds_count{model="429-retry-after-once-only"}`
	before, _ := g.scrapeMetrics(t)

	for _, fc := range faultCases {
		t.Run(fc.name+"/with-fallback", func(t *testing.T) {
			model := fc.name + "-fo"
			path, body, headers := faultRequest(fc, model)
			r := g.bounded(t, "POST", path, body, headers...)
			g.assertNoLeak(t, r)
			primary, fallback := up.seenFor(faultyName(fc, "fo")), up.seenFor(fallbackName(fc))
			assert.Len(t, primary, fc.foPrimary, "attempts on the faulty candidate")
			assert.Len(t, fallback, fc.foFallback, "attempts on the fallback")
			switch {
			case fc.onlyStatus == 400:
				// The client's own mistake is passed back once, scrubbed; no failover.
				assert.Equal(t, 400, r.Status, "%s", r.Body)
			case fc.foBroken:
				assertBrokenStream(t, fc, r)
			default:
				assertFaultAnswer(t, fc, r, model)
				row := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
				assert.Equal(t, fc.foPrimary+fc.foFallback, row.Attempts, "the record counts every attempt")
				assert.Equal(t, map[bool]string{true: "fallback", false: "faulty"}[fc.foFallback > 0], row.Candidate)
				if fc.foEstimated {
					assert.True(t, row.Estimated, "the abandoned attempt's input is billed too, estimated")
				} else {
					assert.False(t, row.Estimated, "billed from the usage the upstream reported")
				}
			}
			n := g.bounded(t, "POST", path, body, headers...)
			if fc.onlyStatus == 400 {
				assert.Equal(t, 400, n.Status)
			} else {
				assert.Equal(t, 200, n.Status, "the next request is served: %s", n.Body)
			}
		})
		t.Run(fc.name+"/single-candidate", func(t *testing.T) {
			model := fc.name + "-only"
			path, body, headers := faultRequest(fc, model)
			r := g.bounded(t, "POST", path, body, headers...)
			g.assertNoLeak(t, r)
			assert.Less(t, r.Elapsed, fc.onlyWithin, "answered within its bound")
			seen := up.seenFor(faultyName(fc, "only"))
			require.Len(t, seen, fc.onlyAttempts, "attempts on the only candidate")
			if len(seen) > 1 {
				gap := seen[1].At.Sub(seen[0].At)
				t.Logf("retried after %v", gap.Round(time.Millisecond))
				assert.GreaterOrEqual(t, gap, fc.onlyGap, "a retry waits for the pause asked for")
				assert.LessOrEqual(t, gap, fc.onlyGap+time.Second, "and for no more than its back-off beyond it")
			}
			// No tight loop: one try and at most one retry in the first second.
			inFirstSecond := 0
			for _, s := range seen {
				if s.At.Sub(seen[0].At) < time.Second {
					inFirstSecond++
				}
			}
			assert.LessOrEqual(t, inFirstSecond, 2)

			switch {
			case fc.onlyBroken:
				assertBrokenStream(t, fc, r)
			case fc.onlyStatus == 200:
				assertFaultAnswer(t, fc, r, model)
				row := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
				assert.Equal(t, fc.onlyAttempts, row.Attempts, "the record counts the retry")
				assert.Equal(t, 200, row.Status)
			case fc.onlyStatus == 504:
				e := familyA(t, r, 504, "server_error")
				assert.Equal(t, "upstream_timeout", e.Get("code").Str)
				row := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
				assert.Equal(t, 504, row.Status)
				assert.True(t, row.Estimated, "the work the upstream was given is billed, estimated")
				assert.Positive(t, row.Input)
			case fc.onlyStatus == 503:
				e := familyA(t, r, 503, "service_unavailable")
				assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
				assert.NotEmpty(t, r.Header.Get("Retry-After"))
			case fc.onlyStatus == 400:
				assert.Equal(t, 400, r.Status)
				if fc.shape == "messages" {
					familyB(t, r, 400, "invalid_request_error")
				} else {
					assert.Equal(t, "context_length_exceeded", gjson.GetBytes(r.Body, "error.code").Str, "the upstream's own error, passed back: %s", r.Body)
				}
			}
			n := g.bounded(t, "POST", path, body, headers...)
			assert.Equal(t, fc.onlyNext, n.Status, "the next request: %s", n.Body)
			assert.Less(t, n.Elapsed, fc.onlyWithin)
		})
	}

	after, _ := g.scrapeMetrics(t)
	assert.Equal(t, 1.0, after[retried]-before[retried], "one retry of the one-off 500 is counted")
	assert.Equal(t, 1.0, after[waited]-before[waited], "and its wait, for the 429")
}

// assertFaultAnswer checks a complete answer of the service model.
func assertFaultAnswer(t *testing.T, fc faultCase, r *result, model string) {
	t.Helper()
	if fc.name != "no-done" {
		assertAnswer(t, r, model, fc.stream)
		return
	}
	// The upstream ended without [DONE] after a complete answer with its usage: the
	// client gets exactly that, as promptly as the upstream ended it.
	require.Equal(t, 200, r.Status)
	events := parseSSE(t, r.Body)
	require.NotEmpty(t, events)
	last := events[len(events)-1]
	assert.NotEqual(t, "[DONE]", last.Data)
	assert.True(t, gjson.Get(last.Data, "usage").IsObject(), "the usage chunk is the last event: %+v", last)
	assert.Less(t, r.Elapsed, time.Second)
}

// assertBrokenStream checks a stream that started and then ended with the family's error
// event, with nothing the upstream sent after the fault.
func assertBrokenStream(t *testing.T, fc faultCase, r *result) {
	t.Helper()
	require.Equal(t, 200, r.Status, "%s", r.Body)
	events := parseSSE(t, r.Body)
	require.GreaterOrEqual(t, len(events), 2, "%s", r.Body)
	shape := fc.shape
	if shape == "" {
		shape = "chat"
	}
	assertNativeStreamError(t, shape, events[len(events)-1])
	assert.NotContains(t, string(r.Body), ",,", "the unreadable event never reaches the client")
}

// A provider down for a few seconds, then healthy, under a request every 250 ms: behind a
// fallback every request is served; alone, each gets either an answer or a clean 503
// with Retry-After, the circuit keeps client requests off it while it is down, and
// background probes bring it back within the probe schedule's cap (5 s) of its return.
// The outage is in the base URL's path, so probes see it too.
func TestAnOutageOfSecondsThenHealthy(t *testing.T) {
	up := newUpstream(t)
	const outage = 3 * time.Second
	down := func(name string) string {
		return "http://" + up.hostport() + "/" + name + "+fail-503+for-" + outage.String() + "/v1"
	}
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel outage-fo {\n" + candidate("primary", "family_a", down("fo"), upstreamPrefix+"-outage-fo") +
		candidate("fallback", "family_a", a, upstreamPrefix+"-outage-fallback", "priority 1") + "\t\t}\n" +
		"\t\tmodel outage-only {\n" + candidate("primary", "family_a", down("only"), upstreamPrefix+"-outage-only") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	type answer struct {
		at     time.Duration // since the outage began
		status int
	}
	var fo, only []answer
	began := time.Now() // each outage begins with the first request to its candidate
	for time.Since(began) < outage+7*time.Second {
		for _, m := range []string{"outage-fo", "outage-only"} {
			r := g.bounded(t, "POST", "/v1/chat/completions", `{"model":"`+m+`","messages":[{"role":"user","content":"hi"}]}`)
			g.assertNoLeak(t, r)
			if r.Status != 200 {
				e := familyA(t, r, 503, "service_unavailable")
				assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
				assert.NotEmpty(t, r.Header.Get("Retry-After"))
			}
			if m == "outage-fo" {
				fo = append(fo, answer{time.Since(began), r.Status})
			} else {
				only = append(only, answer{time.Since(began), r.Status})
			}
		}
		time.Sleep(250 * time.Millisecond) // the scenario's pace, not a wait for an event
	}
	for _, a := range fo {
		assert.Equal(t, 200, a.status, "behind a fallback every request is served (at %v)", a.at)
	}
	var back time.Duration
	for _, a := range only {
		if a.status == 200 && back == 0 {
			back = a.at
		}
		if back > 0 {
			assert.Equal(t, 200, a.status, "once back, it stays back (at %v)", a.at)
		}
	}
	require.NotZero(t, back, "the candidate never served again")
	t.Logf("alone: served again %v after the outage ended", (back - outage).Round(time.Millisecond))
	assert.Less(t, back, outage+5*time.Second+time.Second, "back within the probes' cap of its return")
	// While down: one try and one retry for the first request, one failure more opens the
	// circuit, then nothing from clients until a probe passed.
	during := 0
	for _, s := range up.seenFor(upstreamPrefix + "-outage-only") {
		if s.At.Sub(began) < outage {
			during++
		}
	}
	assert.LessOrEqual(t, during, 3, "client requests that reached it while it was down")
}
