package integration

// The official JavaScript SDKs (npm openai 7.x and @anthropic-ai/sdk 1.x) against the
// gateway, from clients/sdks.mjs. The script is configured only through each SDK's own
// environment variables, exactly as docs/clients.md tells a user to do.

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// sdkOutcome is one line of what sdks.mjs printed.
// outcomesOf reads what a client script printed, one JSON outcome a line, by its case.
func outcomesOf[T any](t *testing.T, script, stdout string, caseOf func(T) string) map[string]T {
	t.Helper()
	out := map[string]T{}
	for line := range strings.Lines(stdout) {
		var o T
		require.NoError(t, json.Unmarshal([]byte(line), &o), "%s printed %q", script, line)
		out[caseOf(o)] = o
	}
	return out
}

type sdkOutcome struct {
	Case      string          `json:"case"`
	Model     string          `json:"model"`
	Models    []string        `json:"models"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Usage     json.RawMessage `json:"usage"`
	IDs       []string        `json:"ids"`
	Error     string          `json:"error"`
	Status    any             `json:"status"`
}

func TestJavaScriptSDKs(t *testing.T) {
	k := needClients(t)
	g := startGateway(t)
	proxy := startRefusingProxy(t)
	box := k.newSandbox(t, proxy,
		"OPENAI_BASE_URL="+g.base+"/v1", "OPENAI_API_KEY="+testKey,
		"ANTHROPIC_BASE_URL="+g.base, "ANTHROPIC_API_KEY="+testKey,
		"SY_OPENAI_MODEL=chat-a", "SY_ANTHROPIC_MODEL=msg-b",
	)
	run := box.run(t, clientRunTimeout, k.node, k.clients+"/sdks.mjs")
	require.Equal(t, 0, run.exit, "sdks.mjs failed:\n%s", run)
	g.assertHidden(t, run.stdout)
	assert.Empty(t, proxy.seen(), "the SDKs tried to reach something other than the gateway")

	outcomes := outcomesOf(t, "sdks.mjs", run.stdout, func(o sdkOutcome) string { return o.Case })

	// check looks up a case and fails the subtest if the SDK call raised.
	check := func(t *testing.T, name string) sdkOutcome {
		t.Helper()
		o, ok := outcomes[name]
		require.True(t, ok, "sdks.mjs did not report %q:\n%s", name, run)
		require.Empty(t, o.Error, "the SDK raised (HTTP status %v)", o.Status)
		return o
	}
	answered := func(t *testing.T, o sdkOutcome, model string) {
		t.Helper()
		assert.Equal(t, simulator.ReplyText, o.Text, "the answer text")
		if o.Models != nil {
			assert.Equal(t, []string{model}, o.Models, "the model id in every streamed event")
		} else {
			assert.Equal(t, model, o.Model, "the echoed model id")
		}
	}
	usage := func(t *testing.T, o sdkOutcome, paths ...string) {
		t.Helper()
		u := gjson.ParseBytes(o.Usage)
		for _, p := range paths {
			assert.Positive(t, u.Get(p).Int(), "usage.%s in %s", p, o.Usage)
		}
	}
	listed := func(t *testing.T, o sdkOutcome) {
		t.Helper()
		for _, id := range []string{"chat-a", "msg-b", "Both-AB"} {
			assert.True(t, slices.Contains(o.IDs, id), "models.list() lacks %s: %v", id, o.IDs)
		}
	}

	t.Run("openai chat", func(t *testing.T) {
		o := check(t, "openai chat")
		answered(t, o, "chat-a")
		usage(t, o, "prompt_tokens", "completion_tokens", "completion_tokens_details.reasoning_tokens")
	})
	t.Run("openai chat stream", func(t *testing.T) {
		o := check(t, "openai chat stream")
		answered(t, o, "chat-a")
		usage(t, o, "prompt_tokens", "completion_tokens")
	})
	t.Run("openai responses", func(t *testing.T) {
		o := check(t, "openai responses")
		answered(t, o, "chat-a")
		usage(t, o, "input_tokens", "output_tokens", "output_tokens_details.reasoning_tokens")
	})
	t.Run("openai responses stream", func(t *testing.T) {
		o := check(t, "openai responses stream")
		answered(t, o, "chat-a")
		usage(t, o, "input_tokens", "output_tokens")
	})
	t.Run("openai models", func(t *testing.T) { listed(t, check(t, "openai models")) })

	t.Run("anthropic messages", func(t *testing.T) {
		o := check(t, "anthropic messages")
		answered(t, o, "msg-b")
		usage(t, o, "input_tokens", "output_tokens")
	})
	t.Run("anthropic messages stream", func(t *testing.T) {
		o := check(t, "anthropic messages stream")
		answered(t, o, "msg-b")
		usage(t, o, "input_tokens", "output_tokens")
	})
	for _, name := range []string{"anthropic messages thinking", "anthropic messages thinking stream"} {
		t.Run(name, func(t *testing.T) {
			o := check(t, name)
			answered(t, o, "msg-b")
			assert.NotEmpty(t, o.Thinking, "the thinking text")
			assert.NotEmpty(t, o.Signature, "the thinking block's signature")
			usage(t, o, "input_tokens", "output_tokens")
		})
	}
	t.Run("anthropic count_tokens", func(t *testing.T) {
		usage(t, check(t, "anthropic count_tokens"), "input_tokens")
	})
	t.Run("anthropic models", func(t *testing.T) { listed(t, check(t, "anthropic models")) })

	// What reached the upstream: the upstream model names, the candidate's credential in
	// each family's own header, the SDKs' headers forwarded, never the gateway key.
	t.Run("upstream requests", func(t *testing.T) {
		g.up.mu.Lock()
		seen := append([]seenRequest(nil), g.up.requests...)
		g.up.mu.Unlock()
		paths := map[string]int{}
		for _, r := range seen {
			paths[r.Path]++
			for name, values := range r.Header {
				assert.NotContains(t, strings.Join(values, ","), testKey, "the gateway key reached the upstream in %s", name)
			}
			body := gjson.ParseBytes(r.Body)
			switch r.Path {
			case "/v1/chat/completions", "/v1/responses":
				assert.Equal(t, upstreamPrefix+"-a", body.Get("model").String(), r.Path)
				assert.Equal(t, "Bearer "+upstreamCred, r.Header.Get("Authorization"), r.Path)
				assert.True(t, strings.HasPrefix(r.Header.Get("User-Agent"), "OpenAI/JS 7.57.0"), "User-Agent %q", r.Header.Get("User-Agent"))
			case "/v1/messages", "/v1/messages/count_tokens":
				assert.Equal(t, upstreamPrefix+"-b", body.Get("model").String(), r.Path)
				assert.Equal(t, upstreamCred, r.Header.Get("X-Api-Key"), r.Path)
				assert.Empty(t, r.Header.Get("Authorization"), r.Path)
				assert.Equal(t, "2026-10-21", r.Header.Get("Anthropic-Version"), "the SDK's anthropic-version, forwarded")
			default:
				t.Errorf("unexpected upstream request %s %s", r.Method, r.Path)
			}
		}
		assert.Equal(t, map[string]int{
			"/v1/chat/completions":      2,
			"/v1/responses":             2,
			"/v1/messages":              4,
			"/v1/messages/count_tokens": 1,
		}, paths, "one upstream request per SDK call (models lists are answered by the gateway)")
	})
}
