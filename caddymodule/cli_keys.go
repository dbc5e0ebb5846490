package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
	"github.com/switchyard-gw/switchyard/metering"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "switchyard",
		Usage: "keys <create|list|show|limits|project|rotate|revoke> [flags] | projects <create|list|show|limits> [flags] | audit [flags] | usage [flags] | requests [flags] | connect <client> [flags]",
		Short: "Manages Switchyard API keys, projects and limits, reads usage and the audit trail, and prints client set-ups through the admin API",
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

// buildCLIWith builds the commands, printing to out.
func buildCLIWith(cmd *cobra.Command, out io.Writer) {
	c := &cli{out: out, client: &http.Client{Timeout: 30 * time.Second}}
	cmd.PersistentFlags().StringVar(&c.address, "address", "", "admin endpoint of the gateway (default: $CADDY_ADMIN or localhost:2019)")
	cmd.PersistentFlags().BoolVar(&c.asJSON, "json", false, "print the API's JSON answer")

	keys := &cobra.Command{Use: "keys", Short: "Create, list, limit, rotate and revoke API keys"}
	var name, models, expiresIn, grace, project string
	var createLimits limitFlags
	create := &cobra.Command{
		Use:   "create --name <name>",
		Short: "Creates a key and prints its secret once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The gateway refuses such a name too; saying so here needs no round trip.
			checked, err := auth.CheckKeyName(name)
			if err != nil {
				return err
			}
			body := map[string]any{"name": checked}
			if models != "" {
				body["models"] = strings.Split(models, ",")
			}
			if expiresIn != "" {
				body["expires_in"] = expiresIn
			}
			if project != "" {
				body["project_id"] = project
			}
			l, err := createLimits.apply(cmd, nil)
			if err != nil {
				return err
			}
			if l != nil {
				body["limits"] = l
			}
			return c.call("POST", "/switchyard/keys", body, c.printSecret)
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name people will recognise (required)")
	create.Flags().StringVar(&models, "models", "", "comma-separated models the key may call (default: all)")
	create.Flags().StringVar(&expiresIn, "expires-in", "", "lifetime, for example 12h or 30d (default: none)")
	create.Flags().StringVar(&project, "project", "", "the project the key belongs to (default: none)")
	createLimits.register(create, false)
	_ = create.MarkFlagRequired("name")

	var keyLimits limitFlags
	keyLimitsCmd := &cobra.Command{
		Use:   "limits <id> [limit flags] [--clear]",
		Short: "Shows or changes a key's limits (flags left out keep their value)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.changeLimits(cmd, &keyLimits, "/switchyard/keys/"+url.PathEscape(args[0]), "key", c.printKey)
		},
	}
	keyLimits.register(keyLimitsCmd, true)
	keyProject := &cobra.Command{
		Use:   "project <id> <project id | ->",
		Short: "Moves a key into a project, or out of any (\"-\" or \"--\")",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			switch {
			case len(args) == 2 && args[1] != "-":
				to = args[1]
			case len(args) == 1 && cmd.ArgsLenAtDash() != 1:
				return errors.New("give the project id, or - to take the key out of its project")
			}
			return c.call("PUT", "/switchyard/keys/"+url.PathEscape(args[0])+"/project", map[string]any{"project_id": to}, c.printKey)
		},
	}

	list := &cobra.Command{
		Use: "list", Short: "Lists every key", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return c.call("GET", "/switchyard/keys", nil, c.printKeys) },
	}
	show := &cobra.Command{
		Use: "show <id>", Short: "Shows one key", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.call("GET", "/switchyard/keys/"+args[0], nil, c.printKey)
		},
	}
	rotate := &cobra.Command{
		Use: "rotate <id>", Short: "Replaces a key with a new one and prints its secret once", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.call("POST", "/switchyard/keys/"+args[0]+"/rotate", map[string]any{"grace": grace}, c.printSecret)
		},
	}
	rotate.Flags().StringVar(&grace, "grace", "", "how long the old key keeps working, for example 1h (default: it stops now)")
	revoke := &cobra.Command{
		Use: "revoke <id>", Short: "Stops a key at once", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.call("POST", "/switchyard/keys/"+args[0]+"/revoke", nil, c.printKey)
		},
	}
	keys.AddCommand(create, list, show, keyLimitsCmd, keyProject, rotate, revoke)

	var from, to, key, model, group string
	usageCmd := &cobra.Command{
		Use:   "usage",
		Short: "Sums metered usage by day, key and model (default: the last 30 days, by day)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			q := queryOf(map[string]string{"from": from, "to": to, "key": key, "model": model, "group": group})
			return c.call("GET", "/switchyard/usage?"+q.Encode(), nil, c.printUsage)
		},
	}
	usageCmd.Flags().StringVar(&from, "from", "", "first day, YYYY-MM-DD (UTC)")
	usageCmd.Flags().StringVar(&to, "to", "", "last day, YYYY-MM-DD (UTC), included")
	usageCmd.Flags().StringVar(&key, "key", "", "only this key id")
	usageCmd.Flags().StringVar(&model, "model", "", "only this model")
	usageCmd.Flags().StringVar(&group, "group", "day", "sum by any of day,key,model,candidate,channel (empty: totals only)")
	cmd.AddCommand(keys, c.projectsCommand(), c.auditCommand(), usageCmd, c.requestsCommand(), c.connectCommand())
}

