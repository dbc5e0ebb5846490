package limits

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Status is one check's standing: its scope's spend in the current budget period (of
// the current month without a budget, from the ledger), what is reserved by requests in
// flight, what is left of each per-minute allowance, and how many requests are in
// flight. Through leases, this gateway's own leases are counted as what they hold for
// requests (allowance taken and unused is left, spend settled here is spent); another
// gateway's hold as used. While the shared counters do not answer, the figures are this gateway's
// fallback counters (the ledger's spend for a budget they have not counted).
func (l *Limiter) Status(ctx context.Context, c Check) (*Status, error) {
	now := l.now()
	r := &Reservation{l: l}
	r.plan(Ask{Checks: []Check{c}}, now, l.seeder)
	var backend Counters = l.shared
	if l.fallback != nil && l.down.Load() {
		backend = l.fallback
	}
	var leased []*leaseObj
	if l.book != nil && backend == l.shared {
		// No call about these leases while Redis is read and the figures are put together.
		leased = l.book.holdFor(r)
		defer l.book.release(leased)
	}
	_, err := l.call(ctx, backend, func(ctx context.Context) (outcome, error) { return 0, backend.peek(ctx, r, now.UnixMicro()) })
	if err == nil && leased != nil {
		l.book.adjust(r)
	}
	if err != nil {
		var be *backendError
		if !errors.As(err, &be) {
			return nil, err
		}
		l.markDown(be.err)
		r.clearAnswers()
		if err := l.fallback.peek(ctx, r, now.UnixMicro()); err != nil {
			return nil, err
		}
	}
	st := &Status{Scope: c.Scope.String(), Policy: c.Policy}
	st.Policy.Models = nil
	for i := range r.items {
		it := &r.items[i]
		switch it.kind {
		case itemRequests, itemTokens:
			a := &Allowance{Limit: it.limit, Remaining: max(it.after, 0), Reset: time.Duration(it.reset) * time.Microsecond}
			if it.kind == itemRequests {
				st.Requests = a
			} else {
				st.Tokens = a
			}
		case itemSlot:
			st.InFlight = it.after
		case itemBudget:
			if it.needSeed {
				if err := l.seed(ctx, r, false); err != nil {
					return nil, err
				}
				it.after = it.seed
			}
			b := c.Policy.Budget
			st.SpentMicros, st.ReservedMicros = it.after, it.held
			rem := max(b.Micros-it.after-it.held, 0)
			st.RemainingMicros = &rem
			st.PeriodStart, st.ResetAt = b.Start(now), b.Reset(now)
		}
	}
	if c.Policy.Budget == nil && l.seeder != nil {
		month := Budget{Period: PeriodMonth}.Start(now)
		v, err := l.seeder(ctx, c.Scope, month)
		if err != nil {
			return nil, fmt.Errorf("%w: the ledger's spend: %v", ErrUnavailable, err)
		}
		st.SpentMicros = v
	}
	return st, nil
}

// Allowance is what is left of a rate limit: Limit per minute, Remaining now, and Reset,
// how long until the allowance is whole again.
type Allowance struct {
	Limit     int64         `json:"limit"`
	Remaining int64         `json:"remaining"`
	Reset     time.Duration `json:"reset_ns"`
}

// Status is one scope's standing, for the admin API and the console: spend this budget
// period against the budget, and what is left of each rate limit.
type Status struct {
	Scope  string `json:"scope"`
	Policy Policy `json:"policy"`
	// SpentMicros is the settled spend of the budget's current period (for a scope
	// without a budget: of the current month); ReservedMicros is held by requests in
	// flight.
	SpentMicros    int64 `json:"spent_micros"`
	ReservedMicros int64 `json:"reserved_micros"`
	// RemainingMicros is the budget left (never negative); absent without a budget.
	RemainingMicros *int64    `json:"remaining_micros,omitempty"`
	PeriodStart     time.Time `json:"period_start,omitzero"`
	ResetAt         time.Time `json:"reset_at,omitzero"`
	// Requests and Tokens are the per-minute allowances; nil when not limited.
	Requests *Allowance `json:"requests,omitempty"`
	Tokens   *Allowance `json:"tokens,omitempty"`
	InFlight int64      `json:"in_flight"`
}
