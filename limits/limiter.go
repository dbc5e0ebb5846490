package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Check is one limit a request must fit: the scope it counts in and that scope's figures
// (RPM, TPM, Concurrency, Budget of Policy are used; Policy.Models is ignored here: the
// caller turns a per-model variant into its own Check with Scope.Model set). The Checks of
// one Ask must name distinct scopes.
type Check struct {
	Scope  Scope
	Policy Policy
	// SlotHeld says the request already holds its in-flight slot in this scope, through
	// another reservation (admission's first phase, taken before the body is read): this
	// one takes none, so the request counts once.
	SlotHeld bool
}

// Ask is one request's admission.
type Ask struct {
	ID         string  // the request id; names the reservation (unique per request, across gateways)
	Checks     []Check // every limit on the request's path (key, key/model, project, project/model)
	Tokens     int64   // worst case: estimated input + output cap
	CostMicros int64   // worst case cost in micro-units
}

// Kind is the kind of limit that refused a request.
type Kind string

// The kinds of limit.
const (
	KindRequests    Kind = "requests"
	KindTokens      Kind = "tokens"
	KindConcurrency Kind = "concurrency"
	KindBudget      Kind = "budget"
)

// Refusal says which limit refused a request. When several limits refuse one Ask, it
// names a budget if one refused (waiting a little does not help), else a rate that the
// request can never fit, else the limit with the longest wait.
type Refusal struct {
	Scope Scope
	Kind  Kind
	// Limit is the figure: rpm, tpm, concurrency, or budget micros.
	Limit int64
	// RetryAfter is the real wait until the request would fit. Rates: the exact time
	// until the bucket holds what the request needs; 0 when the request needs more than
	// the whole per-minute allowance (tokens > TPM), since it can never fit. Concurrency:
	// a hint of one second (a slot frees when another request ends). Budget: until the
	// period resets; 0 for PeriodTotal, and 0 when the request's cost alone exceeds the
	// whole budget.
	RetryAfter time.Duration
	// Budget is the refusing budget, for KindBudget.
	Budget *Budget
	// ResetAt is the refusing budget's period end, for KindBudget (zero for PeriodTotal).
	ResetAt time.Time
	// HeldMicros, for KindBudget, is what requests in flight hold in the refusing budget
	// when they alone stand in the way (the settled spend leaves room for this request);
	// it frees as they end, so RetryAfter is then a short hint, as for concurrency. Zero
	// when the spend itself leaves no room.
	HeldMicros int64
}

// Decision is the answer to an Ask.
type Decision struct {
	Refused     *Refusal     // nil: admitted
	Requests    *Allowance   // tightest requests-per-minute allowance after this request; nil when no RPM applies
	Tokens      *Allowance   // tightest tokens-per-minute allowance after this request; nil when no TPM applies
	Reservation *Reservation // set when admitted; Settle must be called exactly once on every path
}

// ErrUnavailable is returned by Reserve for a request with a budget on its path while the
// budget cannot be counted: the shared counters do not answer (and
// Options.BudgetWhenUnreachable is "refuse"), or the ledger query that seeds a period's
// spend fails. The request should be refused (503), not let through unmetered.
var ErrUnavailable = errors.New("limits: spend counters unavailable")

// Seeder reports the ledger's spend of a scope since a time (the zero time: ever). It
// seeds a budget period's counter the first time it is used, so that a restart, a lost
// Redis counter or a rollover never resets anyone's spend.
type Seeder func(ctx context.Context, scope Scope, since time.Time) (spentMicros int64, err error)

