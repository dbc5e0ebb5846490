package integration

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

const (
	chatBody      = `{"model":"chat-a","messages":[{"role":"user","content":"hi"}]}`
	responsesBody = `{"model":"chat-a","input":"hi"}`
	messagesBody  = `{"model":"msg-b","max_tokens":256,"messages":[{"role":"user","content":"hi"}]}`
	v1            = "2023-06-01"
)

// familyA asserts the Family A error envelope and returns its error object.
func familyA(t *testing.T, r *result, status int, errType string) gjson.Result {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	e := gjson.GetBytes(r.Body, "error")
	require.True(t, e.IsObject(), "Family A envelope expected, got %s", r.Body)
	assert.Equal(t, errType, e.Get("type").Str)
	assert.NotEmpty(t, e.Get("message").Str)
	assert.True(t, e.Get("param").Exists() && e.Get("code").Exists(), "param and code are always present: %s", r.Body)
	assert.False(t, gjson.GetBytes(r.Body, "type").Exists(), "not a Family B envelope")
	return e
}

// familyB asserts the Family B error envelope and returns its error object.
func familyB(t *testing.T, r *result, status int, errType string) gjson.Result {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, "error", gjson.GetBytes(r.Body, "type").Str, "Family B envelope expected, got %s", r.Body)
	e := gjson.GetBytes(r.Body, "error")
	assert.Equal(t, errType, e.Get("type").Str)
	assert.NotEmpty(t, e.Get("message").Str)
	return e
}

func TestKeysOnEveryEndpoint(t *testing.T) {
	g := startGateway(t)
	calls := []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", chatBody},
		{"POST", "/v1/responses", responsesBody},
		{"GET", "/v1/models", ""},
		{"POST", "/v1/messages", messagesBody},
	}
	for _, c := range calls {
		t.Run(c.path, func(t *testing.T) {
			before := g.up.count()
			// Missing, wrong: 401 in the Family A envelope, /v1/messages included.
			r := g.call(t, c.method, c.path, c.body, "anthropic-version", v1, "Authorization", "")
			familyA(t, r, 401, "authentication_error")
			r = g.call(t, c.method, c.path, c.body, "anthropic-version", v1, "x-api-key", "sk-wrong-key-0000000000000")
			e := familyA(t, r, 401, "authentication_error")
			assert.Equal(t, "invalid_api_key", e.Get("code").Str)
			assert.NotContains(t, string(r.Body), "sk-wrong-key")
			assert.Equal(t, before, g.up.count(), "a bad key reaches no upstream")

			// Both header styles work.
			r = g.call(t, c.method, c.path, c.body, "anthropic-version", v1, "Authorization", "Bearer "+testKey)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			r = g.call(t, c.method, c.path, c.body, "anthropic-version", v1, "x-api-key", testKey)
			require.Equal(t, 200, r.Status, "%s", r.Body)
			assert.NotEmpty(t, r.Header.Get("X-Switchyard-Request-Id"))
			g.assertNoLeak(t, r)
		})
	}
}

