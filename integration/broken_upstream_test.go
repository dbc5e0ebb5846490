package integration

import (
	"bytes"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	_ "modernc.org/sqlite"

	"github.com/switchyard-gw/switchyard/simulator"
)

// Broken upstreams: answers a client must never see (HTML, redirects, bodies that are not
// JSON, oversized bodies and events, resets, cuts, account ids in error bodies) and stream
// endings the gateway must pass on byte for byte. Every call is bounded by a client timeout.

// brokenBehaviours are the upstream faults that are the candidate's failure before the
// first byte; for each, model <name>-fo has a faulty candidate per family before a good
// one, and <name>-only has only the faulty ones.
var brokenBehaviours = []struct {
	name           string
	stream, plain  bool   // which kinds of request it applies to
	mustNotContain string // a marker of the faulty answer
}{
	{"html-200", true, true, "<html>"},
	{"redirect-302", true, true, "<html>"},
	{"bad-json", true, true, "<html>"},
	{"reset", true, true, ""},
	{"huge-first-event", true, false, "x_padding"},
	{"huge-json", false, true, "aaaaaaaaaaaaaaaa"},
}

// brokenGateway runs a gateway in front of a recording simulator, with circuits that do
// not open during the test (so every request meets the faulty candidate) and a ledger the
// test can read.
func brokenGateway(t *testing.T) (*gateway, *recorder, *sql.DB) {
	t.Helper()
	rec := newRecorder(t)
	a, b := "http://"+rec.hostport()+"/v1", "http://"+rec.hostport()
	pair := func(model, upstreamModel string, extra ...string) string {
		return "\t\tmodel " + model + " {\n" +
			candidate("a", "family_a", a, upstreamModel, extra...) +
			candidate("b", "family_b", b, upstreamModel, extra...) + "\t\t}\n"
	}
	var models strings.Builder
	for _, bb := range brokenBehaviours {
		bad := upstreamPrefix + "-x+" + bb.name + "+account-headers"
		models.WriteString("\t\tmodel " + bb.name + "-fo {\n" +
			candidate("bad-a", "family_a", a, bad, "priority 1") +
			candidate("bad-b", "family_b", b, bad, "priority 2") +
			candidate("good-a", "family_a", a, upstreamPrefix+"-good", "priority 3") +
			candidate("good-b", "family_b", b, upstreamPrefix+"-good", "priority 4") + "\t\t}\n")
		models.WriteString(pair(bb.name+"-only", bad))
	}
	models.WriteString(pair("huge-event", upstreamPrefix+"-x+huge-event+account-headers"))
	models.WriteString(pair("cut-early", upstreamPrefix+"-x+cut+account-headers"))
	models.WriteString(pair("acct", upstreamPrefix+"-x+fail-400+account-headers"))
	models.WriteString(pair("plain", upstreamPrefix+"-t"))
	models.WriteString(pair("tail", upstreamPrefix+"-t+tail-at-once"))
	models.WriteString(pair("noterm", upstreamPrefix+"-t+no-terminator"))
	models.WriteString(pair("tail-noterm", upstreamPrefix+"-t+tail-at-once+no-terminator"))
	models.WriteString(pair("comments", upstreamPrefix+"-t+comments"))
	models.WriteString(pair("early", upstreamPrefix+"-e+usage-delay-100ms"))
	models.WriteString(pair("early-nousage", upstreamPrefix+"-e+no-usage"))

	dbPath := filepath.Join(t.TempDir(), "usage.db")
	options := "\t\tstore sqlite " + dbPath + "\n\t\thealth {\n\t\t\tfailure_threshold 1000\n\t\t}\n"
	g := startGatewayWith(t, rec.upstream, models.String(), options)
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return g, rec, db
}

// shapes are the three generation operations, with a body template for a model.
var shapes = []struct {
	name, path string
	body       func(model string, stream bool) string
}{
	{"chat", "/v1/chat/completions", func(m string, s bool) string {
		return `{"model":"` + m + `","stream":` + boolStr(s) + `,"messages":[{"role":"user","content":"hi"}]}`
	}},
	{"responses", "/v1/responses", func(m string, s bool) string {
		return `{"model":"` + m + `","stream":` + boolStr(s) + `,"input":"hi"}`
	}},
	{"messages", "/v1/messages", func(m string, s bool) string {
		return `{"model":"` + m + `","max_tokens":64,"stream":` + boolStr(s) + `,"messages":[{"role":"user","content":"hi"}]}`
	}},
}