// Options tune a Limiter.
type Options struct {
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Seeder is the ledger's spend of a scope since a time; nil: 0.
	Seeder Seeder
	// Lease is how long a reservation (and a concurrency slot) lives if never settled,
	// e.g. held by a gateway that crashed; default 15m.
	Lease time.Duration
	// BudgetWhenUnreachable is "refuse" (the default: a request with a budget on its path
	// gets ErrUnavailable while the shared counters or the seeding query fail) or "local"
	// (count in this gateway's memory meanwhile, seeded from the ledger). Rate and
	// concurrency limits always fall back to local counting.
	BudgetWhenUnreachable string
	// Exact makes shared counters answer every request in Redis, one round trip each,
	// rather than through leases (lease.go): no refusal while another gateway holds
	// unused allowance, at the cost of a round trip per request. Memory counters are
	// exact already.
	Exact bool
	// LeaseLife is how long a lease lives in Redis unless renewed (a gateway renews its
	// leases well before); one that lapses, its gateway gone, is swept; default 30s.
	// LeaseIdle is how long a lease goes unused before it gives back what it holds;
	// default 2s. LeaseTick is how often the leases are looked after; default 1s.
	LeaseLife, LeaseIdle, LeaseTick time.Duration
	// OnUnreachable is told once when the shared counters stop answering (with the
	// error, told without the server's address or host name), once (nil) when they
	// answer again.
	OnUnreachable func(err error)
	// Timeout bounds each call to the shared counters, so that a Redis that stopped
	// answering cannot stall requests; default 500ms.
	Timeout time.Duration
	// SettleEvery bounds how long a settlement in Redis waits for this gateway's next
	// call to Redis to carry it before it is sent on its own; default 2ms.
	SettleEvery time.Duration
	// RetryEvery is how often, while the shared counters do not answer, one request tries
	// them again (the others count locally meanwhile); default 1s.
	RetryEvery time.Duration
}

// Limiter admits requests against their limits. It is safe for concurrent use.
type Limiter struct {
	shared   Counters       // the counters in charge: memory or Redis
	redis    *redisCounters // shared, when it is Redis
	fallback *memory        // local counting while Redis does not answer; nil without Redis
	local    *memory        // this gateway's own counts (ReserveLocal); nil without Redis
	book     *leaseBook     // leases, with Redis unless Exact

	now        func() time.Time
	seeder     Seeder
	lease      int64 // µs
	localSpend bool
	onDown     func(error)
	timeout    time.Duration
	retryEvery time.Duration

	down    atomic.Bool
	probing atomic.Bool
	lastTry atomic.Int64 // monotonic ns (since base) of the last attempt while down
	base    time.Time

	downMu sync.Mutex // serialises the up/down transitions and their notices

	budgetWatch atomic.Pointer[BudgetWatch] // nil: nobody listens
}

