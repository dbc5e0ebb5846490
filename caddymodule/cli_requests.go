package caddymodule

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/metering"
)

// requestsCommand is `caddy switchyard requests`: the request log, newest first.
func (c *cli) requestsCommand() *cobra.Command {
	return queryCommand(c, &cobra.Command{
		Use:   "requests",
		Short: "Lists recent requests, newest first, with their attempts (filters: key, project, model, candidate, status, time)",
	}, "requests", []queryFlag{
		{"key", "", "only this key id"},
		{"project", "", "only this project id"},
		{"model", "", "only this model"},
		{"candidate", "", "only requests this candidate served"},
		{"status", "", "only this HTTP status"},
		{"since", "", "from this time on, RFC 3339 (2026-11-25T14:00:00Z)"},
		{"until", "", "before this time, RFC 3339"},
		{"limit", "", "rows per page (default 50, at most 500)"},
		{"cursor", "", "the next page, as the previous page printed it"},
	}, c.printRequests)
}

func (c *cli) printRequests(answer *metering.RequestPage) error {
	rows := answer.Requests
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tREQUEST\tKEY\tMODEL\tCANDIDATE\tSTATUS\tTTFT\tDURATION\tIN\tOUT\tCOST\tFLAGS")
	for _, r := range rows {
		key := r.KeyName
		if key == "" {
			key = r.KeyID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%dms\t%dms\t%d\t%d\t%s\t%s\n", r.Time.UTC().Format("2006-01-02 15:04:05.000Z"),
			auth.PrintableName(r.RequestID), auth.PrintableName(key), auth.PrintableName(r.Model), auth.PrintableName(r.Candidate),
			r.Status, r.TTFBMs, r.DurationMs, r.Input, r.Output, money(r.CostMicros), requestFlags(r))
		// A request that did not go straight through shows each attempt beneath it.
		if len(r.Tries) > 1 || r.Outcome != metering.OutcomeServed {
			for _, t := range r.Tries {
				fmt.Fprintf(tw, "\t  attempt\t%s\t\t\t%d\t\t%dms\t\t\t\t%s\n", auth.PrintableName(t.Candidate), t.Status, t.DurationMs, tryText(t))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if answer.Next != "" {
		fmt.Fprintf(c.out, "\nolder requests: --cursor %s\n", answer.Next)
	}
	return nil
}

// requestFlags names what happened to a request besides being served.
func requestFlags(r metering.RequestRow) string {
	var f []string
	switch r.Outcome {
	case metering.OutcomeRefused:
		f = append(f, "refused:"+auth.PrintableName(r.RefusedBy))
	case metering.OutcomeFailed:
		f = append(f, "failed")
	case metering.OutcomeStreamError:
		f = append(f, "stream-error")
	}
	if r.FailedOver {
		f = append(f, "failed-over")
	}
	if r.Retried {
		f = append(f, "retried")
	}
	return strings.Join(f, ",")
}

func tryText(t metering.Try) string {
	var parts []string
	if t.Retry > 0 {
		parts = append(parts, fmt.Sprintf("retry %d after %dms", t.Retry, t.WaitMs))
	}
	if t.Reason != "" {
		parts = append(parts, auth.PrintableName(t.Reason))
	} else {
		parts = append(parts, "served")
	}
	if t.StreamError != "" {
		parts = append(parts, "stream ended: "+auth.PrintableName(t.StreamError))
	}
	return strings.Join(parts, ", ")
}
