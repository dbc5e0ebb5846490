package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// checkLimits checks a policy as the API received it (limits.Policy is read and written
// in the same form everywhere: {"rpm":60,"tpm":100000,"concurrency":4,"budget":"50/month",
// "models":{"sim-gpt":{"budget":"5/day"}}}): every figure in range, the models of
// per-model variants known (modelExists, when set). It answers nil when p limits
// nothing, which clears a key's or a project's limits, and drops variants that limit
// nothing. The error says what to correct and how.
func checkLimits(p *limits.Policy, modelExists func(string) bool) (*limits.Policy, error) {
	if p.IsZero() {
		return nil, nil
	}
	for _, model := range slices.Sorted(maps.Keys(p.Models)) {
		if strings.TrimSpace(model) == "" {
			return nil, fmt.Errorf("models: a per-model limit needs a model id")
		}
		if modelExists != nil && !modelExists(model) {
			return nil, fmt.Errorf("models: %q is not a model of this gateway", model)
		}
		if p.Models[model].IsZero() && len(p.Models[model].Models) == 0 {
			delete(p.Models, model)
		}
	}
	if len(p.Models) == 0 {
		p.Models = nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Standing is a key's or a project's use of its limits, as the console and the CLI show
// it: spend this budget period (settled, and held by requests in flight) against the
// budget, and what is left of each rate. Amounts are given twice: as a decimal in the
// price unit ("1.25"), and exactly in micro-units.
type Standing struct {
	// Budget is the budget as operators write it ("50/month"); empty without one, when
	// Spent is the spend of the current UTC month.
	Budget          string    `json:"budget,omitempty"`
	Spent           string    `json:"spent"`
	SpentMicros     int64     `json:"spent_micros"`
	Reserved        string    `json:"reserved"`
	ReservedMicros  int64     `json:"reserved_micros"`
	Remaining       string    `json:"remaining,omitempty"`
	RemainingMicros *int64    `json:"remaining_micros,omitempty"`
	PeriodStart     time.Time `json:"period_start,omitzero"`
	ResetAt         time.Time `json:"reset_at,omitzero"`
	// Requests and Tokens are the per-minute allowances; absent when not limited.
	Requests *Allowance `json:"requests,omitempty"`
	Tokens   *Allowance `json:"tokens,omitempty"`
	InFlight int64      `json:"in_flight"`
	// Concurrency is the limit on requests in flight; absent when not limited.
	Concurrency int64 `json:"concurrency,omitempty"`
	// Models holds the standing of each per-model variant.
	Models map[string]*Standing `json:"models,omitempty"`
}

// Allowance is what is left of a per-minute rate.
type Allowance struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// ResetSeconds is how long until the allowance is whole again.
	ResetSeconds float64 `json:"reset_seconds"`
}

// StandingOf is s as the console shows it.
func StandingOf(s *limits.Status) *Standing {
	if s == nil {
		return nil
	}
	out := &Standing{
		Spent: limits.FormatMicros(s.SpentMicros), SpentMicros: s.SpentMicros,
		Reserved: limits.FormatMicros(s.ReservedMicros), ReservedMicros: s.ReservedMicros,
		RemainingMicros: s.RemainingMicros,
		PeriodStart:     s.PeriodStart, ResetAt: s.ResetAt,
		InFlight: s.InFlight, Concurrency: s.Policy.Concurrency,
	}
	if s.Policy.Budget != nil {
		out.Budget = s.Policy.Budget.String()
	}
	if s.RemainingMicros != nil {
		out.Remaining = limits.FormatMicros(*s.RemainingMicros)
	}
	allowance := func(a *limits.Allowance) *Allowance {
		if a == nil {
			return nil
		}
		return &Allowance{Limit: a.Limit, Remaining: a.Remaining, ResetSeconds: a.Reset.Seconds()}
	}
	out.Requests, out.Tokens = allowance(s.Requests), allowance(s.Tokens)
	return out
}
