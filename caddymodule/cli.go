package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "switchyard",
		Usage: "keys <create|list|show|limits|project|rotate|revoke> [flags] | projects <create|list|show|limits> [flags] | audit [flags] | usage [flags] | requests [flags] | connect <client> [flags] | health [reset <model> <candidate>] | tokens <create|list|revoke> | people <list|disable|enable> | sessions <list|revoke> [--token syt_… --console <url>]",
		Short: "Manages Switchyard API keys, projects and limits, reads usage and the audit trail, shows and resets candidate health, manages API tokens, people and sessions, and prints client set-ups through the admin API or, with an API token, the console's API",
		Long: `
Manages the API keys of a running Switchyard gateway by calling its admin API
(the Caddy admin endpoint), so keys are never edited in the database by hand.

With an API token (--token, or $SWITCHYARD_TOKEN) every command calls the
console's API instead (--console, or $SWITCHYARD_CONSOLE, for example
https://gw.example.com/console), with what the token's role allows. The token is
sent only over https, or plain http to this machine, and never printed.

  caddy switchyard keys create --name ci-bot [--models a,b] [--expires-in 30d]
                               [--project <id>] [--owner <usr_… | svc:name>]
                               [limit flags]
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
  caddy switchyard projects members <id> [--models a,b] [--max-expiry 720h]
                               [--key-rpm N] [--key-budget 5/day] [--member-rpm N]
                               [--member-tpm N] [--member-budget 50/month]
                               [--departed keep|revoke --revoke-after 168h] | --none

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

  caddy switchyard tokens create --name ci --role project_admin --projects team-a
                                 [--expires-in 30d]
  caddy switchyard tokens list
  caddy switchyard tokens revoke <id>
  caddy switchyard people list
  caddy switchyard people disable|enable <id>
  caddy switchyard sessions list
  caddy switchyard sessions revoke <id>

A new key's or token's secret is printed once, when it is created or rotated; it is not
stored and cannot be shown again.`,
		CobraFunc: buildCLI,
	})
}

// cli calls the API of one gateway: Caddy's admin endpoint as the operator, or, with an
// API token, the console's API on the site.
type cli struct {
	address string
	// token and console are the flags; each falls back to its environment variable.
	token   string
	console string
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
	c := &cli{out: out, client: &http.Client{Timeout: 30 * time.Second, CheckRedirect: keepTokenHome}}
	flags := cmd.PersistentFlags()
	flags.StringVar(&c.address, "address", "", "admin endpoint of the gateway (default: $CADDY_ADMIN or localhost:2019)")
	flags.StringVar(&c.token, "token", "", "an API token (syt_…): call the console's API instead of the admin endpoint (default: $"+tokenEnv+"; prefer the variable, a flag shows in the process list)")
	flags.StringVar(&c.console, "console", "", "the console's address, where a token is sent, e.g. https://gw.example.com/console (default: $"+consoleEnv+")")
	flags.BoolVar(&c.asJSON, "json", false, "print the API's JSON answer")
	for _, group := range c.groups() {
		cmd.AddCommand(group())
	}
	c.maskErrors(cmd)
}

// groups are the builders of the command groups: a new group is one more entry here.
func (c *cli) groups() []func() *cobra.Command {
	return []func() *cobra.Command{c.keysCommand, c.projectsCommand, c.auditCommand, c.usageCommand, c.requestsCommand,
		c.connectCommand, c.healthCommand, c.tokensCommand, c.peopleCommand, c.sessionsCommand}
}

// The environment variables the token and the console's address are read from.
const (
	tokenEnv   = "SWITCHYARD_TOKEN"
	consoleEnv = "SWITCHYARD_CONSOLE"
)

// door is where the commands go: base is the URL the routes hang under
// (<admin>/switchyard, or <console>/api), token the API token sent with each call (empty
// on the admin endpoint, which takes none).
type door struct {
	base, token string
}

// door works out where the commands go. Without a token: the admin endpoint, as before
// tokens existed. With one: the console's API, and only over https (or plain http to this
// machine), so that the token never crosses the network in clear.
func (c *cli) door() (door, error) {
	token := c.tokenGiven()
	if token == "" {
		if c.console != "" {
			return door{}, errors.New("--console is where an API token is sent, and no token was given: give --token or set $" + tokenEnv +
				" (without a token, commands go to the admin endpoint, --address)")
		}
		return door{base: adminBase(c.address) + "/switchyard"}, nil
	}
	if c.address != "" {
		return door{}, errors.New("--address is the admin endpoint, which takes no token; with a token, commands go to the console's API (--console or $" + consoleEnv + ")")
	}
	if !strings.HasPrefix(token, access.TokenPrefix) || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return door{}, errors.New("the token is not a Switchyard API token (they start with " + access.TokenPrefix + "; a key, sk-sy-…, is not one); it was not sent")
	}
	consoleURL := c.console
	if consoleURL == "" {
		consoleURL = strings.TrimSpace(os.Getenv(consoleEnv))
	}
	if consoleURL == "" {
		return door{}, errors.New("a token needs the console's address to be sent to: give --console https://gw.example.com/console or set $" + consoleEnv)
	}
	base, err := consoleBase(consoleURL)
	if err != nil {
		return door{}, err
	}
	return door{base: base + "/api", token: token}, nil
}

// tokenGiven is the token of the flag, else of the environment ("" without one).
func (c *cli) tokenGiven() string {
	if t := strings.TrimSpace(c.token); t != "" {
		return t
	}
	return strings.TrimSpace(os.Getenv(tokenEnv))
}

