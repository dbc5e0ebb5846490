package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/metering"
)

// Every way a request ends is told for what it is: to the client in its family's native
// envelope or error event, and in the request log.

// outcomeGateway runs a gateway with a store, and:
//   - deadline-a / deadline-b: a silent candidate whose first-byte limit is the model's
//     whole request deadline, then a healthy one;
//   - malformed: a stream that sends a malformed event after its first;
//   - cut-stream: a stream the upstream aborts after three events;
//   - erroring: a stream whose upstream sends its own error event after the first event
//     (a fake upstream of the test's).
func outcomeGateway(t *testing.T) *gateway {
	t.Helper()
	up := newUpstream(t)
	erroring := newErroringStreamUpstream(t)
	a, b := "http://"+up.hostport()+"/v1", "http://"+up.hostport()
	silentThenGood := func(proto, url string) string {
		return candidate("silent", proto, url, upstreamPrefix+"-x+silent", "priority 1", "first_byte_timeout 3s") +
			candidate("good", proto, url, upstreamPrefix+"-good-after-deadline", "priority 2")
	}
	models := "" +
		"\t\tmodel deadline-a {\n\t\t\trequest_timeout 1s\n" + silentThenGood("family_a", a) + "\t\t}\n" +
		"\t\tmodel deadline-b {\n\t\t\trequest_timeout 1s\n" + silentThenGood("family_b", b) + "\t\t}\n" +
		"\t\tmodel malformed {\n" + candidate("a", "family_a", a, upstreamPrefix+"-x+malformed-event") +
		candidate("b", "family_b", b, upstreamPrefix+"-x+malformed-event") + "\t\t}\n" +
		"\t\tmodel cut-stream {\n" + candidate("a", "family_a", a, upstreamPrefix+"-x+cut") +
		candidate("b", "family_b", b, upstreamPrefix+"-x+cut") + "\t\t}\n" +
		"\t\tmodel erroring {\n" + candidate("a", "family_a", erroring.URL+"/v1", upstreamPrefix+"-erroring") +
		candidate("b", "family_b", erroring.URL, upstreamPrefix+"-erroring") + "\t\t}\n"
	return startGatewayWith(t, up, models, "")
}

// newErroringStreamUpstream answers every stream with one good event and then an error
// event of the family's own, as providers do when they fail mid-answer.
func newErroringStreamUpstream(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","+
				"\"role\":\"assistant\",\"model\":\""+upstreamPrefix+"-erroring\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,"+
				"\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"+
				"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
			return
		}
		_, _ = io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\""+upstreamPrefix+"-erroring\","+
			"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n"+
			"data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

// loggedRow waits for the request log's row of the answer r.
func (g *gateway) loggedRow(t *testing.T, r *result) metering.RequestRow {
	t.Helper()
	id := r.Header.Get("X-Switchyard-Request-Id")
	require.NotEmpty(t, id)
	var row metering.RequestRow
	require.Eventually(t, func() bool {
		for _, got := range g.requestLog(t, url.Values{"limit": {"50"}}).Requests {
			if got.RequestID == id {
				row = got
				return true
			}
		}
		return false
	}, waitShort, pollEvery, "request %s never reached the request log", id)
	return row
}

