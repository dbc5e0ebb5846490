package caddymodule

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
)

func (c *cli) projectsCommand() *cobra.Command {
	projects := &cobra.Command{Use: "projects", Short: "Create, list and limit projects (groups of keys)"}
	var name string
	var createLimits, projectLimits limitFlags
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
			return call(c, "POST", routePath("projects"), body, c.printProject)
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name people will recognise (default: the id)")
	createLimits.register(create, false)
	list := &cobra.Command{
		Use: "list", Short: "Lists every project with its spend", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return call(c, "GET", routePath("projects"), nil, c.printProjects)
		},
	}
	show := &cobra.Command{
		Use: "show <id>", Short: "Shows a project, its limits, spend and keys", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "GET", routePath("projects", args[0]), nil, c.printProject)
		},
	}
	limitsCmd := &cobra.Command{
		Use:   "limits <id> [limit flags] [--clear]",
		Short: "Shows or changes a project's limits (flags left out keep their value)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return changeLimits(c, cmd, &projectLimits, routePath("projects", args[0]), projectLimitsOf, c.printProject)
		},
	}
	projectLimits.register(limitsCmd, true)
	projects.AddCommand(create, list, show, limitsCmd, c.membersCommand())
	return projects
}

// membersCommand is `caddy switchyard projects members <id> …`: the project's rules for
// its members' keys, replaced as a whole by what the flags say (--none: members may
// make no keys here).
func (c *cli) membersCommand() *cobra.Command {
	var (
		models                         []string
		maxExpiry, departed, revokeAft string
		keyBudget, memberBudget        string
		keyRPM, memberRPM, memberTPM   int64
		none                           bool
	)
	cmd := &cobra.Command{
		Use:   "members <id> [--models a,b] [--max-expiry 720h] [--key-rpm N] [--key-budget 5/day] [--member-rpm N] [--member-tpm N] [--member-budget 50/month] [--departed keep|revoke --revoke-after 168h] | --none",
		Short: "Sets the rules for members' keys in a project (all of them at once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := routePath("projects", args[0], "members")
			if none {
				if cmd.Flags().NFlag() > 1 {
					return fmt.Errorf("--none: give no other rule with it")
				}
				return call(c, "PUT", path, json.RawMessage("null"), c.printProject)
			}
			rules := map[string]any{}
			if len(models) > 0 {
				rules["models"] = models
			}
			for name, v := range map[string]string{"max_expiry": maxExpiry, "departed": departed, "revoke_after": revokeAft} {
				if v != "" {
					rules[name] = v
				}
			}
			if l := limitsBody(keyBudget, keyRPM, 0); l != nil {
				rules["key_limits"] = l
			}
			if l := limitsBody(memberBudget, memberRPM, memberTPM); l != nil {
				rules["limits"] = l
			}
			return call(c, "PUT", path, rules, c.printProject)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&models, "models", nil, "the models members' keys may use (default: every model)")
	fl.StringVar(&maxExpiry, "max-expiry", "", "the longest a member's key may live, e.g. 720h (default: no bound)")
	fl.StringVar(&keyBudget, "key-budget", "", "each member key's own budget, e.g. 5/day")
	fl.Int64Var(&keyRPM, "key-rpm", 0, "each member key's own requests per minute")
	fl.StringVar(&memberBudget, "member-budget", "", "one budget for all of a member's keys in the project, e.g. 50/month")
	fl.Int64Var(&memberRPM, "member-rpm", 0, "requests per minute for all of a member's keys together")
	fl.Int64Var(&memberTPM, "member-tpm", 0, "tokens per minute for all of a member's keys together")
	fl.StringVar(&departed, "departed", "", "what becomes of a departed person's keys: keep or revoke")
	fl.StringVar(&revokeAft, "revoke-after", "", "with --departed revoke: how long after they were disabled, e.g. 168h")
	fl.BoolVar(&none, "none", false, "members may make no keys in this project")
	return cmd
}

// membersText says a project's rules for members' keys in one line.
func membersText(m *auth.MemberRules) string {
	if m == nil {
		return "may make no keys"
	}
	parts := []string{"may make keys"}
	if len(m.Models) > 0 {
		parts = append(parts, "models "+strings.Join(m.Models, ","))
	}
	if m.MaxExpiry > 0 {
		parts = append(parts, "living at most "+time.Duration(m.MaxExpiry).String())
	}
	if m.KeyLimits != nil {
		parts = append(parts, "each key "+limitsText(m.KeyLimits))
	}
	if m.Limits != nil {
		parts = append(parts, "all of a member's keys "+limitsText(m.Limits))
	}
	if m.Departed == "revoke" {
		parts = append(parts, "a departed person's keys revoked after "+time.Duration(m.RevokeAfter).String())
	}
	return auth.PrintableName(strings.Join(parts, "; "))
}

// limitsBody is a limits policy as the API reads it, from the flags given; nil when
// none was.
func limitsBody(budget string, rpm, tpm int64) map[string]any {
	l := map[string]any{}
	if budget != "" {
		l["budget"] = budget
	}
	if rpm > 0 {
		l["rpm"] = rpm
	}
	if tpm > 0 {
		l["tpm"] = tpm
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

func projectLimitsOf(a *console.ProjectAnswer) *limits.Policy { return a.Project.Limits }

// projectNames are a project's id and name, escaped as printableKey escapes a key's.
func projectNames(v console.ProjectView) (id, name string) {
	if v.Project == nil {
		return "", ""
	}
	return auth.PrintableName(v.ID), auth.PrintableName(v.Name)
}

func (c *cli) printProjects(answer *console.ProjectsAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tKEYS\tSPEND\tLIMITS")
	for _, p := range answer.Projects {
		id, name := projectNames(p)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", id, name, p.ActiveKeys, spendText(p.Standing), limitsText(p.Limits))
	}
	return tw.Flush()
}

func (c *cli) printProject(answer *console.ProjectAnswer) error {
	p := answer.Project
	id, name := projectNames(p.ProjectView)
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nlimits:     %s\nmembers:    %s\n", id, name, limitsText(p.Limits), membersText(p.Members))
	c.printStanding(p.Standing)
	if p.Keys != nil {
		fmt.Fprintf(c.out, "\nkeys (%d):\n", len(p.Keys))
		tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tNAME\tSTATUS\tSPEND\tLIMITS")
		for _, k := range p.Keys {
			k = printableKey(k)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Status, spendText(k.Standing), limitsText(k.Limits))
		}
		return tw.Flush()
	}
	return nil
}