// Every response carries X-Switchyard-Request-Id, errors of every kind included, each
// with an id of its own.
func TestEveryResponseCarriesARequestID(t *testing.T) {
	g := startGateway(t)
	cases := []struct {
		name, method, path, body string
		status                   int
		headers                  []string
	}{
		{"served", "POST", "/v1/chat/completions", chatBody, 200, nil},
		{"served, streamed", "POST", "/v1/messages", `{"model":"msg-b","max_tokens":64,"stream":true,"messages":[]}`, 200, []string{"anthropic-version", v1}},
		{"no key", "POST", "/v1/chat/completions", chatBody, 401, []string{"Authorization", ""}},
		{"wrong key", "POST", "/v1/messages", messagesBody, 401, []string{"x-api-key", "sk-wrong-key-0000000000000", "anthropic-version", v1}},
		{"key in the query", "GET", "/v1/models?api_key=" + testKey, "", 400, nil},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"nope","messages":[]}`, 404, nil},
		{"unknown path (the catch-all)", "GET", "/v1/no-such-thing", "", 404, nil},
		{"not a path of the API at all", "GET", "/", "", 404, nil},
		{"bad JSON", "POST", "/v1/chat/completions", `{"model":`, 400, nil},
		{"invalid request", "POST", "/v1/messages", `{"model":"msg-b","messages":[]}`, 400, []string{"anthropic-version", v1}},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, nil},
		{"compressed body", "POST", "/v1/chat/completions", chatBody, 415, []string{"Content-Encoding", "gzip"}},
		{"stateful operation", "GET", "/v1/responses/resp_123", "", 501, nil},
		{"protocol the model lacks", "POST", "/v1/chat/completions", `{"model":"msg-b","messages":[]}`, 503, nil},
		{"every candidate failed", "POST", "/v1/chat/completions", `{"model":"all-down","messages":[]}`, 503, nil},
		{"the upstream's client error", "POST", "/v1/chat/completions", `{"model":"client-error","messages":[]}`, 400, nil},
	}
	seen := map[string]string{}
	for _, c := range cases {
		r := g.call(t, c.method, c.path, c.body, c.headers...)
		if !assert.Equal(t, c.status, r.Status, "%s: %s", c.name, r.Body) {
			continue
		}
		id := r.Header.Get("X-Switchyard-Request-Id")
		assert.Regexp(t, `^sy_[0-9a-f]{24}$`, id, "%s: the request id", c.name)
		if other, dup := seen[id]; dup {
			t.Errorf("%s has the request id of %s: %s", c.name, other, id)
		}
		seen[id] = c.name
	}
}

func TestModelResolution(t *testing.T) {
	g := startGateway(t)

	t.Run("unknown model is 404 in each family's envelope", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"nope","messages":[]}`)
		e := familyA(t, r, 404, "invalid_request_error")
		assert.Contains(t, e.Get("message").Str, "GET /v1/models")
		r = g.call(t, "POST", "/v1/messages", `{"model":"nope","max_tokens":5,"messages":[]}`, "anthropic-version", v1)
		e = familyB(t, r, 404, "not_found_error")
		assert.Contains(t, e.Get("message").Str, "GET /v1/models")
	})
	t.Run("the match is exact and case-sensitive", func(t *testing.T) {
		for _, id := range []string{"Chat-A", "CHAT-A", "chat-a ", "both-ab"} {
			r := g.call(t, "POST", "/v1/chat/completions", `{"model":"`+id+`","messages":[]}`)
			familyA(t, r, 404, "invalid_request_error")
		}
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"Both-AB","messages":[]}`)
		assert.Equal(t, 200, r.Status)
	})
	t.Run("missing model and bad JSON are 400", func(t *testing.T) {
		before := g.up.count()
		familyA(t, g.call(t, "POST", "/v1/chat/completions", `{"messages":[]}`), 400, "invalid_request_error")
		familyA(t, g.call(t, "POST", "/v1/chat/completions", `{"model":`), 400, "invalid_request_error")
		familyA(t, g.call(t, "POST", "/v1/responses", `["chat-a"]`), 400, "invalid_request_error")
		familyB(t, g.call(t, "POST", "/v1/messages", `{"model":7,"max_tokens":5,"messages":[]}`, "anthropic-version", v1), 400, "invalid_request_error")
		assert.Equal(t, before, g.up.count())
	})
	t.Run("a model lacking the ingress protocol is 503 from memory", func(t *testing.T) {
		before := g.up.count()
		r := g.call(t, "POST", "/v1/messages", `{"model":"chat-a","max_tokens":5,"messages":[]}`, "anthropic-version", v1)
		e := familyB(t, r, 503, "overloaded_error")
		assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
		assert.Equal(t, "false", r.Header.Get("X-Should-Retry"), "SDKs must not retry a protocol mismatch")

		r = g.call(t, "POST", "/v1/chat/completions", `{"model":"msg-b","messages":[]}`)
		e = familyA(t, r, 503, "service_unavailable")
		assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
		r = g.call(t, "POST", "/v1/responses", `{"model":"msg-b","input":"x"}`)
		familyA(t, r, 503, "service_unavailable")
		assert.Equal(t, before, g.up.count())
	})
	t.Run("a key limited to some models does not see the others", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/messages", messagesBody, "anthropic-version", v1, "x-api-key", limitedKey)
		familyB(t, r, 404, "not_found_error")
		r = g.call(t, "POST", "/v1/chat/completions", chatBody, "x-api-key", limitedKey)
		assert.Equal(t, 200, r.Status)
		r = g.call(t, "GET", "/v1/models", "", "x-api-key", limitedKey)
		ids := gjson.GetBytes(r.Body, "data.#.id").Array()
		require.Len(t, ids, 1)
		assert.Equal(t, "chat-a", ids[0].Str)
	})
}

func TestFamilyBValidation(t *testing.T) {
	g := startGateway(t)
	cases := map[string]struct {
		body    string
		headers []string
	}{
		"no version header":         {messagesBody, nil},
		"version not a date":        {messagesBody, []string{"anthropic-version", "latest"}},
		"max_tokens missing":        {`{"model":"msg-b","messages":[]}`, []string{"anthropic-version", v1}},
		"max_tokens zero":           {`{"model":"msg-b","max_tokens":0,"messages":[]}`, []string{"anthropic-version", v1}},
		"max_tokens fractional":     {`{"model":"msg-b","max_tokens":1.5,"messages":[]}`, []string{"anthropic-version", v1}},
		"messages missing":          {`{"model":"msg-b","max_tokens":5}`, []string{"anthropic-version", v1}},
		"stream not boolean":        {`{"model":"msg-b","max_tokens":5,"messages":[],"stream":"yes"}`, []string{"anthropic-version", v1}},
		"thinking budget too small": {`{"model":"msg-b","max_tokens":4096,"messages":[],"thinking":{"type":"enabled","budget_tokens":512}}`, []string{"anthropic-version", v1}},
		"thinking budget = max":     {`{"model":"msg-b","max_tokens":2048,"messages":[],"thinking":{"type":"enabled","budget_tokens":2048}}`, []string{"anthropic-version", v1}},
		"thinking budget missing":   {`{"model":"msg-b","max_tokens":2048,"messages":[],"thinking":{"type":"enabled"}}`, []string{"anthropic-version", v1}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			familyB(t, g.call(t, "POST", "/v1/messages", c.body, c.headers...), 400, "invalid_request_error")
		})
	}
	assert.Equal(t, 0, g.up.count(), "invalid requests reach no upstream")

	ok := g.call(t, "POST", "/v1/messages", `{"model":"msg-b","max_tokens":4096,"messages":[{"role":"user","content":"hi"}],"thinking":{"type":"enabled","budget_tokens":1024}}`, "family-b-version", "2026-10-21")
	require.Equal(t, 200, ok.Status, "%s", ok.Body)
	assert.Equal(t, "thinking", gjson.GetBytes(ok.Body, "content.0.type").Str)
	assert.Equal(t, "2026-10-21", g.up.last(t).Header.Get("Anthropic-Version"), "the spec's header name is forwarded as the native one")
}

func TestResponsesStatefulOperations(t *testing.T) {
	g := startGateway(t)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/responses/resp_123"},
		{"DELETE", "/v1/responses/resp_123"},
		{"POST", "/v1/responses/resp_123/cancel"},
		{"GET", "/v1/responses/resp_123/input_items"},
	} {
		r := g.call(t, c.method, c.path, "")
		familyA(t, r, 501, "server_error")
		assert.Equal(t, "false", r.Header.Get("X-Should-Retry"), "SDKs must not retry an operation that is not offered")
	}
	ws := g.call(t, "GET", "/v1/responses", "", "Upgrade", "websocket", "Connection", "Upgrade")
	familyA(t, ws, 501, "server_error")

	for field, body := range map[string]string{
		"background":           `{"model":"chat-a","input":"x","background":true}`,
		"previous_response_id": `{"model":"chat-a","input":"x","previous_response_id":"resp_1"}`,
		"conversation":         `{"model":"chat-a","input":"x","conversation":{"id":"conv_1"}}`,
	} {
		e := familyA(t, g.call(t, "POST", "/v1/responses", body), 400, "invalid_request_error")
		assert.Equal(t, field, e.Get("param").Str)
	}
	assert.Equal(t, 0, g.up.count())
}

func TestSubOperationsRouteLikeTheirParent(t *testing.T) {
	g := startGateway(t)
	r := g.call(t, "POST", "/v1/responses/input_tokens", `{"model":"chat-a","input":"hello"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Positive(t, gjson.GetBytes(r.Body, "input_tokens").Int())
	assert.Equal(t, "/v1/responses/input_tokens", g.up.last(t).Path)

	r = g.call(t, "POST", "/v1/responses/compact", `{"model":"chat-a","input":"hello"}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "response.compaction", gjson.GetBytes(r.Body, "object").Str)

	r = g.call(t, "POST", "/v1/messages/count_tokens", `{"model":"msg-b","messages":[{"role":"user","content":"hello"}]}`, "anthropic-version", v1)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Positive(t, gjson.GetBytes(r.Body, "input_tokens").Int())
	assert.Equal(t, "/v1/messages/count_tokens", g.up.last(t).Path)

	r = g.call(t, "POST", "/v1/messages/count_tokens", `{"model":"chat-a","messages":[]}`, "anthropic-version", v1)
	familyB(t, r, 503, "overloaded_error")
	g.assertNoLeak(t, r)
}

func TestUpstreamRequestIsTheClientsWithOnlyModelChanged(t *testing.T) {
	g := startGateway(t)
	// Odd spacing, key order and unicode must survive byte for byte.
	body := `{ "messages" : [{"role":"user","content":"the model is \"chat-a\" — ünïcode"}],` + "\n" +
		`  "model":"msg-b",  "max_tokens": 64, "metadata":{"model":"keep-me"}, "stream" :false }`
	r := g.call(t, "POST", "/v1/messages?beta=true", body,
		"anthropic-version", v1,
		"x-api-key", testKey,
		"anthropic-beta", "interleaved-thinking-2025-05-14,context-management-2025-06-27",
		"OpenAI-Organization", "org-client-own",
		"X-Claude-Code-Session-Id", "sess-1",
		"Accept-Encoding", "gzip, br")
	require.Equal(t, 200, r.Status, "%s", r.Body)

	seen := g.up.last(t)
	want := strings.Replace(body, `"model":"msg-b"`, `"model":"`+upstreamPrefix+`-b"`, 1)
	assert.Equal(t, want, string(seen.Body), "only the top-level model value may change")
	assert.Equal(t, "beta=true", seen.RawQuery, "the query string is forwarded unchanged")
	assert.Equal(t, "/v1/messages", seen.Path)
	assert.Equal(t, upstreamCred, seen.Header.Get("X-Api-Key"), "the candidate's credential, in the family's native header")
	assert.Empty(t, seen.Header.Get("Authorization"))
	assert.Empty(t, seen.Header.Get("OpenAI-Organization"))
	assert.Equal(t, "interleaved-thinking-2025-05-14,context-management-2025-06-27", seen.Header.Get("Anthropic-Beta"))
	assert.Equal(t, "sess-1", seen.Header.Get("X-Claude-Code-Session-Id"))
	assert.Equal(t, v1, seen.Header.Get("Anthropic-Version"))
	assert.Equal(t, "identity", seen.Header.Get("Accept-Encoding"))
	for name, values := range seen.Header {
		for _, v := range values {
			assert.NotContains(t, v, testKey, "the gateway key reached the upstream in %s", name)
		}
	}

	// Family A: Bearer credential, the version segment of the base URL is not doubled.
	r = g.call(t, "POST", "/v1/chat/completions", chatBody, "x-api-key", testKey, "OpenAI-Project", "proj_client")
	require.Equal(t, 200, r.Status)
	seen = g.up.last(t)
	assert.Equal(t, "/v1/chat/completions", seen.Path)
	assert.Equal(t, "Bearer "+upstreamCred, seen.Header.Get("Authorization"))
	assert.Empty(t, seen.Header.Get("X-Api-Key"))
	assert.Empty(t, seen.Header.Get("OpenAI-Project"))
}

func TestJSONResponsesEchoTheServiceModel(t *testing.T) {
	g := startGateway(t)
	for _, c := range []struct {
		path, body string
		headers    []string
	}{
		{"/v1/chat/completions", chatBody, nil},
		{"/v1/responses", responsesBody, nil},
		{"/v1/messages", messagesBody, []string{"anthropic-version", v1}},
	} {
		r := g.call(t, "POST", c.path, c.body, c.headers...)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		m := r.json(t)
		assert.Equal(t, gjson.Get(c.body, "model").Str, m["model"], c.path)
		assert.Contains(t, string(r.Body), simulator.ReplyText)
		assert.Equal(t, r.Header.Get("Content-Length"), strconv.Itoa(len(r.Body)), "exact length after the rewrite")
		g.assertNoLeak(t, r)
	}
}

func TestStreamsEchoTheServiceModelInEveryEvent(t *testing.T) {
	g := startGateway(t)

	t.Run("chat completions", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"chat-a","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.Status)
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		assert.Equal(t, "[DONE]", events[len(events)-1].Data)
		var text strings.Builder
		for _, ev := range events[:len(events)-1] {
			assert.Equal(t, "chat-a", gjson.Get(ev.Data, "model").Str)
			assert.NotEqual(t, "[]", gjson.Get(ev.Data, "choices").Raw, "the usage chunk the gateway asked for is removed")
			text.WriteString(gjson.Get(ev.Data, "choices.0.delta.content").Str)
		}
		assert.Equal(t, simulator.ReplyText, text.String())
		assert.True(t, gjson.GetBytes(g.up.last(t).Body, "stream_options.include_usage").Bool(), "the gateway asked upstream for usage")
		g.assertNoLeak(t, r)

		// A client that asked for usage gets its usage chunk.
		r = g.call(t, "POST", "/v1/chat/completions", `{"model":"chat-a","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
		events = parseSSE(t, r.Body)
		usage := events[len(events)-2]
		assert.Equal(t, "[]", gjson.Get(usage.Data, "choices").Raw)
		assert.Positive(t, gjson.Get(usage.Data, "usage.completion_tokens").Int())
		assert.Equal(t, "chat-a", gjson.Get(usage.Data, "model").Str)
	})

	t.Run("responses", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/responses", `{"model":"chat-a","stream":true,"input":"hi","reasoning":{"effort":"low","summary":"auto"},"include":["reasoning.encrypted_content"]}`)
		require.Equal(t, 200, r.Status)
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		withModel := 0
		for _, ev := range events {
			require.NotEmpty(t, ev.Name, "event: lines are kept")
			assert.Equal(t, ev.Name, gjson.Get(ev.Data, "type").Str)
			if m := gjson.Get(ev.Data, "response.model"); m.Exists() {
				withModel++
				assert.Equal(t, "chat-a", m.Str)
			}
		}
		assert.GreaterOrEqual(t, withModel, 2)
		assert.Equal(t, "response.completed", events[len(events)-1].Name)
		sent := g.up.last(t).Body
		assert.Equal(t, `["reasoning.encrypted_content"]`, gjson.GetBytes(sent, "include").Raw, "responses-only options pass through")
		assert.Equal(t, "auto", gjson.GetBytes(sent, "reasoning.summary").Str)
		g.assertNoLeak(t, r)
	})

	t.Run("messages", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/messages", `{"model":"msg-b","max_tokens":4096,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", v1)
		require.Equal(t, 200, r.Status)
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		assert.Equal(t, "message_start", events[0].Name)
		assert.Equal(t, "msg-b", gjson.Get(events[0].Data, "message.model").Str)
		assert.Equal(t, "message_stop", events[len(events)-1].Name)
		for _, ev := range events {
			require.NotEmpty(t, ev.Name, "every Family B frame keeps its event: line")
		}
		g.assertNoLeak(t, r)
	})
}

