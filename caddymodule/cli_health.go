package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
)

// healthAnswer is GET /switchyard/health as the CLI reads it.
type healthAnswer struct {
	Candidates []candidateHealth `json:"candidates"`
}

// healthCommand is `caddy switchyard health`: the candidates' live health, and the
// operator's reset of one candidate's.
func (c *cli) healthCommand() *cobra.Command {
	health := &cobra.Command{
		Use:   "health [reset <model> <candidate>]",
		Short: "Shows each candidate's live health, or clears one candidate's (circuit, cooldown, pause, demotion)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			err := call(c, "GET", routePath("health"), nil, c.printHealth)
			var r refusal
			if errors.As(err, &r) && r.viaToken && r.status == http.StatusNotFound {
				// The list is the admin endpoint's; a console without it says only "no such route".
				return errors.New("this gateway's console API has no live health list; run `caddy switchyard health` on the admin endpoint " +
					"(without a token), or see the console's Models view (HTTP 404)")
			}
			return err
		},
	}
	reset := &cobra.Command{
		Use:   "reset <model> <candidate>",
		Short: "Clears a candidate's health so it takes traffic again at once; recorded in the audit trail",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			return call(c, "POST", routePath("health", args[0], args[1], "reset"), nil, c.printHealthReset)
		},
	}
	health.AddCommand(reset)
	return health
}

func (c *cli) printHealth(answer *healthAnswer) error {
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tCANDIDATE\tPROTOCOL\tSTATE\tSUCCESS\tFAILURES\tOUT FOR\tLAST FAILURE")
	for _, h := range answer.Candidates {
		out := "-"
		switch {
		case h.Paused:
			out = strconv.FormatFloat(h.CooldownSeconds, 'f', -1, 64) + "s (paused by the upstream)"
		case h.Probing:
			out = "until a probe passes (next in " + strconv.FormatFloat(h.NextProbeSeconds, 'f', -1, 64) + "s)"
		case h.CooldownSeconds > 0:
			out = strconv.FormatFloat(h.CooldownSeconds, 'f', -1, 64) + "s"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3g\t%d\t%s\t%s\n", auth.PrintableName(h.Model), auth.PrintableName(h.Candidate),
			h.Protocol, h.State, h.SuccessRate, h.RecentFailures, out, orDash(h.LastFailure))
	}
	return tw.Flush()
}

func (c *cli) printHealthReset(answer *console.HealthResetAnswer) error {
	_, err := fmt.Fprintf(c.out, "%s / %s: health reset (was %s, now %s); recorded in the audit trail where the gateway keeps one\n",
		auth.PrintableName(answer.Model), auth.PrintableName(answer.Candidate.Name), answer.Was, answer.Candidate.State)
	return err
}
