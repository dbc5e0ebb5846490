package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
)

// keysCommand is `caddy switchyard keys …`.
func (c *cli) keysCommand() *cobra.Command {

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
	return keys
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
