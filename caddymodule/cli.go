package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "switchyard",
		Usage: "keys <create|list|show|rotate|revoke> [flags]",
		Short: "Manages Switchyard API keys through the admin API",
		Long: `
Manages the API keys of a running Switchyard gateway by calling its admin API
(the Caddy admin endpoint), so keys are never edited in the database by hand.

  caddy switchyard keys create --name ci-bot [--models a,b] [--expires-in 30d]
  caddy switchyard keys list
  caddy switchyard keys show <id>
  caddy switchyard keys rotate <id> [--grace 1h]
  caddy switchyard keys revoke <id>

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
			body := map[string]any{"name": name}
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
	cmd.AddCommand(keys)
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
		return fmt.Errorf("%s (HTTP %d)", msg, resp.StatusCode)
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

func (c *cli) printKeys(answer map[string]json.RawMessage) error {
	var keys []cliKey
	if err := json.Unmarshal(answer["keys"], &keys); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATUS\tMODELS\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range keys {
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