// assertAnswer checks a 200 answer of the service model in the shape asked for.
func assertAnswer(t *testing.T, r *result, model string, stream bool) {
	t.Helper()
	require.Equal(t, 200, r.Status, "%.400s", r.Body)
	if stream {
		require.Contains(t, r.Header.Get("Content-Type"), "text/event-stream")
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		last := events[len(events)-1]
		assert.True(t, last.Data == "[DONE]" || last.Name == "response.completed" || last.Name == "message_stop",
			"a complete stream, ending with %+v", last)
	} else {
		require.True(t, gjson.ValidBytes(r.Body), "%.400s", r.Body)
		assert.Equal(t, model, gjson.GetBytes(r.Body, "model").Str)
	}
	assert.Contains(t, string(r.Body), `"model":"`+model+`"`)
}

func TestBrokenUpstreamAnswersAreTheCandidatesFailure(t *testing.T) {
	g, _, _ := brokenGateway(t)
	for _, bb := range brokenBehaviours {
		for _, sh := range shapes {
			for _, stream := range []bool{false, true} {
				if (stream && !bb.stream) || (!stream && !bb.plain) {
					continue
				}
				if bb.name == "huge-json" && sh.name == "responses" {
					continue // 65 MiB per request: two shapes are enough
				}
				name := bb.name + " " + sh.name
				if stream {
					name += " streamed"
				}
				t.Run(name, func(t *testing.T) {
					r := g.bounded(t, "POST", sh.path, sh.body(bb.name+"-fo", stream), "anthropic-version", v1)
					assertAnswer(t, r, bb.name+"-fo", stream)
					assert.Less(t, len(r.Body), 1<<20)
					if bb.mustNotContain != "" {
						assert.NotContains(t, string(r.Body), bb.mustNotContain)
					}
					g.assertNoLeak(t, r)

					r = g.bounded(t, "POST", sh.path, sh.body(bb.name+"-only", stream), "anthropic-version", v1)
					e := envelope(t, r, familyOf(sh.path), 503)
					assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
					assert.Less(t, len(r.Body), 4096)
					g.assertNoLeak(t, r)
				})
			}
		}
	}
}

// A stream that has started cannot fail over: an oversized event ends it with the
// family's native error event, and the process does not hold the event.
func TestOversizedEventEndsTheStream(t *testing.T) {
	g, _, _ := brokenGateway(t)
	g.bounded(t, "POST", "/v1/chat/completions", shapes[0].body("plain", false))
	rssBefore, heapBefore := settledRSS(t), settledHeapKB()
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			r := g.bounded(t, "POST", sh.path, sh.body("huge-event", true), "anthropic-version", v1)
			require.Equal(t, 200, r.Status)
			assert.Less(t, len(r.Body), 1<<20, "the oversized event is not passed on")
			assert.NotContains(t, string(r.Body), "x_padding")
			events := parseSSE(t, r.Body)
			require.GreaterOrEqual(t, len(events), 2, "the first event, then an error")
			assertNativeStreamError(t, sh.name, events[len(events)-1])
			g.assertNoLeak(t, r)
		})
	}
	rssAfter, heapAfter := settledRSS(t), settledHeapKB()
	t.Logf("three streams with a %d MiB event: RSS %d MB -> %d MB, Go heap %d MB -> %d MB (race detector: %v)",
		simulator.HugeEventSize>>20, rssBefore/1024, rssAfter/1024, heapBefore/1024, heapAfter/1024, raceDetector)
	assert.Less(t, (rssAfter-rssBefore)/1024, rssBoundMB(), "RSS back near its start")
	assert.Less(t, (heapAfter-heapBefore)/1024, int64(64), "the Go heap back near its start")
}

// assertNativeStreamError checks that ev is the error event of the shape's stream.
func assertNativeStreamError(t *testing.T, shape string, ev sseEvent) {
	t.Helper()
	switch shape {
	case "chat":
		assert.Empty(t, ev.Name)
		assert.True(t, gjson.Get(ev.Data, "error").IsObject(), "chat streams end with a data frame holding an error: %+v", ev)
	case "responses":
		assert.Equal(t, "error", ev.Name, "%+v", ev)
		assert.Equal(t, "error", gjson.Get(ev.Data, "type").Str)
	case "messages":
		assert.Equal(t, "error", ev.Name, "%+v", ev)
		assert.Equal(t, "error", gjson.Get(ev.Data, "type").Str)
		assert.NotEmpty(t, gjson.Get(ev.Data, "error.type").Str)
	}
}