func (c *cli) printUsage(answer map[string]json.RawMessage) error {
	var rows []metering.Row
	var total metering.Row
	var groups []string
	if err := json.Unmarshal(answer["rows"], &rows); err != nil {
		return err
	}
	_ = json.Unmarshal(answer["total"], &total)
	_ = json.Unmarshal(answer["group"], &groups)
	var from, to string
	_ = json.Unmarshal(answer["from"], &from)
	_ = json.Unmarshal(answer["to"], &to)
	fmt.Fprintf(c.out, "usage from %s to %s\n\n", from, to)
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	header := ""
	for _, g := range groups {
		header += strings.ToUpper(g) + "\t"
	}
	fmt.Fprintln(tw, header+"REQUESTS\tINPUT\tCACHED\tCACHE WRITE\tOUTPUT\tREASONING\tCOST\tESTIMATED\t")
	line := func(r metering.Row, label []string) {
		fmt.Fprintf(tw, "%s%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t\n", strings.Join(label, ""), r.Requests, r.Input, r.CachedIn,
			r.CacheWrite, r.Output, r.Reasoning, money(r.CostMicros), r.Estimated)
	}
	for _, r := range rows {
		var label []string
		for _, g := range groups {
			label = append(label, map[string]string{"day": r.Day, "key": r.KeyID, "model": r.Model,
				"candidate": r.Candidate, "channel": r.Channel}[g]+"\t")
		}
		line(r, label)
	}
	label := make([]string, len(groups))
	for i := range label {
		label[i] = "\t"
	}
	if len(label) > 0 {
		label[0] = "TOTAL\t"
	}
	line(total, label)
	return tw.Flush()
}

