package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "switchyard",
		Usage: "keys <create|list|show|limits|project|rotate|revoke> [flags] | projects <create|list|show|limits> [flags] | audit [flags] | usage [flags] | requests [flags] | connect <client> [flags] | health [reset <model> <candidate>]",
		Short: "Manages Switchyard API keys, projects and limits, reads usage and the audit trail, shows and resets candidate health, and prints client set-ups through the admin API",
		Long: `
Manages the API keys of a running Switchyard gateway by calling its admin API
(the Caddy admin endpoint), so keys are never edited in the database by hand.

  caddy switchyard keys create --name ci-bot [--models a,b] [--expires-in 30d]
                               [--project <id>] [limit flags]
  caddy switchyard keys list
  caddy switchyard keys show <id>
  caddy switchyard keys limits <id> [limit flags] [--clear]
  caddy switchyard keys project <id> <project id | ->
  caddy switchyard keys rotate <id> [--grace 1h]
  caddy switchyard keys revoke <id>

  caddy switchyard projects create <id> [--name <name>] [limit flags]
  caddy switchyard projects list
  caddy switchyard projects show <id>
  caddy switchyard projects limits <id> [limit flags] [--clear]

  caddy switchyard audit [--limit 50] [--before <entry id>]

Limit flags (each left out: not limited; on "limits", left out: unchanged):
  --budget 50/month          spend per day, month or total, in the price unit
                             of the configured model prices ("none" removes it)
  --rpm 60                   requests per minute (0 removes it)
  --tpm 100000               tokens per minute, input and output (0 removes it)
  --concurrency 4            requests in flight at once (0 removes it)
  --model-budget m=5/day     a budget for one model, repeatable ("m=none" removes it)

  caddy switchyard usage [--from 2026-11-01] [--to 2026-11-30] [--key <id>]
                         [--model <id>] [--group day,key,model,candidate,channel]

  caddy switchyard requests [--key <id>] [--project <id>] [--model <id>]
                            [--candidate <name>] [--status 429] [--since <RFC 3339>]
                            [--until <RFC 3339>] [--limit 50] [--cursor <next>]

  caddy switchyard connect <codex|claude-code|openai|anthropic> --base-url <url>
                           [--key-env SWITCHYARD_API_KEY] [--key <id>] [--write]

  caddy switchyard health                            each candidate's live health
  caddy switchyard health reset <model> <candidate>  clears its circuit, cooldown,
                             pause and demotion on this gateway (audited)

A new key's secret is printed once, when it is created or rotated; it is not
stored and cannot be shown again.`,
		CobraFunc: buildCLI,
	})
}

// cli calls the admin API of one gateway.
type cli struct {
	address string
	asJSON  bool
	out     io.Writer
	client  *http.Client
}

func buildCLI(cmd *cobra.Command) { buildCLIWith(cmd, commandOut{cmd}) }

// commandOut writes where the command's output is set when it runs (standard output
// unless SetOut changed it).
type commandOut struct{ cmd *cobra.Command }

func (o commandOut) Write(p []byte) (int, error) { return o.cmd.OutOrStdout().Write(p) }

// buildCLIWith builds the commands, printing to out: every command group comes from one
// builder in groups, so each is registered the same way.
func buildCLIWith(cmd *cobra.Command, out io.Writer) {
	c := &cli{out: out, client: &http.Client{Timeout: 30 * time.Second}}
	cmd.PersistentFlags().StringVar(&c.address, "address", "", "admin endpoint of the gateway (default: $CADDY_ADMIN or localhost:2019)")
	cmd.PersistentFlags().BoolVar(&c.asJSON, "json", false, "print the API's JSON answer")
	for _, group := range c.groups() {
		cmd.AddCommand(group())
	}
}

// groups are the builders of the command groups: a new group is one more entry here.
func (c *cli) groups() []func() *cobra.Command {
	return []func() *cobra.Command{c.keysCommand, c.projectsCommand, c.auditCommand, c.usageCommand, c.requestsCommand, c.connectCommand, c.healthCommand}
}

func (c *cli) baseURL() string {
	addr := c.address
	if addr == "" {
		addr = os.Getenv("CADDY_ADMIN")
	}
	if addr == "" {
		addr = "localhost:2019"
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimSuffix(addr, "/")
}

// adminPath is the admin API path of the segments under /switchyard/, each escaped, so
// that an id holding '/', '?', '%' or a space names itself and no other route.
func adminPath(segments ...string) string {
	escaped := make([]string, len(segments))
	for i, seg := range segments {
		escaped[i] = url.PathEscape(seg)
	}
	return "/switchyard/" + strings.Join(escaped, "/")
}

// call sends one request and hands show the answer, decoded into the type the API
// encoded it from (--json: prints it as it came); an error answer is returned as the
// error.
func call[T any](c *cli, method, path string, body any, show func(*T) error) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.baseURL()+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("the gateway's admin endpoint did not answer (%v); is it running, and is --address right?", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	unexpected := fmt.Errorf("unexpected answer (HTTP %d): %s", resp.StatusCode, bytes.TrimSpace(raw))
	if resp.StatusCode >= 400 {
		var refused console.ErrorAnswer
		if json.Unmarshal(raw, &refused) != nil {
			return unexpected
		}
		return fmt.Errorf("%s (HTTP %d)", auth.PrintableName(refused.Error), resp.StatusCode)
	}
	var answer T
	if json.Unmarshal(raw, &answer) != nil {
		return unexpected
	}
	if c.asJSON {
		_, err := c.out.Write(raw)
		return err
	}
	return show(&answer)
}

// queryFlag is a string flag of a query command: given and not empty, it is sent as the
// query parameter of its name.
type queryFlag struct{ name, value, usage string }

// queryCommand makes cmd a command that takes no arguments and GETs route with its
// flags as the query, showing the answer.
func queryCommand[T any](c *cli, cmd *cobra.Command, route string, flags []queryFlag, show func(*T) error) *cobra.Command {
	values := make([]string, len(flags))
	for i, f := range flags {
		cmd.Flags().StringVar(&values[i], f.name, f.value, f.usage)
	}
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(*cobra.Command, []string) error {
		q := url.Values{}
		for i, f := range flags {
			if values[i] != "" {
				q.Set(f.name, values[i])
			}
		}
		return call(c, "GET", adminPath(route)+"?"+q.Encode(), nil, show)
	}
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
