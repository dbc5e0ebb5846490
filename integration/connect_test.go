package integration

// Client set-ups from the gateway itself: `caddy switchyard connect` run in this process
// against the gateway's admin endpoint, the same command a user runs. The real-client
// tests (codex_test.go, claude_code_test.go) configure the clients with what it prints
// or writes; this file holds what they share, and the console's "Connect a tool" view
// in a real browser.

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// The limits the window tests declare, distinct from any client's built-in defaults.
const (
	winGPTWindow    = 200000 // under the 272000 Codex 0.169 caps an unknown model's window at
	winGPTCap       = 100000
	winClaudeWindow = 180000
	winClaudeCap    = 32000
)

// windowModels declares a Family A and a Family B model with a context window and an
// output cap, and one Family A model without either.
func windowModels(up *upstream) string {
	a := "http://" + up.hostport() + "/v1"
	b := "http://" + up.hostport()
	return "" +
		"\t\tmodel win-gpt {\n\t\t\tcontext_window " + strconv.Itoa(winGPTWindow) + "\n\t\t\tmax_output_tokens " + strconv.Itoa(winGPTCap) + "\n" +
		candidate("main", "family_a", a, upstreamPrefix+"-a") + "\t\t}\n" +
		"\t\tmodel win-claude {\n\t\t\tcontext_window " + strconv.Itoa(winClaudeWindow) + "\n\t\t\tmax_output_tokens " + strconv.Itoa(winClaudeCap) + "\n" +
		candidate("main", "family_b", b, upstreamPrefix+"-b") + "\t\t}\n" +
		"\t\tmodel plain-a {\n" + candidate("main", "family_a", a, upstreamPrefix+"-a") + "\t\t}\n"
}

// switchyardCLI runs `caddy switchyard <args>` in this process, as the caddy binary
// would, against the gateway's admin endpoint, and returns what it printed.
func switchyardCLI(t *testing.T, g *gateway, args ...string) string {
	t.Helper()
	out, err := switchyardCLIErr(g, args...)
	require.NoError(t, err, "caddy switchyard %s:\n%s", strings.Join(args, " "), out)
	return out
}

func switchyardCLIErr(g *gateway, args ...string) (string, error) {
	command, ok := caddycmd.Commands()["switchyard"]
	if !ok {
		panic("the switchyard command is not registered")
	}
	cmd := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
	command.CobraFunc(cmd)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append(args, "--address", g.admin))
	err := cmd.Execute()
	return out.String(), err
}

// shellExports reads the `export NAME=value` lines the set-up printed, expanding
// "$NAME" from env as a shell would, and returns them as NAME=value entries.
func shellExports(t *testing.T, text string, env map[string]string) []string {
	t.Helper()
	var vars []string
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "  #")
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "export ")
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(rest, "=")
		require.True(t, ok, "export line %q", line)
		switch {
		case strings.HasPrefix(value, `"$`) && strings.HasSuffix(value, `"`):
			value = env[value[2:len(value)-1]]
		case strings.HasPrefix(value, "'"):
			value = strings.ReplaceAll(strings.Trim(value, "'"), `'\''`, "'")
		}
		vars = append(vars, name+"="+value)
	}
	require.NotEmpty(t, vars, "no export lines in:\n%s", text)
	return vars
}

// writeFile is os.WriteFile for the test's own files.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

// connectReport is what console/connect.mjs prints.
type connectReport struct {
	browserReport
	Limits []struct {
		ID              string `json:"id"`
		Text            string `json:"text"`
		ContextWindow   int64  `json:"context_window"`
		MaxOutputTokens int64  `json:"max_output_tokens"`
	} `json:"limits"`
	BaseURLField string `json:"base_url_field"`
	Shown        map[string]struct {
		State  string `json:"state"`
		Text   string `json:"text"`
		Models string `json:"models"`
		Error  string `json:"error"`
	} `json:"shown"`
	CopyStatus   string `json:"copy_status"`
	Clipboard    string `json:"clipboard"`
	CopyDisabled bool   `json:"copy_disabled"`
}

// The console's "Connect a tool" view shows, for each tool and for a chosen key, exactly
// what `caddy switchyard connect` prints, copies it with one click, and shows the
// gateway's message for an address it refuses. The models section shows each model's
// declared limits.
func TestConnectViewInBrowser(t *testing.T) {
	node := needBrowser(t)
	up := newUpstream(t)
	db := filepath.Join(t.TempDir(), "keys.db")
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + db + "\n" + windowModels(up) + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n" +
			"\thandle_path /console/* {\n\t\tbasic_auth {\n\t\t\t" + consoleUser + " " + consolePasswordHash + "\n\t\t}\n\t\tswitchyard_console\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)

	// A key limited to one model, made through the admin API.
	resp, err := http.Post(g.admin+"/switchyard/keys", "application/json", strings.NewReader(`{"name":"connect-test","models":["plain-a"]}`))
	require.NoError(t, err)
	created, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	keyID := gjson.GetBytes(created, "key.id").String()
	require.NotEmpty(t, keyID, "%s", created)

	var r connectReport
	runBrowserScript(t, node, "connect.mjs", g, 2*time.Minute, &r, "SY_KEY_ID="+keyID)
	assert.Equal(t, 200, r.PageStatus)
	assert.Empty(t, r.PageErrors)
	for _, e := range r.ConsoleErrors {
		assert.Contains(t, e, "status of 400", "the one error expected is the refused address")
	}

	t.Run("models show their limits", func(t *testing.T) {
		byID := map[string]string{}
		for _, m := range r.Limits {
			byID[m.ID] = m.Text
			if m.ID == "win-claude" {
				assert.Equal(t, int64(winClaudeWindow), m.ContextWindow)
				assert.Equal(t, int64(winClaudeCap), m.MaxOutputTokens)
			}
		}
		assert.Equal(t, "window 180,000, output 32,000 tokens", byID["win-claude"])
		assert.Equal(t, "not declared", byID["plain-a"])
	})

	t.Run("each tool's set-up is what the CLI prints", func(t *testing.T) {
		assert.Equal(t, g.base, r.BaseURLField, "the address defaults to where the console is served")
		for _, client := range []string{"codex", "claude-code", "openai", "anthropic"} {
			want := switchyardCLI(t, g, "connect", client, "--base-url", g.base)
			assert.Equal(t, want, r.Shown[client].Text, "%s in the page", client)
			assert.Equal(t, "ready", r.Shown[client].State)
		}
		assert.Equal(t, "Models: win-gpt, plain-a", r.Shown["codex"].Models)
		assert.Equal(t, "Copied to the clipboard.", r.CopyStatus)
		assert.Equal(t, r.Shown["codex"].Text, r.Clipboard, "the Copy button put the set-up on the clipboard")
		assert.NotContains(t, r.Clipboard, "sk-", "no key in a set-up")
	})

	t.Run("a key's models only", func(t *testing.T) {
		want := switchyardCLI(t, g, "connect", "codex", "--base-url", g.base, "--key", keyID)
		assert.Equal(t, want, r.Shown["codex_key"].Text)
		assert.Equal(t, "Models: plain-a", r.Shown["codex_key"].Models)
	})

	t.Run("a refused address is explained", func(t *testing.T) {
		assert.Equal(t, "error", r.Shown["bad_address"].State)
		assert.Contains(t, r.Shown["bad_address"].Error, "without /v1")
		assert.Empty(t, r.Shown["bad_address"].Text)
		assert.True(t, r.CopyDisabled, "nothing to copy")
	})
}
