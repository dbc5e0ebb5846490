package caddymodule

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/console"
	"github.com/switchyard-gw/switchyard/limits"
)

// limitFlags are the flags that set a key's or a project's limits.
type limitFlags struct {
	budget                string
	rpm, tpm, concurrency int64
	modelBudgets          []string
	clear                 bool
}

func (f *limitFlags) register(cmd *cobra.Command, changing bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.budget, "budget", "", `spend budget: <amount>/<day|month|total>, e.g. 50/month, in the price unit of the model prices`)
	fl.Int64Var(&f.rpm, "rpm", 0, "requests per minute")
	fl.Int64Var(&f.tpm, "tpm", 0, "tokens (input and output) per minute")
	fl.Int64Var(&f.concurrency, "concurrency", 0, "requests in flight at once")
	fl.StringArrayVar(&f.modelBudgets, "model-budget", nil, "a budget for one model: <model>=<amount>/<period>, e.g. sim-gpt=5/day (repeatable)")
	if changing {
		fl.BoolVar(&f.clear, "clear", false, "remove every limit first (with other flags: set exactly those)")
	}
}

// apply sets the flags that were given on cur (nil: no limits yet) and returns the
// result: nil when it limits nothing. On a change, a flag left out keeps its value,
// --budget none and --model-budget m=none remove a budget, and 0 removes a rate; an
// empty budget is refused, so that a variable that expanded to nothing removes nothing.
func (f *limitFlags) apply(cmd *cobra.Command, cur *limits.Policy) (*limits.Policy, error) {
	l := &limits.Policy{}
	if cur != nil && !f.clear {
		*l = *cur
		l.Models = map[string]*limits.Policy{}
		for m, v := range cur.Models {
			copied := *v
			l.Models[m] = &copied
		}
	}
	changed := cmd.Flags().Changed
	if changed("budget") {
		b, err := budgetFlag(f.budget)
		if err != nil {
			return nil, fmt.Errorf("--budget: %v", err)
		}
		l.Budget = b
	}
	for name, dst := range map[string]*int64{"rpm": &l.RPM, "tpm": &l.TPM, "concurrency": &l.Concurrency} {
		if changed(name) {
			v := map[string]int64{"rpm": f.rpm, "tpm": f.tpm, "concurrency": f.concurrency}[name]
			if v < 0 || v > limits.MaxRate {
				return nil, fmt.Errorf("--%s: must be 0 (not limited) or more, at most %d", name, int64(limits.MaxRate))
			}
			*dst = v
		}
	}
	for _, mb := range f.modelBudgets {
		model, budget, ok := strings.Cut(mb, "=")
		model = strings.TrimSpace(model)
		if !ok || model == "" {
			return nil, fmt.Errorf("--model-budget: want <model>=<amount>/<day|month|total>, e.g. sim-gpt=5/day; got %q", mb)
		}
		b, err := budgetFlag(budget)
		if err != nil {
			return nil, fmt.Errorf("--model-budget %s: %v", model, err)
		}
		if l.Models == nil {
			l.Models = map[string]*limits.Policy{}
		}
		v := l.Models[model]
		if v == nil {
			v = &limits.Policy{}
			l.Models[model] = v
		}
		v.Budget = b
		if v.IsZero() {
			delete(l.Models, model)
		}
	}
	if len(l.Models) == 0 {
		l.Models = nil
	}
	if l.IsZero() {
		return nil, nil
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// budgetFlag reads a budget flag's value: nil for "none"; an empty value is an error.
func budgetFlag(v string) (*limits.Budget, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "":
		return nil, errors.New(`empty; want <amount>/<day|month|total>, e.g. 50/month, or "none" to remove the budget`)
	case "none":
		return nil, nil
	}
	b, err := limits.ParseBudget(v)
	if err != nil {
		return nil, fmt.Errorf("want <amount>/<day|month|total>, e.g. 50/month; got %q (%v)", v, err)
	}
	return &b, nil
}

// given reports whether any limit flag was given.
func (f *limitFlags) given(cmd *cobra.Command) bool {
	for _, name := range []string{"budget", "rpm", "tpm", "concurrency", "model-budget", "clear"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// changeLimits is `keys limits` and `projects limits`: without flags it shows the
// limits; with flags it reads the current ones (limitsOf finds them in the answer),
// changes what the flags say and puts the result back.
func changeLimits[T any](c *cli, cmd *cobra.Command, f *limitFlags, path string, limitsOf func(*T) *limits.Policy, show func(*T) error) error {
	if !f.given(cmd) {
		return call(c, "GET", path, nil, show)
	}
	if _, err := f.apply(cmd, nil); err != nil {
		return err // a malformed flag is refused before anything is read or changed
	}
	var cur *limits.Policy
	if !f.clear {
		// The answer is decoded here, not printed: --json applies to the change's answer.
		asJSON := c.asJSON
		c.asJSON = false
		err := call(c, "GET", path, nil, func(answer *T) error {
			cur = limitsOf(answer)
			return nil
		})
		c.asJSON = asJSON
		if err != nil {
			return err
		}
	}
	l, err := f.apply(cmd, cur)
	if err != nil {
		return err
	}
	body := any(l)
	if l == nil {
		body = map[string]any{}
	}
	return call(c, "PUT", path+"/limits", body, show)
}

// printStanding prints spend against the budget and what is left of each rate.
func (c *cli) printStanding(s *console.Standing) {
	if s == nil {
		return
	}
	fmt.Fprintf(c.out, "spend:      %s\n", spendText(s))
	if !s.ResetAt.IsZero() {
		fmt.Fprintf(c.out, "resets:     %s UTC\n", s.ResetAt.UTC().Format("2006-01-02 15:04"))
	}
	for _, r := range []struct {
		what string
		a    *console.Allowance
	}{{"requests", s.Requests}, {"tokens", s.Tokens}} {
		if r.a != nil {
			fmt.Fprintf(c.out, "%-11s %d of %d left this minute\n", r.what+":", r.a.Remaining, r.a.Limit)
		}
	}
	if s.Concurrency > 0 {
		fmt.Fprintf(c.out, "in flight:  %d of %d\n", s.InFlight, s.Concurrency)
	}
	for _, m := range sortedKeys(s.Models) {
		fmt.Fprintf(c.out, "  %s: %s\n", auth.PrintableName(m), spendText(s.Models[m]))
	}
}

// spendText is "12.5 of 50/month (0.3 reserved)", or the month's spend without a budget.
func spendText(s *console.Standing) string {
	if s == nil {
		return "-"
	}
	out := s.Spent
	if s.Budget != "" {
		out += " of " + s.Budget
	} else {
		out += " this month"
	}
	if s.ReservedMicros > 0 {
		out += " (" + s.Reserved + " reserved)"
	}
	return out
}

// limitsText is "budget 50/month, 60 rpm, 100000 tpm, 4 concurrent; sim-gpt: budget 5/day".
func limitsText(l *limits.Policy) string {
	if l == nil {
		return "none"
	}
	var parts []string
	if l.Budget != nil {
		parts = append(parts, "budget "+l.Budget.String())
	}
	for _, f := range []struct {
		v    int64
		unit string
	}{{l.RPM, "rpm"}, {l.TPM, "tpm"}, {l.Concurrency, "concurrent"}} {
		if f.v != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", f.v, f.unit))
		}
	}
	out := strings.Join(parts, ", ")
	for _, m := range sortedKeys(l.Models) {
		if sub := limitsText(l.Models[m]); sub != "none" {
			if out != "" {
				out += "; "
			}
			out += auth.PrintableName(m) + ": " + sub
		}
	}
	if out == "" {
		return "none"
	}
	return out
}