// A cut after the first events (the connection aborted) ends the stream with the native
// error event, and nothing of the upstream's identity reaches the client.
func TestCutStreamEndsWithTheNativeError(t *testing.T) {
	g, _, _ := brokenGateway(t)
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			r := g.bounded(t, "POST", sh.path, sh.body("cut-early", true), "anthropic-version", v1)
			require.Equal(t, 200, r.Status)
			events := parseSSE(t, r.Body)
			require.GreaterOrEqual(t, len(events), 2)
			assertNativeStreamError(t, sh.name, events[len(events)-1])
			g.assertNoLeak(t, r)
		})
	}
}

// An upstream error passed back to the client names no upstream model, host, credential
// or account, even when the account ids are not of the `org-…` form.
func TestUpstreamErrorBodiesAreScrubbed(t *testing.T) {
	g, _, _ := brokenGateway(t)
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", shapes[0].body("acct", false)},
		{"/v1/chat/completions", shapes[0].body("acct", true)},
		{"/v1/responses", shapes[1].body("acct", false)},
		{"/v1/messages", shapes[2].body("acct", false)},
		{"/v1/messages", shapes[2].body("acct", true)},
		{"/v1/messages/count_tokens", `{"model":"acct","messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(c.path+" "+c.body, func(t *testing.T) {
			r := g.bounded(t, "POST", c.path, c.body, "anthropic-version", v1)
			e := envelope(t, r, familyOf(c.path), 400)
			assert.Contains(t, e.Get("message").Str, "acct", "the upstream's message, with the service model")
			g.assertNoLeak(t, r)
		})
	}
}

// The end of a stream is passed on exactly: final events and end-of-body in one read, and
// a last event not ended by a blank line, arrive as the upstream sent them with only the
// model changed.
func TestStreamEndsArePassedOnByteForByte(t *testing.T) {
	g, rec, _ := brokenGateway(t)
	for _, model := range []string{"plain", "tail", "noterm", "tail-noterm", "comments"} {
		for _, sh := range shapes {
			t.Run(model+" "+sh.name, func(t *testing.T) {
				body := sh.body(model, true)
				if sh.name == "chat" { // so that the gateway adds nothing and removes nothing
					body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
				}
				r := g.bounded(t, "POST", sh.path, body, "anthropic-version", v1)
				require.Equal(t, 200, r.Status, "%s", r.Body)
				sent := rec.lastAnswer(t)
				upstreamModel := gjson.GetBytes(g.up.last(t).Body, "model").Str
				want := bytes.ReplaceAll(sent, []byte(`"model":"`+upstreamModel+`"`), []byte(`"model":"`+model+`"`))
				require.NotEqual(t, string(sent), string(want), "the upstream's answer names its model")
				if !assert.Equal(t, string(want), string(r.Body)) {
					t.Logf("upstream's last bytes %q, client's %q", tail(want), tail(r.Body))
				}
				g.assertNoLeak(t, r)
			})
		}
	}
}

func tail(b []byte) []byte { return b[max(0, len(b)-80):] }

// A client that leaves as soon as it has the answer (finish_reason seen, the usage chunk
// still to come) is billed the upstream's real usage; when the upstream never reports
// usage, an estimate of the input that is never 0 for a non-empty prompt.
func TestClientLeavingAtTheFinishIsBilled(t *testing.T) {
	g, _, db := brokenGateway(t)
	finished := func(seen string) bool { return strings.Contains(seen, `"finish_reason":"stop"`) }
	prompt := `{"model":"%s","stream":true,"messages":[{"role":"user","content":"Please summarise the plot of a long novel in one line."}]}`

	t.Run("usage arrives 100 ms after the finish", func(t *testing.T) {
		id, seen := g.readUntil(t, "/v1/chat/completions", strings.Replace(prompt, "%s", "early", 1), finished)
		require.True(t, finished(seen), "the answer finished: %s", seen)
		assert.NotContains(t, seen, `"usage":{`, "the client left before the usage chunk")
		sent := g.up.last(t).Body
		row := record(t, db, id)
		t.Logf("ledger row: %+v", row)
		assert.False(t, row.Estimated, "the upstream's usage was read after the client left")
		assert.Equal(t, int64(len(sent)/4+1), row.Input, "input tokens as the upstream reported them")
		assert.Equal(t, int64(10), row.Output)
	})

	t.Run("the upstream never reports usage", func(t *testing.T) {
		id, seen := g.readUntil(t, "/v1/chat/completions", strings.Replace(prompt, "%s", "early-nousage", 1), finished)
		require.True(t, finished(seen), "the answer finished: %s", seen)
		row := record(t, db, id)
		t.Logf("ledger row: %+v", row)
		assert.True(t, row.Estimated)
		assert.Positive(t, row.Input, "a non-empty prompt is never billed 0 input tokens")
		assert.Positive(t, row.Output)
	})
}
