package integration

// Claude Code (npm @anthropic-ai/claude-code) against the gateway: `claude -p` with
// ANTHROPIC_BASE_URL at the gateway and ANTHROPIC_MODEL set to a service model, as the
// docs/clients.md's "Connect your tools" section sets it up.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// claudePrint runs `claude -p prompt` in a fresh sandbox with the given extra variables.
func claudePrint(t *testing.T, k *clientKit, g *gateway, proxy *refusingProxy, prompt string, vars ...string) clientRun {
	t.Helper()
	box := k.newSandbox(t, proxy, append([]string{
		"ANTHROPIC_BASE_URL=" + g.base,
		// Telemetry, error reporting, update checks and the like: without this Claude
		// Code tries api.anthropic.com a few times (refused by the proxy, but noisy).
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}, vars...)...)
	before := len(proxy.seen())
	run := box.run(t, clientRunTimeout, k.bin("claude"), "-p", prompt)
	assert.Equal(t, before, len(proxy.seen()), "Claude Code tried to reach something other than the gateway")
	return run
}

func TestClaudeCode(t *testing.T) {
	k := needClients(t)
	g := startGateway(t)
	proxy := startRefusingProxy(t)

	// Both ways Claude Code sends a key: ANTHROPIC_API_KEY as x-api-key,
	// ANTHROPIC_AUTH_TOKEN as Authorization: Bearer. The gateway takes either.
	for _, c := range []struct{ name, env, header, value string }{
		{"api key", "ANTHROPIC_API_KEY", "X-Api-Key", testKey},
		{"auth token", "ANTHROPIC_AUTH_TOKEN", "Authorization", "Bearer " + testKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := g.up.count()
			tap := startWiretap(t, g.base)
			run := claudePrint(t, k, &gateway{base: tap.url, up: g.up}, proxy, "Say hello.", c.env+"="+testKey, "ANTHROPIC_MODEL=msg-b")
			require.Equal(t, 0, run.exit, "claude -p failed:\n%s", run)
			// The variable decides the header Claude Code puts the key in, and the gateway
			// accepted the key from that header alone.
			other := map[string]string{"X-Api-Key": "Authorization", "Authorization": "X-Api-Key"}[c.header]
			var messages int
			for _, x := range tap.exchanges() {
				if x.method == "POST" && strings.HasPrefix(x.uri, "/v1/messages") {
					messages++
					assert.Equal(t, c.value, x.sent.Get(c.header), "the key in %s", c.header)
					assert.Empty(t, x.sent.Get(other), "no key in %s", other)
					assert.Equal(t, 200, x.status)
				}
			}
			require.Equal(t, 1, messages, "one messages request for one prompt")
			assert.Contains(t, run.stdout, simulator.ReplyText, "the answer Claude Code printed")
			g.assertHidden(t, run.stdout+run.stderr)

			require.Equal(t, before+1, g.up.count(), "one upstream request for one prompt")
			seen := g.assertUpstreamCredentialOnly(t)
			assert.Equal(t, "/v1/messages", seen.Path)
			assert.Equal(t, "beta=true", seen.RawQuery, "the query string forwarded")
			assert.Equal(t, upstreamCred, seen.Header.Get("X-Api-Key"), "the upstream's credential in its native header")
			assert.Empty(t, seen.Header.Get("Authorization"))
			assert.Equal(t, "2023-06-01", seen.Header.Get("Anthropic-Version"), "Claude Code's anthropic-version forwarded")
			betas := strings.Split(seen.Header.Get("Anthropic-Beta"), ",")
			assert.Contains(t, betas, "claude-code-20250219", "the anthropic-beta list forwarded")
			assert.Contains(t, betas, "interleaved-thinking-2025-05-14")
			assert.GreaterOrEqual(t, len(betas), 5, "the whole anthropic-beta list: %v", betas)
			assert.NotEmpty(t, seen.Header.Get("X-Claude-Code-Session-Id"), "the session header forwarded")

			body := gjson.ParseBytes(seen.Body)
			assert.Equal(t, upstreamPrefix+"-b", body.Get("model").String(), "the model rewritten to the upstream name")
			assert.True(t, body.Get("stream").Bool(), "Claude Code streams")
			assert.Equal(t, "adaptive", body.Get("thinking.type").String(), "adaptive thinking")
		})
	}

	// A model without Family B: the gateway answers 503 routing_no_available_channel at
	// once, from memory, with x-should-retry: false. Claude Code 2.1.330 does not honour
	// that header: it retries 5xx answers with back-off (CLAUDE_CODE_MAX_RETRIES, default
	// 10), and was still retrying after 90 s with the default. With a low limit it gives up
	// in about a second per attempt and prints the gateway's message.
	t.Run("family A only model fails fast", func(t *testing.T) {
		tap := startWiretap(t, g.base)
		before := g.up.count()
		run := claudePrint(t, k, &gateway{base: tap.url, up: g.up}, proxy, "Say hello.",
			"ANTHROPIC_API_KEY="+testKey, "ANTHROPIC_MODEL=chat-a", "CLAUDE_CODE_MAX_RETRIES=1")
		assert.NotEqual(t, 0, run.exit, "claude -p should fail:\n%s", run)
		assert.Less(t, run.elapsed, 15*time.Second, "Claude Code should fail fast, not hang")
		out := run.stdout + run.stderr
		assert.Contains(t, out, "API Error: 503", "the status the user sees:\n%s", run)
		assert.Contains(t, out, "not offered on the family_b protocol", "the gateway's message the user sees:\n%s", run)
		assert.NotContains(t, out, simulator.ReplyText)
		assert.Equal(t, before, g.up.count(), "nothing reached the upstream")

		calls := tap.exchanges()
		require.NotEmpty(t, calls, "Claude Code made no request")
		assert.LessOrEqual(t, len(calls), 2, "one attempt and at most CLAUDE_CODE_MAX_RETRIES=1 retry")
		t.Logf("Claude Code made %d attempt(s)", len(calls))
		for _, c := range calls {
			assert.Equal(t, "/v1/messages?beta=true", c.uri)
			assert.Equal(t, 503, c.status)
			assert.Equal(t, "false", c.header.Get("X-Should-Retry"))
			assert.Equal(t, "routing_no_available_channel", gjson.GetBytes(c.body, "error.code").String(), "body %s", c.body)
		}
	})
}

