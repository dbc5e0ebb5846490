package caddymodule

import (
	"fmt"
	"text/tabwriter"

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
	projects.AddCommand(create, list, show, limitsCmd)
	return projects
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
	fmt.Fprintf(c.out, "id:         %s\nname:       %s\nlimits:     %s\n", id, name, limitsText(p.Limits))
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