// A silent first candidate that uses up the model's whole deadline leaves no time for the
// next: the client is told its request's time ran out (504, the family's timeout error),
// not that no candidate was available, and the request log says the same.
func TestARequestWhoseDeadlineRanOutIsToldSo(t *testing.T) {
	g := outcomeGateway(t)
	for _, c := range []struct {
		fam, path, body, errType string
	}{
		{"a", "/v1/chat/completions", `{"model":"deadline-a","messages":[{"role":"user","content":"hi"}]}`, ""},
		{"b", "/v1/messages", `{"model":"deadline-b","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, "timeout_error"},
	} {
		t.Run(c.fam, func(t *testing.T) {
			r := g.bounded(t, "POST", c.path, c.body, "anthropic-version", v1)
			e := envelope(t, r, c.fam, http.StatusGatewayTimeout)
			assert.Contains(t, e.Get("message").Str, "time ran out")
			assert.NotContains(t, e.Get("message").Str, "no candidate available")
			if c.errType != "" {
				assert.Equal(t, c.errType, e.Get("type").Str)
			} else {
				assert.Equal(t, "request_deadline_exceeded", e.Get("code").Str)
			}
			assert.Empty(t, r.Header.Get("Retry-After"), "no cooldown to wait out: the candidates are not the cause")
			g.assertNoLeak(t, r)

			row := g.loggedRow(t, r)
			assert.Equal(t, metering.OutcomeFailed, row.Outcome)
			assert.Equal(t, http.StatusGatewayTimeout, row.Status)
			require.Len(t, row.Tries, 1, "no time was left for the second candidate")
			assert.Equal(t, "silent", row.Tries[0].Candidate)
			assert.Equal(t, "deadline", row.Tries[0].Reason)
		})
	}
	assert.Empty(t, g.up.seenFor(upstreamPrefix+"-good-after-deadline"), "the healthy candidate was never called")
}

// A stream that reached the client and then ended in an error event is not logged as a
// served answer: the request log's outcome is stream_error, the serving attempt says why,
// and the client's last event is the family's error event saying what happened.
func TestAStreamEndedByAnErrorEventIsToldSo(t *testing.T) {
	g := outcomeGateway(t)
	for _, c := range []struct {
		name, model, fam, end string
		// gatewayEvent: the last event is the gateway's own, whose message contains this.
		gatewayEvent string
	}{
		{"malformed event, Family A", "malformed", "a", "malformed_event", "malformed event"},
		{"malformed event, Family B", "malformed", "b", "malformed_event", "malformed event"},
		{"cut, Family A", "cut-stream", "a", "interrupted", "interrupted"},
		{"cut, Family B", "cut-stream", "b", "interrupted", "interrupted"},
		{"upstream error event, Family A", "erroring", "a", "upstream_error", ""},
		{"upstream error event, Family B", "erroring", "b", "upstream_error", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, body := "/v1/chat/completions", `{"model":"`+c.model+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if c.fam == "b" {
				path, body = "/v1/messages", `{"model":"`+c.model+`","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			}
			r := g.bounded(t, "POST", path, body, "anthropic-version", v1)
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			g.assertNoLeak(t, r)
			events := parseSSE(t, r.Body)
			require.NotEmpty(t, events)
			last := events[len(events)-1]
			var message string
			if c.fam == "b" {
				require.Equal(t, "error", last.Name, "%s", r.Body)
				assert.Equal(t, "error", gjson.Get(last.Data, "type").Str)
				message = gjson.Get(last.Data, "error.message").Str
			} else {
				require.True(t, gjson.Get(last.Data, "error").IsObject(), "the last event is an error: %s", r.Body)
				message = gjson.Get(last.Data, "error.message").Str
			}
			if c.gatewayEvent != "" {
				assert.Contains(t, message, c.gatewayEvent, "the error event says what happened")
			} else {
				assert.NotContains(t, message, "interrupted", "the upstream's own error is passed on as it came")
			}

			row := g.loggedRow(t, r)
			assert.Equal(t, metering.OutcomeStreamError, row.Outcome, "not logged as served")
			assert.Equal(t, http.StatusOK, row.Status, "what the client got on the wire")
			require.NotEmpty(t, row.Tries)
			assert.Equal(t, c.end, row.Tries[len(row.Tries)-1].StreamError)
		})
	}
	// The upstream's own error event is passed on, not held against its candidate: what
	// it says may be the request's doing, and no client may move a candidate's health.
	g.assertNoCircuitOpen(t, "erroring", true)
	// A stream served whole is still served.
	r := g.bounded(t, "POST", "/v1/chat/completions", `{"model":"malformed","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, metering.OutcomeServed, g.loggedRow(t, r).Outcome)
}