// The first event reaches the client while the upstream is still holding back the rest:
// it arrives alone, and the next arrives about one of the upstream's pauses (500 ms, model
// drip-a) later. The figure is the upstream's pacing, not a wall-clock limit on the gateway.
func TestFirstEventIsNotHeldBack(t *testing.T) {
	const drip = 500 * time.Millisecond
	g := startGateway(t)
	for _, c := range []struct {
		path, body string
		headers    []string
	}{
		{"/v1/chat/completions", `{"model":"drip-a","stream":true,"messages":[]}`, nil},
		{"/v1/messages", `{"model":"drip-a","max_tokens":64,"stream":true,"messages":[]}`, []string{"anthropic-version", v1}},
	} {
		req, err := http.NewRequest("POST", g.base+c.path, strings.NewReader(c.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testKey)
		for i := 0; i+1 < len(c.headers); i += 2 {
			req.Header.Set(c.headers[i], c.headers[i+1])
		}
		resp, err := boundedClient.Do(req)
		require.NoError(t, err)
		buf := make([]byte, 64<<10)
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		firstAt := time.Now()
		first := string(buf[:n])
		assert.Equal(t, 1, strings.Count(first, "data: "), "%s: the first read holds the first event alone: %q", c.path, first)
		assert.NotContains(t, first, simulator.ReplyText, "only the start of the stream can have arrived")
		_, err = resp.Body.Read(buf)
		require.NoError(t, err)
		gap := time.Since(firstAt)
		t.Logf("%s: the second event came %v after the first (the upstream pauses %v)", c.path, gap.Round(time.Millisecond), drip)
		assert.GreaterOrEqual(t, gap, drip/2, "%s: the first event was held back until the upstream sent more", c.path)
		resp.Body.Close()
	}
}

func TestFailoverBeforeTheFirstByte(t *testing.T) {
	g := startGateway(t)
	// failover-a: connection refused, 503, 429, in-band error, then a good candidate.
	for _, stream := range []bool{false, true} {
		body := `{"model":"failover-a","messages":[{"role":"user","content":"hi"}],"stream":` + boolStr(stream) + `}`
		r := g.call(t, "POST", "/v1/chat/completions", body)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Contains(t, string(r.Body), `"model":"failover-a"`)
		assert.NotContains(t, string(r.Body), "simulated", "nothing of a failed attempt reaches the client")
		g.assertNoLeak(t, r)
	}
	r := g.call(t, "POST", "/v1/responses", `{"model":"failover-a","input":"hi","stream":true}`)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "response.created", parseSSE(t, r.Body)[0].Name)

	// failover-b: 529, then an in-band `event: error`, then a good candidate.
	r = g.call(t, "POST", "/v1/messages", `{"model":"failover-b","max_tokens":64,"stream":true,"messages":[]}`, "anthropic-version", v1)
	require.Equal(t, 200, r.Status)
	events := parseSSE(t, r.Body)
	assert.Equal(t, "message_start", events[0].Name)
	assert.Equal(t, "failover-b", gjson.Get(events[0].Data, "message.model").Str)
	g.assertNoLeak(t, r)
}

