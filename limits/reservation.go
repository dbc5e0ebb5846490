package limits

import (
	"sync/atomic"
	"time"
)

// Reservation is what an admitted request holds until it ends.
type Reservation struct {
	l       *Limiter
	backend Counters
	id      string
	tokens  int64
	cost    int64
	settled atomic.Bool
	leased  bool // admitted from leases (lease.go): settled there
	items   []item
	buf     [8]item
	req     Allowance
	tok     Allowance
}

// itemKind is one counter a check touches.
type itemKind uint8

const (
	itemRequests itemKind = iota
	itemTokens
	itemSlot
	itemBudget
)

// item is one counter an Ask touches, and what the counters answered about it.
type item struct {
	scope       Scope
	ms          *memScope // the memory backend's state for scope, while it works on it
	lo          *leaseObj // its lease, in lease mode
	kind        itemKind
	check       int
	limit       int64
	take        int64
	period      Period
	start       int64 // budget: the reserve period's start, unix µs (0: total)
	end         int64 // budget: the reserve period's end, unix µs (0: total)
	seed        int64 // budget: the ledger's spend for the reserve period, -1: not asked yet
	settleStart int64 // budget: the settle period's start
	settleEnd   int64 // budget: the settle period's end
	settleSeed  int64 // budget: the ledger's spend for the settle period, -1: not asked yet

	// Answers.
	level    float64 // buckets: level before the take (memory)
	refused  bool
	needSeed bool
	wait     int64 // µs until it fits; -1: never
	after    int64 // buckets: whole units left; slots: in flight; budget: spent
	reset    int64 // buckets: µs until whole again
	held     int64 // budget: reserved by requests in flight
	spent    int64 // budget: the settle period's spend after Settle's cost, -1: not counted
}

// µs of a time, 0 for the zero time (a total budget's period bounds).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func (r *Reservation) plan(a Ask, now time.Time, seeder Seeder) {
	n := 0
	for i := range a.Checks {
		p := &a.Checks[i].Policy
		n++
		if p.RPM > 0 {
			n++
		}
		if p.TPM > 0 {
			n++
		}
		if p.Budget != nil {
			n++
		}
	}
	if n <= len(r.buf) {
		r.items = r.buf[:0]
	} else {
		r.items = make([]item, 0, n)
	}
	tokens := max(a.Tokens, 0)
	cost := max(a.CostMicros, 0)
	seed := int64(-1)
	if seeder == nil {
		seed = 0
	}
	for i := range a.Checks {
		c := &a.Checks[i]
		p := &c.Policy
		if p.RPM > 0 {
			r.items = append(r.items, item{scope: c.Scope, kind: itemRequests, check: i, limit: p.RPM, take: 1})
		}
		if p.TPM > 0 {
			r.items = append(r.items, item{scope: c.Scope, kind: itemTokens, check: i, limit: p.TPM, take: tokens})
		}
		if !c.SlotHeld {
			r.items = append(r.items, item{scope: c.Scope, kind: itemSlot, check: i, limit: p.Concurrency, take: 1})
		}
		if b := p.Budget; b != nil {
			r.items = append(r.items, item{scope: c.Scope, kind: itemBudget, check: i, limit: b.Micros, take: cost,
				period: b.Period, start: micros(b.Start(now)), end: micros(b.Reset(now)), seed: seed, settleSeed: seed})
		}
	}
}

func (r *Reservation) clearAnswers() {
	for i := range r.items {
		it := &r.items[i]
		it.refused, it.needSeed, it.wait, it.after, it.reset, it.held, it.level = false, false, 0, 0, 0, 0, 0
	}
}

func (r *Reservation) hasBudget() bool {
	for i := range r.items {
		if r.items[i].kind == itemBudget {
			return true
		}
	}
	return false
}

func (r *Reservation) decision() Decision {
	d := Decision{Reservation: r}
	for i := range r.items {
		it := &r.items[i]
		var a *Allowance
		switch it.kind {
		case itemRequests:
			a = &r.req
			if d.Requests != nil && it.after >= a.Remaining {
				continue
			}
			d.Requests = a
		case itemTokens:
			a = &r.tok
			if d.Tokens != nil && it.after >= a.Remaining {
				continue
			}
			d.Tokens = a
		default:
			continue
		}
		*a = Allowance{Limit: it.limit, Remaining: max(it.after, 0), Reset: time.Duration(it.reset) * time.Microsecond}
	}
	return d
}

func (r *Reservation) refusal(a Ask, now time.Time) *Refusal {
	var best *item
	// A budget with no room wins (waiting does not help), then a rate the request can
	// never fit, then the longest wait; a budget held only by requests in flight is a
	// wait of a second.
	rank := func(it *item) (int, int64) {
		switch {
		case it.kind == itemBudget && it.held > 0:
			return 1, heldBudgetWait
		case it.kind == itemBudget:
			return 3, 0
		case it.wait < 0:
			return 2, 0
		}
		return 1, it.wait
	}
	for i := range r.items {
		it := &r.items[i]
		if !it.refused {
			continue
		}
		if best == nil {
			best = it
			continue
		}
		rb, wb := rank(best)
		ri, wi := rank(it)
		if ri > rb || ri == rb && wi > wb {
			best = it
		}
	}
	if best == nil {
		return &Refusal{}
	}
	ref := &Refusal{Scope: best.scope, Limit: best.limit}
	switch best.kind {
	case itemRequests:
		ref.Kind = KindRequests
	case itemTokens:
		ref.Kind = KindTokens
	case itemSlot:
		ref.Kind = KindConcurrency
	case itemBudget:
		ref.Kind = KindBudget
		b := *a.Checks[best.check].Policy.Budget
		ref.Budget = &b
		ref.ResetAt = b.Reset(now)
		switch {
		case best.held > 0:
			ref.HeldMicros = best.held
			ref.RetryAfter = heldBudgetWait * time.Microsecond
		case !ref.ResetAt.IsZero() && best.take <= b.Micros:
			ref.RetryAfter = ref.ResetAt.Sub(now)
		}
		return ref
	}
	if best.wait > 0 {
		ref.RetryAfter = time.Duration(best.wait) * time.Microsecond
	}
	return ref
}

func anyNeedSeed(r *Reservation) bool {
	for i := range r.items {
		if r.items[i].needSeed {
			return true
		}
	}
	return false
}