func adminBase(addr string) string {
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

// consoleBase checks the console's address a token is to be sent to and returns it
// without a trailing slash. Only https will do, or plain http to this machine (a gateway
// run locally); an address with a user, a query or a fragment is refused, since the API's
// routes are appended to it.
func consoleBase(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", errors.New("the console's address must be a URL such as https://gw.example.com/console")
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", errors.New("the console's address must hold only a scheme, a host and a path, such as https://gw.example.com/console")
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return "", fmt.Errorf("refusing to send the token to http://%s: over plain http it would cross the network in clear; "+
			"use the console's https address (plain http is accepted only to localhost or a loopback address)", u.Host)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// loopbackHost reports whether host names this machine: "localhost" or a loopback
// address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// keepTokenHome stops at a redirect of a call that carries a token: the console's API
// answers without redirecting, and a token is sent to the address it was given for and
// to no other. Without a token redirects are followed as before.
func keepTokenHome(req *http.Request, via []*http.Request) error {
	if len(via) > 0 && via[0].Header.Get("Authorization") != "" {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// maskErrors makes every command's error name no token: an answer may echo what it was
// sent, and an error is printed to a terminal, a CI log, a ticket.
func (c *cli) maskErrors(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if err := run(cmd, args); err != nil {
				return errors.New(maskTokens(err.Error(), c.tokenGiven()))
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		c.maskErrors(sub)
	}
}

// tokenLike is anything shaped like an API token, the one given or another.
var tokenLike = regexp.MustCompile(regexp.QuoteMeta(access.TokenPrefix) + `[A-Za-z0-9_\-]+`)

// maskTokens hides token, and anything else shaped like a token, in s.
func maskTokens(s, token string) string {
	if token != "" {
		s = strings.ReplaceAll(s, token, access.TokenPrefix+"…")
	}
	return tokenLike.ReplaceAllLiteralString(s, access.TokenPrefix+"…")
}

// routePath is the path of a route of the API under the door's base, each segment
// escaped, so that an id holding '/', '?', '%' or a space names itself and no other
// route.
func routePath(segments ...string) string {
	escaped := make([]string, len(segments))
	for i, seg := range segments {
		escaped[i] = url.PathEscape(seg)
	}
	return "/" + strings.Join(escaped, "/")
}

// maxAnswer bounds what is read of one answer (the largest, a page of 500 requests with
// their attempts, is a small fraction of it).
const maxAnswer = 32 << 20

// send sends one request through the door and returns the answer's body; an error answer
// is returned as the error, in one line.
func (c *cli) send(method, path string, body any) (status int, answer []byte, err error) {
	d, err := c.door()
	if err != nil {
		return 0, nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		if d.token != "" {
			return 0, nil, fmt.Errorf("the console did not answer (%v); is --console (or $%s) right?", err, consoleEnv)
		}
		return 0, nil, fmt.Errorf("the gateway's admin endpoint did not answer (%v); is it running, and is --address right?", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return 0, nil, err
	}
	if len(raw) > maxAnswer {
		return 0, nil, fmt.Errorf("the answer is larger than %d MiB; not read", maxAnswer>>20)
	}
	if d.token != "" {
		switch {
		case resp.StatusCode == http.StatusUnauthorized:
			return 0, nil, errors.New("the token was refused (expired or revoked?) (HTTP 401)")
		case resp.StatusCode == http.StatusForbidden:
			var refused console.ErrorAnswer
			if json.Unmarshal(raw, &refused) == nil && refused.Error != "" {
				return 0, nil, fmt.Errorf("the token's role does not allow this: %s (HTTP 403)", auth.PrintableName(refused.Error))
			}
			return 0, nil, errors.New("the token's role does not allow this (HTTP 403)")
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			return 0, nil, fmt.Errorf("the console answered with a redirect (HTTP %d), which a token does not follow; "+
				"is --console the console's own address, e.g. https://gw.example.com/console?", resp.StatusCode)
		}
	}
	if resp.StatusCode >= 400 {
		var refused console.ErrorAnswer
		if json.Unmarshal(raw, &refused) != nil {
			return 0, nil, unexpected(resp.StatusCode, raw)
		}
		return 0, nil, refusal{status: resp.StatusCode, viaToken: d.token != "", text: auth.PrintableName(refused.Error)}
	}
	return resp.StatusCode, raw, nil
}

// refusal is the API's error answer: its status, its reason, and whether it came through
// the console's API with a token (where a command may say more about it).
type refusal struct {
	status   int
	viaToken bool
	text     string
}

func (r refusal) Error() string { return fmt.Sprintf("%s (HTTP %d)", r.text, r.status) }

// unexpected is the error of an answer that is not the API's JSON: its start, shown.
func unexpected(status int, raw []byte) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 300 {
		raw = append(raw[:300:300], "…"...)
	}
	return fmt.Errorf("unexpected answer (HTTP %d): %s", status, auth.PrintableName(string(raw)))
}

// call sends one request and hands show the answer, decoded into the type the API
// encoded it from (--json: prints it as it came); an error answer is returned as the
// error.
func call[T any](c *cli, method, path string, body any, show func(*T) error) error {
	status, raw, err := c.send(method, path, body)
	if err != nil {
		return err
	}
	var answer T
	if json.Unmarshal(raw, &answer) != nil {
		return unexpected(status, raw)
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
		return call(c, "GET", routePath(route)+"?"+q.Encode(), nil, show)
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