// Claude Code with the set-up `caddy switchyard connect claude-code` prints (the
// environment) and writes (settings.json, the key through apiKeyHelper). Before: with
// only the base address and a model, Claude Code says it does not recognize the model
// and assumes a window. After: with either form of the set-up it says nothing of the
// kind, asks for the declared output cap as max_tokens, and lists the gateway's models
// through discovery.
func TestClaudeCodeKnowsTheWindowFromTheGeneratedSetup(t *testing.T) {
	k := needClients(t)
	up := newUpstream(t)
	g := startGatewayWith(t, up, windowModels(up), "")
	proxy := startRefusingProxy(t)
	const unknownModel = "doesn't recognize the model"

	t.Run("before: base address and model only", func(t *testing.T) {
		run := claudePrint(t, k, g, proxy, "Say hello.", "ANTHROPIC_API_KEY="+testKey, "ANTHROPIC_MODEL=win-claude", "CLAUDE_CODE_MAX_RETRIES=1")
		require.Equal(t, 0, run.exit, "claude -p failed:\n%s", run)
		out := run.stdout + run.stderr
		require.Contains(t, out, unknownModel, "what Claude Code says without the set-up:\n%s", run)
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, unknownModel) {
				t.Logf("before: Claude Code printed: %s", line)
			}
		}
	})

	check := func(t *testing.T, run clientRun, tap *wiretap, home string) {
		t.Helper()
		require.Equal(t, 0, run.exit, "claude -p failed:\n%s", run)
		assert.Contains(t, run.stdout, simulator.ReplyText)
		assert.NotContains(t, run.stdout+run.stderr, unknownModel, "Claude Code still does not know the window:\n%s", run)
		assert.NotContains(t, run.stdout+run.stderr, "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "Claude Code complained about the output cap:\n%s", run)
		body := gjson.ParseBytes(up.last(t).Body)
		assert.Equal(t, upstreamPrefix+"-b", body.Get("model").String())
		assert.Equal(t, int64(winClaudeCap), body.Get("max_tokens").Int(), "Claude Code asks for the declared output cap")
		t.Logf("after: no unknown-model notice; max_tokens %d", body.Get("max_tokens").Int())

		var listed bool
		for _, c := range tap.exchanges() {
			if c.method == "GET" && strings.HasPrefix(c.uri, "/v1/models") {
				listed = true
				assert.Equal(t, 200, c.status, "GET %s", c.uri)
			}
		}
		cache, err := os.ReadFile(filepath.Join(home, ".claude", "cache", "gateway-models.json"))
		if listed && err == nil {
			t.Logf("Claude Code's gateway model cache: %s", cache)
		} else {
			t.Logf("gateway model discovery: listed=%v, cache: %v", listed, err)
		}
		assert.True(t, listed, "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1 lists the gateway's models")
	}

	t.Run("after: the environment it prints", func(t *testing.T) {
		tap := startWiretap(t, g.base)
		text := switchyardCLI(t, g, "connect", "claude-code", "--base-url", tap.url, "--key-env", "SWITCHYARD_API_KEY")
		assert.NotContains(t, text, testKey)
		vars := shellExports(t, text, map[string]string{"SWITCHYARD_API_KEY": testKey})
		box := k.newSandbox(t, proxy, append([]string{"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}, vars...)...)
		run := box.run(t, clientRunTimeout, k.bin("claude"), "-p", "Say hello.")
		check(t, run, tap, box.home)
	})

	t.Run("after: the settings.json it writes", func(t *testing.T) {
		tap := startWiretap(t, g.base)
		box := k.newSandbox(t, proxy, "SWITCHYARD_API_KEY="+testKey, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
		dir := filepath.Join(box.home, ".claude")
		out := switchyardCLI(t, g, "connect", "claude-code", "--base-url", tap.url, "--key-env", "SWITCHYARD_API_KEY", "--write", "--dir", dir)
		require.Contains(t, out, "wrote "+filepath.Join(dir, "settings.json"))
		raw, err := os.ReadFile(filepath.Join(dir, "settings.json"))
		require.NoError(t, err)
		assert.NotContains(t, string(raw), testKey, "settings.json names the variable, never the key")
		run := box.run(t, clientRunTimeout, k.bin("claude"), "-p", "Say hello.")
		check(t, run, tap, box.home)
	})
}