// New returns a Limiter over c. With Redis counters it also keeps a memory fallback,
// used while Redis does not answer.
func New(c Counters, opts Options) *Limiter {
	l := &Limiter{
		shared:     c,
		now:        opts.Now,
		seeder:     opts.Seeder,
		lease:      int64(opts.Lease / time.Microsecond),
		localSpend: opts.BudgetWhenUnreachable == "local",
		onDown:     opts.OnUnreachable,
		timeout:    opts.Timeout,
		retryEvery: opts.RetryEvery,
		base:       time.Now(),
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.lease <= 0 {
		l.lease = int64(15 * time.Minute / time.Microsecond)
	}
	if l.timeout <= 0 {
		l.timeout = 500 * time.Millisecond
	}
	if l.retryEvery <= 0 {
		l.retryEvery = time.Second
	}
	if rc, ok := c.(*redisCounters); ok {
		l.redis = rc
		l.fallback = newMemory()
		l.local = newMemory()
		rc.settleEvery, rc.timeout = opts.SettleEvery, l.timeout
		if !opts.Exact {
			l.book = newLeaseBook(l, rc, opts)
		}
	}
	return l
}

// Close releases the Limiter. It does not close a Redis client given to NewRedis: its
// owner does.
func (l *Limiter) Close() error {
	if l.book != nil {
		l.book.close()
	}
	return l.shared.close()
}

// Reserve decides an Ask: every check fits, and the request's worst case is reserved
// in all of them, or one refuses and nothing is reserved anywhere. It returns
// ErrUnavailable (wrapped) when a budget on the request's path cannot be counted; other
// errors are the context's.
func (l *Limiter) Reserve(ctx context.Context, a Ask) (Decision, error) {
	now := l.now()
	r := l.planned(a, now)
	if len(r.items) == 0 {
		return Decision{Reservation: r}, nil
	}
	if l.fallback == nil {
		return l.reserveOn(ctx, l.shared, r, a, now)
	}
	if l.book != nil {
		d, err, handled := l.book.reserve(ctx, r, a, now)
		if handled {
			return d, err
		}
		r.clearAnswers()
	}
	var cause error
	if l.sharedUsable(ctx) {
		d, err := l.reserveOn(ctx, l.shared, r, a, now)
		var be *backendError
		if !errors.As(err, &be) {
			return d, err
		}
		// A call that timed out may still have run: release whatever it reserved once
		// Redis answers again, rather than hold it for the lease.
		l.redis.markStale(r, false, false)
		if ctx.Err() != nil {
			return Decision{}, ctx.Err()
		}
		l.markDown(be.err)
		cause = withoutAddress(be.err)
	}
	if r.hasBudget() && !l.localSpend {
		if cause == nil {
			cause = errors.New("not answering")
		}
		return Decision{}, fmt.Errorf("%w: shared counters: %v", ErrUnavailable, cause)
	}
	r.clearAnswers()
	return l.reserveOn(ctx, l.fallback, r, a, now)
}

// planned is a's reservation with its items planned; one with none has nothing to
// reserve and is settled already.
func (l *Limiter) planned(a Ask, now time.Time) *Reservation {
	r := &Reservation{l: l, id: a.ID, tokens: max(a.Tokens, 0), cost: max(a.CostMicros, 0)}
	r.plan(a, now, l.seeder)
	if len(r.items) == 0 {
		r.settled.Store(true)
	}
	return r
}

// Shared reports whether the Limiter's counters are shared with other gateways (Redis).
func (l *Limiter) Shared() bool { return l.redis != nil }

// ReserveLocal decides a against counters of this gateway's own, in its memory, whatever
// the Limiter's counters are: for a check that must be made before a round trip to the
// shared counters is worth it, such as a key's concurrency before its body is read (a
// gateway alone can never rightly hold more of a key's requests than the key's
// concurrency, so this bounds what one gateway reads for it without asking Redis).
// Counters in memory are local already: it is Reserve.
func (l *Limiter) ReserveLocal(ctx context.Context, a Ask) (Decision, error) {
	if l.local == nil {
		return l.Reserve(ctx, a)
	}
	now := l.now()
	r := l.planned(a, now)
	if len(r.items) == 0 {
		return Decision{Reservation: r}, nil
	}
	return l.reserveOn(ctx, l.local, r, a, now)
}

// heldBudgetWait is the retry hint, in µs, for a budget held only by requests in flight.
const heldBudgetWait = 1_000_000

func (l *Limiter) reserveOn(ctx context.Context, c Counters, r *Reservation, a Ask, now time.Time) (Decision, error) {
	nowUS := now.UnixMicro()
	for attempt := 0; attempt < 3; attempt++ {
		out, err := l.call(ctx, c, func(ctx context.Context) (outcome, error) { return c.reserve(ctx, r, nowUS, l.lease) })
		if err != nil {
			return Decision{}, err
		}
		switch out {
		case admitted:
			r.backend = c
			return r.decision(), nil
		case refused:
			return Decision{Refused: r.refusal(a, now)}, nil
		}
		if err := l.seed(ctx, r, false); err != nil {
			return Decision{}, err
		}
		r.clearAnswers()
	}
	return Decision{}, fmt.Errorf("%w: a budget counter could not be seeded", ErrUnavailable)
}

// seed asks the ledger for the spend of every budget item that needs it: the reserve
// period's (settle false) or the settle period's.
func (l *Limiter) seed(ctx context.Context, r *Reservation, settle bool) error {
	for i := range r.items {
		it := &r.items[i]
		if !it.needSeed {
			continue
		}
		start := it.start
		if settle {
			start = it.settleStart
		}
		var since time.Time
		if start != 0 {
			since = time.UnixMicro(start).UTC()
		}
		v, err := l.seeder(ctx, it.scope, since)
		if err != nil {
			return fmt.Errorf("%w: the ledger's spend: %v", ErrUnavailable, err)
		}
		if settle {
			it.settleSeed = max(v, 0)
		} else {
			it.seed = max(v, 0)
		}
	}
	return nil
}

// Settle ends a reservation: the request used tokens (input and output) and cost
// costMicros (0 when it never reached an upstream). The token buckets are corrected to
// the actual count (a refund when less, a further take when more: a bucket may go below
// zero, and later requests wait), the concurrency slots are freed, each budget's
// reservation is released and the cost is added to the spend of the period holding the
// settle time. It is called exactly once per admitted request; later calls, and calls
// on nil, do nothing. With counters in Redis it does not wait for Redis: the settlement
// is queued, and goes ahead of this gateway's next call to Redis or within SettleEvery
// (Flush and Close send it at once). It does not use ctx's cancellation (a client that left must still
// settle), only its values.
func (r *Reservation) Settle(ctx context.Context, tokens, costMicros int64) {
	if r == nil || !r.settled.CompareAndSwap(false, true) {
		return
	}
	l := r.l
	tokens, costMicros = max(tokens, 0), max(costMicros, 0)
	if r.leased {
		l.book.settle(r, tokens, costMicros, l.now())
		return
	}
	if l.redis != nil {
		ctx = context.WithoutCancel(ctx)
	}
	now := l.now()
	nowUS := now.UnixMicro()
	hasBudget := false
	for i := range r.items {
		it := &r.items[i]
		it.needSeed = false
		if it.kind == itemBudget {
			hasBudget = true
			it.spent = -1
			b := Budget{Period: it.period}
			it.settleStart, it.settleEnd = micros(b.Start(now)), micros(b.Reset(now))
			if it.settleStart != it.start {
				it.settleSeed = -1
				if l.seeder == nil {
					it.settleSeed = 0
				}
			} else {
				it.settleSeed = it.seed
			}
		}
	}
	switch {
	case r.backend == Counters(l.fallback) && l.fallback != nil:
		// Counted locally: release locally. The spend goes to the counters in charge.
		_ = r.backend.settle(ctx, r, tokens, costMicros, nowUS, false, false)
		if hasBudget && costMicros > 0 {
			l.spendShared(ctx, r, costMicros, nowUS)
		}
	case l.redis != nil && r.backend == Counters(l.redis):
		// Off the request's path: queued, sent with the next call to Redis or within
		// SettleEvery; the budget watch hears the spend once Redis has counted it.
		l.settleLater(&pendingSettle{r: r, tokens: tokens, cost: costMicros, now: now, notice: hasBudget && costMicros > 0})
		return
	default:
		l.settleOn(ctx, r.backend, r, tokens, costMicros, nowUS)
	}
	if hasBudget && costMicros > 0 {
		if w := l.budgetWatch.Load(); w != nil {
			w.notice(r, costMicros, now)
		}
	}
}

// settleOn settles on the backend that holds the reservation, seeding the settle
// period's spend when its counter does not exist yet (a rollover).
func (l *Limiter) settleOn(ctx context.Context, c Counters, r *Reservation, tokens, cost, now int64) {
	addOnly := false
	for attempt := 0; attempt < 3; attempt++ {
		_, err := l.call(ctx, c, func(ctx context.Context) (outcome, error) {
			return 0, c.settle(ctx, r, tokens, cost, now, addOnly, true)
		})
		if err != nil {
			var be *backendError
			if errors.As(err, &be) {
				// The spend is in the ledger but not in the shared counters: they take it
				// from there once they answer again. The reservation lapses with its lease.
				l.markDown(be.err)
				l.redis.markStale(r, true, addOnly)
			}
			return
		}
		if !anyNeedSeed(r) || l.seed(ctx, r, true) != nil {
			// A failed seeding leaves the settle period's counter absent: the next
			// reservation seeds it from the ledger, which holds this request.
			return
		}
		addOnly = true
	}
}

// spendShared adds the cost of a request counted locally to the shared counters, or
// notes it for when they answer again.
func (l *Limiter) spendShared(ctx context.Context, r *Reservation, cost, now int64) {
	for i := range r.items {
		if r.items[i].kind == itemBudget {
			r.items[i].needSeed = true // take part in the add-only pass
			r.items[i].settleSeed = -1
		}
	}
	if l.down.Load() {
		l.redis.markStale(r, true, true)
		return
	}
	// Only where the shared counter exists: one that does not is seeded from the ledger,
	// which holds this request.
	_, err := l.call(ctx, l.shared, func(ctx context.Context) (outcome, error) {
		return 0, l.shared.settle(ctx, r, 0, cost, now, true, false)
	})
	var be *backendError
	if errors.As(err, &be) {
		l.markDown(be.err)
		l.redis.markStale(r, true, true)
	}
}

// Bucket arithmetic, shared by both backends (the Redis script does the same in Lua):
// a bucket holds up to limit units and refills continuously at limit per minute.
const minuteMicros = 60_000_000

// ceilSlack keeps a rounding error of the float arithmetic (0.6 computed as
// 0.6000000000000001) from adding a microsecond to a wait.
const ceilSlack = 1e-6
