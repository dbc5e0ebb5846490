package integration

// Client set-ups from the gateway itself: `caddy switchyard connect` run in this process
// against the gateway's admin endpoint, the same command a user runs. The real-client
// tests (codex_test.go, claude_code_test.go) configure the clients with what it prints
// or writes; this file holds what they share, and the console's "Connect a tool" view
// in a real browser.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
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
