package caddymodule

import (
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
)

// auditCommand is `caddy switchyard audit`.
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
			return call(c, "GET", routePath("audit")+"?"+q.Encode(), nil, c.printAudit)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many entries (at most 500)")
	cmd.Flags().Int64Var(&before, "before", 0, "only entries older than this entry id (to page back)")
	return cmd
}

func (c *cli) printAudit(answer *console.AuditAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWHEN\tWHO\tWHAT\tON\tDETAIL")
	var last int64
	for _, e := range answer.Entries {
		if e == nil {
			continue
		}
		last = e.ID
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At.UTC().Format("2006-01-02 15:04:05Z"), auth.PrintableName(e.Actor),
			auth.PrintableName(e.Action), auth.PrintableName(e.Target), auth.PrintableName(e.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(answer.Entries) > 0 && answer.More {
		fmt.Fprintf(c.out, "\nolder entries: --before %d\n", last)
	}
	return nil
}
