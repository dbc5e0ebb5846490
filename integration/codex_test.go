package integration

// Codex CLI (npm @openai/codex) against the gateway: `codex exec` with the set-up
// `caddy switchyard connect codex --write` wrote (a custom model provider whose base_url
// is the gateway's /v1, the key from an environment variable, a profile per model with
// its context window), as docs/clients.md's "Connect your tools" section sets it up.

import (
	"bytes"
	"io/fs"
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

// codexHermetic is what a test run adds to the set-up `caddy switchyard connect codex
// --write` wrote: no approval prompts, low effort, analytics off (else a beacon to
// ab.chatgpt.com at the end) and plugins off (else a curated-plugin sync from github.com,
// api.github.com and chatgpt.com at start-up). Top-level keys go before the set-up's
// first table, tables after it.
const (
	codexHermeticHead = "approval_policy = \"never\"\nmodel_reasoning_effort = \"low\"\n"
	codexHermeticTail = "\n[analytics]\nenabled = false\n\n[features]\nplugins = false\n"
)

// codexSetup writes the gateway's Codex set-up into a fresh sandbox with the CLI, for
// model as the default, and returns the sandbox and its CODEX_HOME.
func codexSetup(t *testing.T, k *clientKit, g *gateway, proxy *refusingProxy, model string) (*sandbox, string) {
	t.Helper()
	box := k.newSandbox(t, proxy, "SWITCHYARD_API_KEY="+testKey)
	codexHome := filepath.Join(box.home, ".codex")
	out := switchyardCLI(t, g, "connect", "codex", "--base-url", g.base, "--key-env", "SWITCHYARD_API_KEY",
		"--model", model, "--write", "--dir", codexHome)
	require.Contains(t, out, "wrote "+filepath.Join(codexHome, "config.toml"))
	cfg := filepath.Join(codexHome, "config.toml")
	raw, err := os.ReadFile(cfg)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), testKey, "the set-up names the key's variable, never the key")
	writeTestFile(t, cfg, codexHermeticHead+string(raw)+codexHermeticTail)
	box.env = append(box.env, "CODEX_HOME="+codexHome)
	return box, codexHome
}

// codexRun runs `codex exec` in the sandbox; extra arguments come before the prompt.
func codexRun(t *testing.T, k *clientKit, box *sandbox, proxy *refusingProxy, args ...string) clientRun {
	t.Helper()
	before := len(proxy.seen())
	run := box.run(t, clientRunTimeout, k.bin("codex"), append([]string{"exec", "--skip-git-repo-check", "--color", "never"}, args...)...)
	assert.Equal(t, before, len(proxy.seen()), "Codex tried to reach something other than the gateway")
	return run
}

// codexExec runs `codex exec` with the given model and prompt in a fresh sandbox set up
// by `caddy switchyard connect codex`.
func codexExec(t *testing.T, k *clientKit, g *gateway, proxy *refusingProxy, model, prompt string) clientRun {
	t.Helper()
	box, _ := codexSetup(t, k, g, proxy, model)
	return codexRun(t, k, box, proxy, prompt)
}

// codexWindow is the context window Codex worked with in its latest session, as its
// session log (rollout) records it, or 0 when none is recorded.
func codexWindow(t *testing.T, codexHome string) int64 {
	t.Helper()
	var newest string
	var newestTime time.Time
	_ = filepath.WalkDir(filepath.Join(codexHome, "sessions"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "rollout-") {
			if info, err := d.Info(); err == nil && info.ModTime().After(newestTime) {
				newest, newestTime = path, info.ModTime()
			}
		}
		return nil
	})
	require.NotEmpty(t, newest, "Codex wrote no session log under %s", codexHome)
	raw, err := os.ReadFile(newest)
	require.NoError(t, err)
	var window int64
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if w := gjson.GetBytes(line, "payload.model_context_window"); w.Exists() {
			window = w.Int()
		}
		if w := gjson.GetBytes(line, "payload.info.model_context_window"); w.Exists() {
			window = w.Int()
		}
	}
	return window
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

// Codex learns each model's window from the set-up: the window it works with (its
// session log records 95% of the declared window as usable, its own rule) follows the
// gateway's declaration. Here plain-a declares no window, so the set-up keeps win-gpt's
// window in win-gpt's profile (a window in config.toml would also apply to plain-a's):
// without the profile Codex falls back to its own guess, with it Codex uses the
// declared window. Codex 0.169 still warns "Model metadata for ... not found": it wants
// a whole model catalog entry, its own base instructions included (model_catalog_json),
// which a gateway cannot supply; the window is the part it can be told, and it is told.
func TestCodexKnowsTheWindowFromTheGeneratedSetup(t *testing.T) {
	k := needClients(t)
	up := newUpstream(t)
	g := startGatewayWith(t, up, windowModels(up), "")
	proxy := startRefusingProxy(t)
	usable := func(window int64) int64 { return window * 95 / 100 }
	box, home := codexSetup(t, k, g, proxy, "win-gpt")

	run := codexRun(t, k, box, proxy, "Say hello.")
	require.Equal(t, 0, run.exit, "codex exec failed:\n%s", run)
	fallback := codexWindow(t, home)
	t.Logf("before (win-gpt without its profile): Codex worked with a window of %d", fallback)
	assert.Positive(t, fallback)
	assert.NotEqual(t, usable(winGPTWindow), fallback)

	run = codexRun(t, k, box, proxy, "--profile", "win-gpt", "Say hello.")
	require.Equal(t, 0, run.exit, "codex exec --profile win-gpt failed:\n%s", run)
	assert.Contains(t, run.stdout, simulator.ReplyText)
	got := codexWindow(t, home)
	t.Logf("after (codex --profile win-gpt): Codex worked with a window of %d; declared %d", got, winGPTWindow)
	assert.Equal(t, usable(winGPTWindow), got, "the window Codex used for win-gpt")
	for _, line := range strings.Split(run.stderr, "\n") {
		if strings.Contains(line, "win-gpt") {
			t.Logf("Codex printed: %s", line)
		}
	}
	last := up.last(t)
	assert.Equal(t, upstreamPrefix+"-a", gjson.GetBytes(last.Body, "model").String())
	// Codex sends no output cap; the gateway sends the model's declared one, the cap its
	// reservation priced.
	assert.Equal(t, int64(winGPTCap), gjson.GetBytes(last.Body, "max_output_tokens").Int(), "the declared cap reached the upstream")

	run = codexRun(t, k, box, proxy, "--profile", "plain-a", "Say hello.")
	require.Equal(t, 0, run.exit, "codex exec --profile plain-a failed:\n%s", run)
	assert.Equal(t, fallback, codexWindow(t, home), "a model without a declared window keeps Codex's fallback")
}
