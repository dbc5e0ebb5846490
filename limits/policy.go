package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Period is how often a budget starts again, in UTC.
type Period string

// The periods a budget may have.
const (
	PeriodDay   Period = "day"   // from 00:00 UTC to the next 00:00 UTC
	PeriodMonth Period = "month" // from the 1st, 00:00 UTC, to the next month's 1st
	PeriodTotal Period = "total" // never starts again
)

// Budget is a spend limit: Micros (micro-units of the configured price currency, the
// unit of metering.Cost) per Period. In JSON (Caddy's, the admin API's, the stores')
// it is the string ParseBudget reads and String writes, "50/month"; the object
// {"micros":…,"period":…} that earlier versions wrote is still read.
type Budget struct {
	Micros int64
	Period Period
}

// MaxBudgetMicros is the largest budget: 10^9 in the price unit. Counters compare
// budgets as float64 (Redis scripts have no other number), exact only below 2^53.
const MaxBudgetMicros = 1_000_000_000 * 1_000_000

// MaxRate is the largest rpm, tpm or concurrency: 10^12. Token buckets are float64 in
// memory and in Redis; a larger figure would not be counted (or shown) exactly.
const MaxRate = 1_000_000_000_000

// MarshalJSON writes the budget as "50/month".
func (b Budget) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads "50/month", or the older {"micros":…,"period":…}. An empty string
// is refused: a budget left out (or null) is none.
func (b *Budget) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var old struct {
			Micros int64  `json:"micros"`
			Period Period `json:"period"`
		}
		if err := json.Unmarshal(data, &old); err != nil {
			return fmt.Errorf("budget: %v", err)
		}
		*b = Budget{Micros: old.Micros, Period: old.Period}
		return nil // Policy.Validate checks it, as it does every figure
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New(`budget: want a string "<amount>/<day|month|total>", e.g. "50/month"`)
	}
	if strings.TrimSpace(s) == "" {
		return errors.New(`budget: empty; want <amount>/<day|month|total>, e.g. "50/month" (leave it out, or "none", for no budget)`)
	}
	v, err := ParseBudget(s)
	if err != nil {
		return fmt.Errorf("budget: want <amount>/<day|month|total>, e.g. 50/month or 2.5/day (the amount in the price unit, at most six decimals); got %q (%v)", s, err)
	}
	*b = v
	return nil
}

// Start is when the period holding t began (the zero time for PeriodTotal).
func (b Budget) Start(t time.Time) time.Time {
	t = t.UTC()
	switch b.Period {
	case PeriodDay:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	case PeriodMonth:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}

// Reset is when the period holding t ends and the budget starts again; the zero time for
// PeriodTotal, which never does.
func (b Budget) Reset(t time.Time) time.Time {
	start := b.Start(t)
	switch b.Period {
	case PeriodDay:
		return start.AddDate(0, 0, 1)
	case PeriodMonth:
		return start.AddDate(0, 1, 0)
	}
	return time.Time{}
}

// String is the budget as ParseBudget reads it: "50/month", "0.25/day", "1000/total".
func (b Budget) String() string { return FormatMicros(b.Micros) + "/" + string(b.Period) }

// ParseBudget reads "<amount>/<day|month|total>", the amount a decimal in the price unit
// with at most six decimals ("50/month", "2.5/day").
func ParseBudget(s string) (Budget, error) {
	amount, period, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Budget{}, fmt.Errorf("budget %q: want <amount>/<day|month|total>, e.g. 50/month", s)
	}
	micros, err := ParseMicros(amount)
	if err != nil {
		return Budget{}, fmt.Errorf("budget %q: %v", s, err)
	}
	b := Budget{Micros: micros, Period: Period(strings.ToLower(strings.TrimSpace(period)))}
	return b, b.Validate()
}

// Validate checks the period and that the amount is not negative.
func (b Budget) Validate() error {
	switch b.Period {
	case PeriodDay, PeriodMonth, PeriodTotal:
	default:
		return fmt.Errorf("budget period %q: want day, month or total", b.Period)
	}
	if b.Micros < 0 {
		return errors.New("budget amount must not be negative")
	}
	if b.Micros > MaxBudgetMicros {
		return fmt.Errorf("budget amount %s is more than the most a budget may be, %s", FormatMicros(b.Micros), FormatMicros(MaxBudgetMicros))
	}
	return nil
}

// ParseMicros reads a non-negative decimal amount with at most six decimals into
// micro-units, exactly (no floating point).
func ParseMicros(s string) (int64, error) {
	s = strings.TrimSpace(s)
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 6 || strings.Trim(whole+frac, "0123456789") != "" {
		return 0, fmt.Errorf("amount %q: want a non-negative decimal with at most six decimals", s)
	}
	var w int64
	if whole != "" {
		v, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || v > math.MaxInt64/1_000_000-1 {
			return 0, fmt.Errorf("amount %q is too large", s)
		}
		w = v
	}
	f := int64(0)
	if frac != "" {
		v, _ := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		f = v
	}
	return w*1_000_000 + f, nil
}

