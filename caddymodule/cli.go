package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "switchyard",
		Usage: "keys <create|list|show|rotate|revoke> [flags] | usage [flags] | connect <client> [flags]",
		Short: "Manages Switchyard API keys, reads usage and prints client set-ups through the admin API",
		Long: `
Manages the API keys of a running Switchyard gateway by calling its admin API
(the Caddy admin endpoint), so keys are never edited in the database by hand.

  caddy switchyard keys create --name ci-bot [--models a,b] [--expires-in 30d]
  caddy switchyard keys list
  caddy switchyard keys show <id>
  caddy switchyard keys rotate <id> [--grace 1h]
  caddy switchyard keys revoke <id>

  caddy switchyard usage [--from 2026-11-01] [--to 2026-11-30] [--key <id>]
                         [--model <id>] [--group day,key,model]

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

func buildCLI(cmd *cobra.Command) {
	c := &cli{out: os.Stdout, client: &http.Client{Timeout: 30 * time.Second}}
	cmd.PersistentFlags().StringVar(&c.address, "address", "", "admin endpoint of the gateway (default: $CADDY_ADMIN or localhost:2019)")
	cmd.PersistentFlags().BoolVar(&c.asJSON, "json", false, "print the API's JSON answer")

	keys := &cobra.Command{Use: "keys", Short: "Create, list, rotate and revoke API keys"}
	var name, models, expiresIn, grace string
	create := &cobra.Command{
		Use:   "create --name <name>",
		Short: "Creates a key and prints its secret once",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
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
			return c.call("POST", "/switchyard/keys", body, c.printSecret)
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name people will recognise (required)")
	create.Flags().StringVar(&models, "models", "", "comma-separated models the key may call (default: all)")
	create.Flags().StringVar(&expiresIn, "expires-in", "", "lifetime, for example 12h or 30d (default: none)")
	_ = create.MarkFlagRequired("name")

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
	keys.AddCommand(create, list, show, rotate, revoke)

	var from, to, key, model, group string
	usageCmd := &cobra.Command{
		Use:   "usage",
		Short: "Sums metered usage by day, key and model (default: the last 30 days, by day)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			q := url.Values{}
			for name, v := range map[string]string{"from": from, "to": to, "key": key, "model": model, "group": group} {
				if v != "" {
					q.Set(name, v)
				}
			}
			return c.call("GET", "/switchyard/usage?"+q.Encode(), nil, c.printUsage)
		},
	}
	usageCmd.Flags().StringVar(&from, "from", "", "first day, YYYY-MM-DD (UTC)")
	usageCmd.Flags().StringVar(&to, "to", "", "last day, YYYY-MM-DD (UTC), included")
	usageCmd.Flags().StringVar(&key, "key", "", "only this key id")
	usageCmd.Flags().StringVar(&model, "model", "", "only this model")
	usageCmd.Flags().StringVar(&group, "group", "day", "sum by any of day,key,model (empty: totals only)")
	cmd.AddCommand(keys, usageCmd, c.connectCommand())
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
			label = append(label, map[string]string{"day": r.Day, "key": r.KeyID, "model": r.Model}[g]+"\t")
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
}

// printable escapes what the gateway sent that a terminal would act on rather than show
// (control characters, escape sequences, bidirectional overrides), whatever the field:
// names stored before they were checked may hold them.
func (k *cliKey) printable() {
	for _, s := range []*string{&k.ID, &k.Name, &k.Prefix, &k.Status, &k.ReplacedBy} {
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
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATUS\tMODELS\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range keys {
		k.printable()
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Prefix, k.Status, modelsText(k.Models),
			when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
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
	return nil
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