func TestAllCandidatesFailed(t *testing.T) {
	g := startGateway(t)
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"all-down","messages":[]}`)
	e := familyA(t, r, 503, "service_unavailable")
	assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
	// The 500 candidate is not in cooldown after one failure: it may be retried at once.
	assert.Equal(t, "1", r.Header.Get("Retry-After"), "the soonest cooldown")
	g.assertNoLeak(t, r)

	r = g.call(t, "POST", "/v1/messages", `{"model":"all-down","max_tokens":5,"messages":[]}`, "anthropic-version", v1)
	e = familyB(t, r, 503, "overloaded_error")
	assert.Equal(t, "routing_no_available_channel", e.Get("code").Str)
	// Its only candidate answered 429 with retry-after: 2 and is in cooldown for that long.
	assert.Equal(t, "2", r.Header.Get("Retry-After"), "the soonest cooldown")
	g.assertNoLeak(t, r)
}

func TestUpstreamClientErrorsArePassedBackHidden(t *testing.T) {
	g := startGateway(t)
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"client-error","messages":[]}`)
	require.Equal(t, 400, r.Status)
	assert.Contains(t, gjson.GetBytes(r.Body, "error.message").Str, "client-error", "the upstream's message names the service model")
	g.assertNoLeak(t, r)

	r = g.call(t, "POST", "/v1/messages", `{"model":"client-error","max_tokens":5,"messages":[]}`, "anthropic-version", v1)
	familyB(t, r, 400, "invalid_request_error")
	g.assertNoLeak(t, r)
}

