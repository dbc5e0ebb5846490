package caddymodule

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
)

// keysCommand is `caddy switchyard keys …`.
func (c *cli) keysCommand() *cobra.Command {

	keys := &cobra.Command{Use: "keys", Short: "Create, list, limit, rotate and revoke API keys"}
	var name, models, expiresIn, grace, project, owner string
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
			if owner != "" {
				if !validOwner(owner) {
					return errors.New(`--owner: want a person's id (usr_…) or a service account (svc:<name>)`)
				}
				body["owner"] = owner
			}
			l, err := createLimits.apply(cmd, nil)
			if err != nil {
				return err
			}
			if l != nil {
				body["limits"] = l
			}
			return call(c, "POST", routePath("keys"), body, c.printSecret)
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name people will recognise (required)")
	create.Flags().StringVar(&models, "models", "", "comma-separated models the key may call (default: all)")
	create.Flags().StringVar(&expiresIn, "expires-in", "", "lifetime, for example 12h or 30d (default: none)")
	create.Flags().StringVar(&project, "project", "", "the project the key belongs to (default: none)")
	create.Flags().StringVar(&owner, "owner", "", "who the key belongs to: a person's id (usr_…) or a service account (svc:<name>) (default: the caller; none on the admin endpoint)")
	createLimits.register(create, false)
	_ = create.MarkFlagRequired("name")

	var keyLimits limitFlags
	keyLimitsCmd := &cobra.Command{
		Use:   "limits <id> [limit flags] [--clear]",
		Short: "Shows or changes a key's limits (flags left out keep their value)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return changeLimits(c, cmd, &keyLimits, routePath("keys", args[0]), keyLimitsOf, c.printKey)
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
			return call(c, "PUT", routePath("keys", args[0], "project"), map[string]any{"project_id": to}, c.printKey)
		},
	}

	list := &cobra.Command{
		Use: "list", Short: "Lists every key", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return call(c, "GET", routePath("keys"), nil, c.printKeys) },
	}
	show := &cobra.Command{
		Use: "show <id>", Short: "Shows one key", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "GET", routePath("keys", args[0]), nil, c.printKey)
		},
	}
	rotate := &cobra.Command{
		Use: "rotate <id>", Short: "Replaces a key with a new one and prints its secret once", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "POST", routePath("keys", args[0], "rotate"), map[string]any{"grace": grace}, c.printSecret)
		},
	}
	rotate.Flags().StringVar(&grace, "grace", "", "how long the old key keeps working, for example 1h (default: it stops now)")
	revoke := &cobra.Command{
		Use: "revoke <id>", Short: "Stops a key at once", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "POST", routePath("keys", args[0], "revoke"), nil, c.printKey)
		},
	}
	keys.AddCommand(create, list, show, keyLimitsCmd, keyProject, rotate, revoke)
	return keys
}

// validOwner reports whether owner names a person (usr_…) or a service account
// (svc:<name>), as keys' owners are written.
func validOwner(owner string) bool {
	for _, prefix := range []string{"usr_", "svc:"} {
		if rest, ok := strings.CutPrefix(owner, prefix); ok {
			return rest != "" && auth.PrintableName(rest) == rest && !strings.ContainsAny(rest, " \t")
		}
	}
	return false
}

func keyLimitsOf(a *console.KeyAnswer) *limits.Policy { return a.Key.Limits }

// printableKey is k with what the gateway sent that a terminal would act on rather than
// show (control characters, escape sequences, bidirectional overrides) escaped, whatever
// the field: names stored before they were checked may hold them.
func printableKey(k console.KeyView) console.KeyView {
	var shown auth.Key
	if k.Key != nil {
		shown = *k.Key
	}
	for _, s := range []*string{&shown.ID, &shown.Name, &shown.Prefix, &k.Status, &shown.ReplacedBy, &shown.ProjectID} {
		*s = auth.PrintableName(*s)
	}
	models := make([]string, len(shown.Models))
	for i, m := range shown.Models {
		models[i] = auth.PrintableName(m)
	}
	shown.Models = models
	k.Key = &shown
	return k
}

func (c *cli) printKeys(answer *console.KeysAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tSTATUS\tPROJECT\tSPEND\tMODELS\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range answer.Keys {
		k = printableKey(k)
		fmt.Fprintf(tw, "%s\t%s\t%s…\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Prefix, k.Status, orDash(k.ProjectID),
			spendText(k.Standing), modelsText(k.Key.Models), when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
	}
	return tw.Flush()
}

func (c *cli) printKey(answer *console.KeyAnswer) error {
	k := printableKey(answer.Key)
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nprefix:     %s…\nstatus:     %s\nmodels:     %s\ncreated:    %s\nlast used:  %s\nexpires:    %s\n",
		k.ID, k.Name, k.Prefix, k.Status, modelsText(k.Key.Models), when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
	if k.ReplacedBy != "" {
		fmt.Fprintf(c.out, "replaced by: %s\n", k.ReplacedBy)
	}
	fmt.Fprintf(c.out, "project:    %s\nowner:      %s\nlimits:     %s\n", orDash(k.ProjectID), orDash(auth.PrintableName(k.Owner)), limitsText(k.Limits))
	c.printStanding(k.Standing)
	return nil
}

func (c *cli) printSecret(answer *console.KeyAnswer) error {
	if answer.Secret == "" {
		return errors.New("the gateway's answer holds no secret")
	}
	if err := c.printKey(answer); err != nil {
		return err
	}
	if answer.Replaced != nil {
		k := printableKey(*answer.Replaced)
		fmt.Fprintf(c.out, "\nreplaces %s, now %s", k.ID, k.Status)
		if !k.ExpiresAt.IsZero() && k.Status == "active" {
			fmt.Fprintf(c.out, " until %s", when(k.ExpiresAt))
		}
		fmt.Fprintln(c.out)
	}
	fmt.Fprintf(c.out, "\nsecret (shown this once, store it now): %s\n", answer.Secret)
	return nil
}

func modelsText(models []string) string {
	if len(models) == 0 {
		return "all"
	}
	return strings.Join(models, ",")
}