// FormatMicros writes micro-units as a decimal without trailing zeros: 50000000 → "50",
// 2500000 → "2.5".
func FormatMicros(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	s := strconv.FormatInt(m/1_000_000, 10)
	if frac := m % 1_000_000; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%06d", frac), "0")
	}
	return sign + s
}

// Policy is the limits set on one key or project, each zero when not limited.
type Policy struct {
	// RPM is requests per minute.
	RPM int64 `json:"rpm,omitempty"`
	// TPM is tokens (input and output together) per minute.
	TPM int64 `json:"tpm,omitempty"`
	// Concurrency is how many requests may be in flight at once.
	Concurrency int64 `json:"concurrency,omitempty"`
	// Budget is the spend limit per period; nil when spend is not limited.
	Budget *Budget `json:"budget,omitempty"`
	// Models holds per-model variants, which apply to requests for that service model
	// on top of the policy itself. A variant has no Models of its own.
	Models map[string]*Policy `json:"models,omitempty"`
}

// UnmarshalJSON reads a policy, its budget as Budget does; "none" is no budget, as on
// the command line.
func (p *Policy) UnmarshalJSON(data []byte) error {
	type plain Policy
	var v struct {
		*plain
		Budget json.RawMessage            `json:"budget"` // these two shadow plain's
		Models map[string]json.RawMessage `json:"models"`
	}
	*p = Policy{}
	v.plain = (*plain)(p)
	// Strict, as Caddy reads its JSON: a misspelt limit must not pass as no limit.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	switch raw := bytes.TrimSpace(v.Budget); {
	case len(raw) == 0, string(raw) == "null", string(raw) == `"none"`:
		p.Budget = nil
	default:
		b := new(Budget)
		if err := json.Unmarshal(raw, b); err != nil {
			return err
		}
		p.Budget = b
	}
	for model, raw := range v.Models {
		var m *Policy
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("models.%s.%v", model, err)
		}
		if p.Models == nil {
			p.Models = make(map[string]*Policy, len(v.Models))
		}
		p.Models[model] = m
	}
	return nil
}

// IsZero reports a policy that limits nothing.
func (p *Policy) IsZero() bool {
	if p == nil {
		return true
	}
	if p.RPM != 0 || p.TPM != 0 || p.Concurrency != 0 || p.Budget != nil {
		return false
	}
	for _, v := range p.Models {
		if !v.IsZero() {
			return false
		}
	}
	return true
}

// Validate checks that every figure is non-negative, budgets are well formed, and
// per-model variants do not nest.
func (p *Policy) Validate() error {
	if p == nil {
		return nil
	}
	return p.validate(true)
}

func (p *Policy) validate(top bool) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", p.RPM}, {"tpm", p.TPM}, {"concurrency", p.Concurrency}} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative", f.name)
		}
		if f.v > MaxRate {
			return fmt.Errorf("%s %d is more than the most it may be, %d", f.name, f.v, int64(MaxRate))
		}
	}
	if p.Budget != nil {
		if err := p.Budget.Validate(); err != nil {
			return err
		}
	}
	if len(p.Models) > 0 && !top {
		return errors.New("a per-model limit cannot have per-model limits of its own")
	}
	for model, v := range p.Models {
		if strings.TrimSpace(model) == "" {
			return errors.New("per-model limit: empty model id")
		}
		if v == nil {
			return fmt.Errorf("model %q: empty limit", model)
		}
		if err := v.validate(false); err != nil {
			return fmt.Errorf("model %q: %v", model, err)
		}
	}
	return nil
}

// Scope names what a counter counts for: a key or a project, for all its models or for
// one (a per-model variant).
type Scope struct {
	Kind  ScopeKind
	ID    string
	Model string // empty: every model
}

// ScopeKind is "key", "project" or "member".
type ScopeKind string

// The kinds of scope.
const (
	ScopeKey     ScopeKind = "key"
	ScopeProject ScopeKind = "project"
	// ScopeMember is every key of one person in one project together; its ID is
	// MemberScopeID's.
	ScopeMember ScopeKind = "member"
)

// MemberScopeID names the member scope of a person's keys in a project:
// "<project>/<owner>" (a project id holds no '/').
func MemberScopeID(projectID, owner string) string { return projectID + "/" + owner }

// String is a stable name for the scope, used in counter names: "key:<id>" or
// "project:<id>", with "/model:<id>" for a per-model variant.
func (s Scope) String() string {
	out := string(s.Kind) + ":" + s.ID
	if s.Model != "" {
		out += "/model:" + s.Model
	}
	return out
}