// money shows micro-units as a decimal amount with six places, exactly.
func money(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	return fmt.Sprintf("%s%d.%06d", sign, micros/1_000_000, micros%1_000_000)
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

// call sends one request and hands the decoded answer to show, or prints the API's error.
func (c *cli) call(method, path string, body any, show func(map[string]json.RawMessage) error) error {
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
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("unexpected answer (HTTP %d): %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	if resp.StatusCode >= 400 {
		var msg string
		_ = json.Unmarshal(answer["error"], &msg)
		return fmt.Errorf("%s (HTTP %d)", auth.PrintableName(msg), resp.StatusCode)
	}
	if c.asJSON {
		_, err := c.out.Write(raw)
		return err
	}
	return show(answer)
}

type cliKey struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Prefix     string    `json:"prefix"`
	Status     string    `json:"status"`
	Models     []string  `json:"models"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	ReplacedBy string    `json:"replaced_by"`
	ProjectID  string    `json:"project_id"`
	// Limits and Standing are the key's own limits and its use of them.
	Limits   *limits.Policy    `json:"limits"`
	Standing *console.Standing `json:"standing"`
}

// printable escapes what the gateway sent that a terminal would act on rather than show
// (control characters, escape sequences, bidirectional overrides), whatever the field:
// names stored before they were checked may hold them.
func (k *cliKey) printable() {
	for _, s := range []*string{&k.ID, &k.Name, &k.Prefix, &k.Status, &k.ReplacedBy, &k.ProjectID} {
		*s = auth.PrintableName(*s)
	}
	for i := range k.Models {
		k.Models[i] = auth.PrintableName(k.Models[i])
	}
}

func (c *cli) printKeys(answer map[string]json.RawMessage) error {
	var keys []cliKey
	if err := json.Unmarshal(answer["keys"], &keys); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATUS\tPROJECT\tSPEND\tMODELS\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range keys {
		k.printable()
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Prefix, k.Status, orDash(k.ProjectID),
			spendText(k.Standing), modelsText(k.Models), when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
	}
	return tw.Flush()
}

func (c *cli) printKey(answer map[string]json.RawMessage) error {
	var k cliKey
	if err := json.Unmarshal(answer["key"], &k); err != nil {
		return err
	}
	k.printable()
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nprefix:     %s…\nstatus:     %s\nmodels:     %s\ncreated:    %s\nlast used:  %s\nexpires:    %s\n",
		k.ID, k.Name, k.Prefix, k.Status, modelsText(k.Models), when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
	if k.ReplacedBy != "" {
		fmt.Fprintf(c.out, "replaced by: %s\n", k.ReplacedBy)
	}
	fmt.Fprintf(c.out, "project:    %s\nlimits:     %s\n", orDash(k.ProjectID), limitsText(k.Limits))
	c.printStanding(k.Standing)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) printSecret(answer map[string]json.RawMessage) error {
	if err := c.printKey(answer); err != nil {
		return err
	}
	var secret string
	if err := json.Unmarshal(answer["secret"], &secret); err != nil {
		return err
	}
	if old, ok := answer["replaced"]; ok {
		var k cliKey
		if json.Unmarshal(old, &k) == nil {
			k.printable()
			fmt.Fprintf(c.out, "\nreplaces %s, now %s", k.ID, k.Status)
			if !k.ExpiresAt.IsZero() && k.Status == "active" {
				fmt.Fprintf(c.out, " until %s", when(k.ExpiresAt))
			}
			fmt.Fprintln(c.out)
		}
	}
	fmt.Fprintf(c.out, "\nsecret (shown this once, store it now): %s\n", secret)
	return nil
}

func modelsText(models []string) string {
	if len(models) == 0 {
		return "all"
	}
	return strings.Join(models, ",")
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

// limitFlags are the flags that set a key's or a project's limits.
type limitFlags struct {
	budget                string
	rpm, tpm, concurrency int64
	modelBudgets          []string
	clear                 bool
}

func (f *limitFlags) register(cmd *cobra.Command, changing bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.budget, "budget", "", `spend budget: <amount>/<day|month|total>, e.g. 50/month, in the price unit of the model prices`)
	fl.Int64Var(&f.rpm, "rpm", 0, "requests per minute")
	fl.Int64Var(&f.tpm, "tpm", 0, "tokens (input and output) per minute")
	fl.Int64Var(&f.concurrency, "concurrency", 0, "requests in flight at once")
	fl.StringArrayVar(&f.modelBudgets, "model-budget", nil, "a budget for one model: <model>=<amount>/<period>, e.g. sim-gpt=5/day (repeatable)")
	if changing {
		fl.BoolVar(&f.clear, "clear", false, "remove every limit first (with other flags: set exactly those)")
	}
}

// apply sets the flags that were given on cur (nil: no limits yet) and returns the
// result: nil when it limits nothing. On a change, a flag left out keeps its value,
// --budget none and --model-budget m=none remove a budget, and 0 removes a rate; an
// empty budget is refused, so that a variable that expanded to nothing removes nothing.
func (f *limitFlags) apply(cmd *cobra.Command, cur *limits.Policy) (*limits.Policy, error) {
	l := &limits.Policy{}
	if cur != nil && !f.clear {
		*l = *cur
		l.Models = map[string]*limits.Policy{}
		for m, v := range cur.Models {
			copied := *v
			l.Models[m] = &copied
		}
	}
	changed := cmd.Flags().Changed
	if changed("budget") {
		b, err := budgetFlag(f.budget)
		if err != nil {
			return nil, fmt.Errorf("--budget: %v", err)
		}
		l.Budget = b
	}
	for name, dst := range map[string]*int64{"rpm": &l.RPM, "tpm": &l.TPM, "concurrency": &l.Concurrency} {
		if changed(name) {
			v := map[string]int64{"rpm": f.rpm, "tpm": f.tpm, "concurrency": f.concurrency}[name]
			if v < 0 || v > limits.MaxRate {
				return nil, fmt.Errorf("--%s: must be 0 (not limited) or more, at most %d", name, int64(limits.MaxRate))
			}
			*dst = v
		}
	}
	for _, mb := range f.modelBudgets {
		model, budget, ok := strings.Cut(mb, "=")
		model = strings.TrimSpace(model)
		if !ok || model == "" {
			return nil, fmt.Errorf("--model-budget: want <model>=<amount>/<day|month|total>, e.g. sim-gpt=5/day; got %q", mb)
		}
		b, err := budgetFlag(budget)
		if err != nil {
			return nil, fmt.Errorf("--model-budget %s: %v", model, err)
		}
		if l.Models == nil {
			l.Models = map[string]*limits.Policy{}
		}
		v := l.Models[model]
		if v == nil {
			v = &limits.Policy{}
			l.Models[model] = v
		}
		v.Budget = b
		if v.IsZero() {
			delete(l.Models, model)
		}
	}
	if len(l.Models) == 0 {
		l.Models = nil
	}
	if l.IsZero() {
		return nil, nil
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// budgetFlag reads a budget flag's value: nil for "none"; an empty value is an error.
func budgetFlag(v string) (*limits.Budget, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return nil, errors.New(`empty; want <amount>/<day|month|total>, e.g. 50/month, or "none" to remove the budget`)
	case "none":
		return nil, nil
	}
	b, err := limits.ParseBudget(v)
	if err != nil {
		return nil, fmt.Errorf("want <amount>/<day|month|total>, e.g. 50/month; got %q (%v)", v, err)
	}
	return &b, nil
}

// given reports whether any limit flag was given.
func (f *limitFlags) given(cmd *cobra.Command) bool {
	for _, name := range []string{"budget", "rpm", "tpm", "concurrency", "model-budget", "clear"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// changeLimits is `keys limits` and `projects limits`: without flags it shows the
// limits; with flags it reads the current ones, changes what the flags say and puts the
// result back.
func (c *cli) changeLimits(cmd *cobra.Command, f *limitFlags, path, what string, show func(map[string]json.RawMessage) error) error {
	if !f.given(cmd) {
		return c.call("GET", path, nil, show)
	}
	if _, err := f.apply(cmd, nil); err != nil {
		return err // a malformed flag is refused before anything is read or changed
	}
	var cur *limits.Policy
	if !f.clear {
		// The answer is decoded here, not printed: --json applies to the change's answer.
		asJSON := c.asJSON
		c.asJSON = false
		err := c.call("GET", path, nil, func(answer map[string]json.RawMessage) error {
			var v struct {
				Limits *limits.Policy `json:"limits"`
			}
			if err := json.Unmarshal(answer[what], &v); err != nil {
				return err
			}
			cur = v.Limits
			return nil
		})
		c.asJSON = asJSON
		if err != nil {
			return err
		}
	}
	l, err := f.apply(cmd, cur)
	if err != nil {
		return err
	}
	body := any(l)
	if l == nil {
		body = map[string]any{}
	}
	return c.call("PUT", path+"/limits", body, show)
}

func (c *cli) projectsCommand() *cobra.Command {
	projects := &cobra.Command{Use: "projects", Short: "Create, list and limit projects (groups of keys)"}
	var name string
	var createLimits, changeLimits limitFlags
	create := &cobra.Command{
		Use:   "create <id> [--name <name>] [limit flags]",
		Short: "Creates a project",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"id": args[0], "name": name}
			l, err := createLimits.apply(cmd, nil)
			if err != nil {
				return err
			}
			if l != nil {
				body["limits"] = l
			}
			return c.call("POST", "/switchyard/projects", body, c.printProject)
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name people will recognise (default: the id)")
	createLimits.register(create, false)
	list := &cobra.Command{
		Use: "list", Short: "Lists every project with its spend", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return c.call("GET", "/switchyard/projects", nil, c.printProjects)
		},
	}
	show := &cobra.Command{
		Use: "show <id>", Short: "Shows a project, its limits, spend and keys", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return c.call("GET", "/switchyard/projects/"+url.PathEscape(args[0]), nil, c.printProject)
		},
	}
	limitsCmd := &cobra.Command{
		Use:   "limits <id> [limit flags] [--clear]",
		Short: "Shows or changes a project's limits (flags left out keep their value)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.changeLimits(cmd, &changeLimits, "/switchyard/projects/"+url.PathEscape(args[0]), "project", c.printProject)
		},
	}
	changeLimits.register(limitsCmd, true)
	projects.AddCommand(create, list, show, limitsCmd)
	return projects
}

func (c *cli) auditCommand() *cobra.Command {
	var limit int
	var before int64
	cmd := &cobra.Command{
		Use:   "audit [--limit 50] [--before <entry id>]",
		Short: "Lists changes to keys, projects and limits, newest first: who, what, when",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if before > 0 {
				q.Set("before", strconv.FormatInt(before, 10))
			}
			return c.call("GET", "/switchyard/audit?"+q.Encode(), nil, c.printAudit)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many entries (at most 500)")
	cmd.Flags().Int64Var(&before, "before", 0, "only entries older than this entry id (to page back)")
	return cmd
}

// cliProject is a project as the API shows it.
type cliProject struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Limits    *limits.Policy    `json:"limits"`
	Standing  *console.Standing `json:"standing"`
	KeyCount  int               `json:"key_count"`
	CreatedAt time.Time         `json:"created_at"`
	Keys      []cliKey          `json:"keys"`
}

func (c *cli) printProjects(answer map[string]json.RawMessage) error {
	var projects []cliProject
	if err := json.Unmarshal(answer["projects"], &projects); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKEYS\tSPEND\tLIMITS")
	for _, p := range projects {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", auth.PrintableName(p.ID), auth.PrintableName(p.Name), p.KeyCount,
			spendText(p.Standing), limitsText(p.Limits))
	}
	return tw.Flush()
}

func (c *cli) printProject(answer map[string]json.RawMessage) error {
	var p cliProject
	if err := json.Unmarshal(answer["project"], &p); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nlimits:     %s\n", auth.PrintableName(p.ID), auth.PrintableName(p.Name), limitsText(p.Limits))
	c.printStanding(p.Standing)
	if p.Keys != nil {
		fmt.Fprintf(c.out, "\nkeys (%d):\n", len(p.Keys))
		tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tNAME\tSTATUS\tSPEND\tLIMITS")
		for _, k := range p.Keys {
			k.printable()
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Status, spendText(k.Standing), limitsText(k.Limits))
		}
		return tw.Flush()
	}
	return nil
}

// printStanding prints spend against the budget and what is left of each rate.
func (c *cli) printStanding(s *console.Standing) {
	if s == nil {
		return
	}
	fmt.Fprintf(c.out, "spend:      %s\n", spendText(s))
	if !s.ResetAt.IsZero() {
		fmt.Fprintf(c.out, "resets:     %s UTC\n", s.ResetAt.UTC().Format("2006-01-02 15:04"))
	}
	for _, r := range []struct {
		what string
		a    *console.Allowance
	}{{"requests", s.Requests}, {"tokens", s.Tokens}} {
		if r.a != nil {
			fmt.Fprintf(c.out, "%-11s %d of %d left this minute\n", r.what+":", r.a.Remaining, r.a.Limit)
		}
	}
	if s.Concurrency > 0 {
		fmt.Fprintf(c.out, "in flight:  %d of %d\n", s.InFlight, s.Concurrency)
	}
	for _, m := range sortedKeys(s.Models) {
		fmt.Fprintf(c.out, "  %s: %s\n", auth.PrintableName(m), spendText(s.Models[m]))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// spendText is "12.5 of 50/month (0.3 reserved)", or the month's spend without a budget.
func spendText(s *console.Standing) string {
	if s == nil {
		return "-"
	}
	out := s.Spent
	if s.Budget != "" {
		out += " of " + s.Budget
	} else {
		out += " this month"
	}
	if s.ReservedMicros > 0 {
		out += " (" + s.Reserved + " reserved)"
	}
	return out
}

// limitsText is "budget 50/month, 60 rpm, 100000 tpm, 4 concurrent; sim-gpt: budget 5/day".
func limitsText(l *limits.Policy) string {
	if l == nil {
		return "none"
	}
	var parts []string
	if l.Budget != nil {
		parts = append(parts, "budget "+l.Budget.String())
	}
	for _, f := range []struct {
		v    int64
		unit string
	}{{l.RPM, "rpm"}, {l.TPM, "tpm"}, {l.Concurrency, "concurrent"}} {
		if f.v != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", f.v, f.unit))
		}
	}
	out := strings.Join(parts, ", ")
	for _, m := range sortedKeys(l.Models) {
		if sub := limitsText(l.Models[m]); sub != "none" {
			if out != "" {
				out += "; "
			}
			out += auth.PrintableName(m) + ": " + sub
		}
	}
	if out == "" {
		return "none"
	}
	return out
}

// cliAuditEntry is one change in the audit trail.
type cliAuditEntry struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Target string    `json:"target"`
	Detail string    `json:"detail"`
}

func (c *cli) printAudit(answer map[string]json.RawMessage) error {
	var entries []cliAuditEntry
	if err := json.Unmarshal(answer["entries"], &entries); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWHEN\tWHO\tWHAT\tON\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At.UTC().Format("2006-01-02 15:04:05Z"), auth.PrintableName(e.Actor),
			auth.PrintableName(e.Action), auth.PrintableName(e.Target), auth.PrintableName(e.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(entries) > 0 {
		var more bool
		_ = json.Unmarshal(answer["more"], &more)
		if more {
			fmt.Fprintf(c.out, "\nolder entries: --before %d\n", entries[len(entries)-1].ID)
		}
	}
	return nil
}
