package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// Limits is a limits.Policy as operators write it and read it back: rates as whole
// numbers, the budget as "<amount>/<day|month|total>" in the price unit of the configured
// model prices, per-model variants under models. Every figure left out (or zero) is not
// limited.
//
//	{"rpm":60,"tpm":100000,"concurrency":4,"budget":"50/month",
//	 "models":{"sim-gpt":{"budget":"5/day"}}}
type Limits struct {
	RPM         int64              `json:"rpm,omitempty"`
	TPM         int64              `json:"tpm,omitempty"`
	Concurrency int64              `json:"concurrency,omitempty"`
	Budget      string             `json:"budget,omitempty"`
	Models      map[string]*Limits `json:"models,omitempty"`
}

// LimitsOf is p as operators write it; nil when p limits nothing.
func LimitsOf(p *limits.Policy) *Limits {
	if p.IsZero() {
		return nil
	}
	l := &Limits{RPM: p.RPM, TPM: p.TPM, Concurrency: p.Concurrency}
	if p.Budget != nil {
		l.Budget = p.Budget.String()
	}
	for model, v := range p.Models {
		if v.IsZero() {
			continue
		}
		if l.Models == nil {
			l.Models = map[string]*Limits{}
		}
		l.Models[model] = LimitsOf(v)
	}
	return l
}

// Policy reads l into a policy: nil when l limits nothing (which clears a key's or a
// project's limits). modelExists, when set, checks the models of per-model variants. The
// error says what to correct and how.
func (l *Limits) Policy(modelExists func(string) bool) (*limits.Policy, error) {
	p, err := l.policy("", modelExists)
	if err != nil {
		return nil, err
	}
	if p.IsZero() {
		return nil, nil
	}
	return p, nil
}

func (l *Limits) policy(where string, modelExists func(string) bool) (*limits.Policy, error) {
	if l == nil {
		return nil, nil
	}
	p := &limits.Policy{RPM: l.RPM, TPM: l.TPM, Concurrency: l.Concurrency}
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"concurrency", l.Concurrency}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%s%s: must be a whole number, 0 or more (0 or left out: not limited)", where, f.name)
		}
	}
	if b := strings.TrimSpace(l.Budget); b != "" {
		budget, err := limits.ParseBudget(b)
		if err != nil {
			return nil, fmt.Errorf("%sbudget: want <amount>/<day|month|total>, e.g. 50/month or 2.5/day (the amount in the price unit, at most six decimals); got %q", where, l.Budget)
		}
		p.Budget = &budget
	}
	if len(l.Models) > 0 && where != "" {
		return nil, fmt.Errorf("%smodels: a per-model limit cannot have per-model limits of its own", where)
	}
	for _, model := range slices.Sorted(maps.Keys(l.Models)) {
		if strings.TrimSpace(model) == "" {
			return nil, fmt.Errorf("models: a per-model limit needs a model id")
		}
		if modelExists != nil && !modelExists(model) {
			return nil, fmt.Errorf("models: %q is not a model of this gateway", model)
		}
		v, err := l.Models[model].policy("models."+model+".", modelExists)
		if err != nil {
			return nil, err
		}
		if v.IsZero() {
			continue
		}
		if p.Models == nil {
			p.Models = map[string]*limits.Policy{}
		}
		p.Models[model] = v
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s%v", where, err)
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
