package caddymodule

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/metering"
)

// usageCommand is `caddy switchyard usage`.
func (c *cli) usageCommand() *cobra.Command {
	return queryCommand(c, &cobra.Command{
		Use:   "usage",
		Short: "Sums metered usage by day, key, model and owner (default: the last 30 days, by day)",
	}, "usage", []queryFlag{
		{"from", "", "first day, YYYY-MM-DD (UTC)"},
		{"to", "", "last day, YYYY-MM-DD (UTC), included"},
		{"key", "", "only this key id"},
		{"model", "", "only this model"},
		{"owner", "", "only the keys of this owner (a user id usr_… or svc:<name>)"},
		{"group", "day", "sum by any of day,key,model,candidate,channel,owner (empty: totals only)"},
	}, c.printUsage)
}

func (c *cli) printUsage(answer *console.UsageAnswer) error {
	rows, total, groups := answer.Rows, answer.Total, answer.Group
	fmt.Fprintf(c.out, "usage from %s to %s\n\n", answer.From, answer.To)
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
			label = append(label, map[string]string{"day": r.Day, "key": r.KeyID, "model": r.Model,
				"candidate": r.Candidate, "channel": r.Channel, "owner": orDash(r.Owner)}[g]+"\t")
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
