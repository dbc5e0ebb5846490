package integration

// Codex CLI (npm @openai/codex) against the gateway: `codex exec` with a custom model
// provider whose base_url is the gateway's /v1 and whose key comes from an environment
// variable, as the README's "Connect your tools" section sets it up.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// codexConfig is $CODEX_HOME/config.toml: the README's set-up plus what keeps a test run
// hermetic and quiet: no approval prompts, analytics off (else a beacon to ab.chatgpt.com
// at the end) and plugins off (else a curated-plugin sync from github.com,
// api.github.com and chatgpt.com at start-up).
func codexConfig(gatewayBase, model string) string {
	return `model = "` + model + `"
model_provider = "switchyard"
model_reasoning_effort = "low"
approval_policy = "never"

[model_providers.switchyard]
name = "Switchyard"
base_url = "` + gatewayBase + `/v1"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"

[analytics]
enabled = false

[features]
plugins = false
`
}

// codexExec runs `codex exec` with the given model and prompt in a fresh sandbox.
func codexExec(t *testing.T, k *clientKit, g *gateway, proxy *refusingProxy, model, prompt string) clientRun {
	t.Helper()
	box := k.newSandbox(t, proxy, "SWITCHYARD_API_KEY="+testKey)
	codexHome := filepath.Join(box.home, ".codex")
	require.NoError(t, os.MkdirAll(codexHome, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig(g.base, model)), 0o600))
	box.env = append(box.env, "CODEX_HOME="+codexHome)
	before := len(proxy.seen())
	run := box.run(t, clientRunTimeout, k.bin("codex"), "exec", "--skip-git-repo-check", "--color", "never", prompt)
	assert.Equal(t, before, len(proxy.seen()), "Codex tried to reach something other than the gateway")
	return run
}

func TestCodexCLI(t *testing.T) {
	k := needClients(t)
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	models := standardModels(up) +
		"\t\tmodel codex-tools {\n\t\t\treasoning true\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-t+tool-call") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")
	proxy := startRefusingProxy(t)

	t.Run("prompt", func(t *testing.T) {
		before := up.count()
		run := codexExec(t, k, g, proxy, "chat-a", "Say hello.")
		require.Equal(t, 0, run.exit, "codex exec failed:\n%s", run)
		assert.Contains(t, run.stdout, simulator.ReplyText, "the answer Codex printed")
		g.assertHidden(t, run.stdout+run.stderr)

		require.Equal(t, before+1, up.count(), "one upstream request per turn")
		seen := g.assertUpstreamCredentialOnly(t)
		assert.Equal(t, "/v1/responses", seen.Path)
		body := gjson.ParseBytes(seen.Body)
		assert.Equal(t, upstreamPrefix+"-a", body.Get("model").String(), "the model rewritten to the upstream name")
		assert.True(t, body.Get("stream").Bool(), "Codex streams")
		assert.Equal(t, "Bearer "+upstreamCred, seen.Header.Get("Authorization"))
		assert.Equal(t, "codex_exec", seen.Header.Get("Originator"), "Codex's own headers forwarded")
	})

	t.Run("tool call round trip", func(t *testing.T) {
		before := up.count()
		run := codexExec(t, k, g, proxy, "codex-tools", "Run the echo command.")
		require.Equal(t, 0, run.exit, "codex exec failed:\n%s", run)
		assert.Contains(t, run.stdout, simulator.ReplyText, "the final answer Codex printed")
		assert.Contains(t, run.stderr, "echo simulated-tool", "the command Codex ran for the simulated tool call")

		// First turn: the simulator asks for exec_command; Codex runs it and sends the
		// output back in a second request, which the simulator answers with text.
		up.mu.Lock()
		turns := append([]seenRequest(nil), up.requests[before:]...)
		up.mu.Unlock()
		require.Len(t, turns, 2, "a tool call and the turn with its result")
		var output string
		for _, item := range gjson.GetBytes(turns[1].Body, "input").Array() {
			if item.Get("type").String() == "function_call_output" {
				output = item.Get("output").String()
			}
		}
		assert.Contains(t, output, "simulated-tool", "the tool's output Codex sent back")
		for _, turn := range turns {
			assert.Equal(t, upstreamPrefix+"-t+tool-call", gjson.GetBytes(turn.Body, "model").String())
		}
	})
}
