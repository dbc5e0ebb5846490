package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/url"
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
