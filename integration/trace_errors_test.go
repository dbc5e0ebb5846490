package integration

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// With the documented `tracing` and `handle_errors { switchyard_errors }`, the server
// span of an error answer carries the status the client got, and is an error for a 5xx
// only (OpenTelemetry's HTTP conventions for server spans), so an error rate built from
// spans counts the gateway's refusals. A key the client put in its URL or its user agent
// is in no span: the path is masked as the access log masks it.
func TestTracesTellErrorAnswersByTheirStatus(t *testing.T) {
	rc := exportTracesTo(t)

	up := newUpstream(t)
	const rpmKey = "sk-rpm-one-0123456789abcdef"
	store := storeOption(t, "")
	ports, _ := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n" +
			"\t\tkey test " + testKey + "\n" +
			"\t\tkey one-a-minute " + rpmKey + " {\n\t\t\trpm 1\n\t\t}\n" +
			store + standardModels(up) + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n\ttracing {\n\t\tspan gateway\n\t}\n" +
			"\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), up: up}
	g.waitReady(t)

	keyedAgent := "my-tool/1.0 (key=" + testKey + ")"
	cases := []struct {
		name, path, body string
		headers          []string
		status           int
	}{
		{"served", "/v1/chat/completions", chatBody, nil, 200},
		{"bad body", "/v1/chat/completions", `{"model":"chat-a","messages":[]`, nil, 400},
		{"wrong key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer sk-not-a-key-00000000000000"}, 401},
		{"unknown model", "/v1/chat/completions", `{"model":"no-such-model","messages":[]}`, nil, 404},
		{"key in the path", "/v1/" + testKey + "/chat/completions", chatBody, []string{"User-Agent", keyedAgent}, 404},
		{"key in the path, Family B", "/v1/" + testKey + "/messages", messagesBody, []string{"anthropic-version", v1}, 404},
		{"key in the path, no key header", "/v1/" + testKey + "/chat/completions", chatBody, []string{"Authorization", ""}, 401},
		{"rate limited, admitted", "/v1/responses", responsesBody, []string{"Authorization", "Bearer " + rpmKey}, 200},
		{"rate limited", "/v1/responses", responsesBody, []string{"Authorization", "Bearer " + rpmKey}, 429},
		{"protocol not offered", "/v1/chat/completions", `{"model":"msg-b","messages":[]}`, []string{"User-Agent", keyedAgent}, 503},
	}
	calls := make([]tracedCall, len(cases))
	for i, c := range cases {
		calls[i] = tracedCall{strings.Repeat(strconv.Itoa(i%10), 31) + "a", strings.Repeat(strconv.Itoa(i%10), 15) + "b"}
		r := g.call(t, "POST", c.path, c.body, append([]string{"traceparent", calls[i].header()}, c.headers...)...)
		require.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body)
	}
	for i, c := range cases {
		attempts := 0
		if c.status == 200 {
			attempts = 1
		}
		tree := rc.waitForTrace(t, calls[i], attempts)
		a := attrs(tree.server)
		assert.Equal(t, strconv.Itoa(c.status), a["http.response.status_code"], "%s: the server span's status", c.name)
		want := tracepb.Status_STATUS_CODE_UNSET
		if c.status >= 500 {
			want = tracepb.Status_STATUS_CODE_ERROR
		}
		assert.Equal(t, want, tree.server.Status.GetCode(), "%s: the server span's span status", c.name)
		if c.status >= 400 {
			assert.Equal(t, strconv.Itoa(c.status), attrs(tree.gateway)["error.type"], "%s: the gateway's span", c.name)
		}
		if strings.Contains(c.path, testKey) {
			assert.Contains(t, a["url.path"], "/v1/REDACTED/", "%s: the path is recorded, masked", c.name)
		}
		if slices.Contains(c.headers, keyedAgent) {
			assert.Equal(t, "my-tool/1.0 (key=REDACTED)", a["user_agent.original"], "%s: the user agent is recorded, masked", c.name)
		}
	}

	// Not in any span's name, attributes or events, nor anywhere in the exported bytes.
	rc.mu.Lock()
	spans := append([]*tracepb.Span(nil), rc.spans...)
	rc.mu.Unlock()
	require.NotEmpty(t, spans)
	for _, s := range spans {
		assert.NotContains(t, s.Name, testKey, "a span's name")
		for k, v := range attrs(s) {
			assert.NotContains(t, v, strings.TrimPrefix(testKey, "sk-"), "span %q attribute %s", s.Name, k)
		}
	}
	up.assertNoLeakIn(t, "the exported spans", rc.exported(), rpmKey, "sk-not-a-key", strings.TrimPrefix(testKey, "sk-"))
}