func TestStreamCutAfterTheFirstByteEndsWithANativeError(t *testing.T) {
	g := startGateway(t)
	r := g.call(t, "POST", "/v1/messages", `{"model":"cut-stream","max_tokens":64,"stream":true,"messages":[]}`, "anthropic-version", v1)
	require.Equal(t, 200, r.Status)
	events := parseSSE(t, r.Body)
	last := events[len(events)-1]
	assert.Equal(t, "error", last.Name)
	assert.Equal(t, "error", gjson.Get(last.Data, "type").Str)
	assert.NotEmpty(t, gjson.Get(last.Data, "error.type").Str)
	g.assertNoLeak(t, r)

	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"cut-stream","stream":true,"messages":[]}`)
	require.Equal(t, 200, r.Status)
	events = parseSSE(t, r.Body)
	assert.True(t, gjson.Get(events[len(events)-1].Data, "error").IsObject(), "chat streams end with an error object")
}

func TestModelsList(t *testing.T) {
	g := startGateway(t)
	r := g.call(t, "GET", "/v1/models", "")
	require.Equal(t, 200, r.Status)
	var list struct {
		Object  string `json:"object"`
		HasMore bool   `json:"has_more"`
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		Data    []struct {
			ID           string          `json:"id"`
			Object       string          `json:"object"`
			Type         string          `json:"type"`
			Created      int64           `json:"created"`
			CreatedAt    time.Time       `json:"created_at"`
			OwnedBy      string          `json:"owned_by"`
			DisplayName  string          `json:"display_name"`
			Protocols    []string        `json:"protocols"`
			Capabilities map[string]bool `json:"capabilities"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(r.Body, &list))
	assert.Equal(t, "list", list.Object)
	assert.False(t, list.HasMore)
	require.NotEmpty(t, list.Data)
	assert.Equal(t, list.Data[0].ID, list.FirstID)
	assert.Equal(t, list.Data[len(list.Data)-1].ID, list.LastID)
	byID := map[string]int{}
	for i, m := range list.Data {
		byID[m.ID] = i
		assert.Equal(t, "model", m.Object)
		assert.Equal(t, "model", m.Type)
		assert.Equal(t, m.Created, m.CreatedAt.Unix())
		assert.NotEmpty(t, m.DisplayName)
		assert.Contains(t, m.Capabilities, "reasoning")
	}
	assert.Equal(t, []string{"family_a"}, list.Data[byID["chat-a"]].Protocols)
	assert.Equal(t, []string{"family_b"}, list.Data[byID["msg-b"]].Protocols)
	assert.Equal(t, []string{"family_a", "family_b"}, list.Data[byID["Both-AB"]].Protocols)
	assert.True(t, list.Data[byID["chat-a"]].Capabilities["reasoning"])
	assert.Less(t, byID["chat-a"], byID["msg-b"], "declaration order")
	g.assertNoLeak(t, r)

	one := g.call(t, "GET", "/v1/models/msg-b", "")
	require.Equal(t, 200, one.Status)
	assert.Equal(t, "msg-b", gjson.GetBytes(one.Body, "id").Str)
	familyA(t, g.call(t, "GET", "/v1/models/none", ""), 404, "invalid_request_error")
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
