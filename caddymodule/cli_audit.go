package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
)

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
