package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
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
	}
	return l
}

// Close releases the Limiter. It does not close a Redis client given to NewRedis: its
// owner does.
func (l *Limiter) Close() error { return l.shared.close() }

// Reservation is what an admitted request holds until it ends.
type Reservation struct {
	l       *Limiter
	backend Counters
	id      string
	tokens  int64
	cost    int64
	settled atomic.Bool
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
	scope  Scope
	ms     *memScope // the memory backend's state for scope, while it works on it
	kind   itemKind
	check  int
	limit  int64
	take   int64
	period Period
	start  int64 // budget: the reserve period's start, unix µs (0: total)
	end    int64 // budget: the reserve period's end, unix µs (0: total)
	seed   int64 // budget: the ledger's spend for the reserve period, -1: not asked yet
	sstart int64 // budget: the settle period's start
	send   int64 // budget: the settle period's end
	sseed  int64 // budget: the ledger's spend for the settle period, -1: not asked yet

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
				period: b.Period, start: micros(b.Start(now)), end: micros(b.Reset(now)), seed: seed, sseed: seed})
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

// outcome is what a backend's reserve answered.
type outcome uint8

const (
	admitted outcome = iota
	needsSeed
	refused
)

// backendError is a failure of the shared counters (not of the ledger).
type backendError struct{ err error }

func (e *backendError) Error() string { return "limits: shared counters: " + e.err.Error() }

// withoutAddress is a failure of the shared counters told without the server's address
// or host name (a dial error names both), so that it may be logged.
func withoutAddress(err error) error {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return errors.New("no answer within the timeout")
	case errors.As(err, &dns):
		return errors.New("host name lookup failed: " + dns.Err)
	case errors.As(err, &op):
		if op.Err != nil {
			return fmt.Errorf("%s: %w", op.Op, op.Err)
		}
		return errors.New(op.Op + " failed")
	}
	return err
}
func (e *backendError) Unwrap() error { return e.err }

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

// call runs one backend call, bounded by the Timeout when the backend is Redis.
func (l *Limiter) call(ctx context.Context, c Counters, f func(context.Context) (outcome, error)) (outcome, error) {
	if c != Counters(l.redis) || l.redis == nil {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	out, err := f(ctx)
	if err != nil {
		return out, &backendError{err}
	}
	return out, nil
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
			start = it.sstart
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
			it.sseed = max(v, 0)
		} else {
			it.seed = max(v, 0)
		}
	}
	return nil
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
	if l.redis != nil {
		ctx = context.WithoutCancel(ctx)
	}
	tokens, costMicros = max(tokens, 0), max(costMicros, 0)
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
			it.sstart, it.send = micros(b.Start(now)), micros(b.Reset(now))
			if it.sstart != it.start {
				it.sseed = -1
				if l.seeder == nil {
					it.sseed = 0
				}
			} else {
				it.sseed = it.seed
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

// BudgetCrossing is a settled request taking a scope's spend in a budget period from
// below Threshold percent of the budget to at least it.
type BudgetCrossing struct {
	Scope       Scope
	Budget      Budget
	PeriodStart time.Time // zero for PeriodTotal
	Threshold   int       // percent
	SpentMicros int64     // the period's spend after the request, as the counters hold it
}

// BudgetWatch is told of every threshold a settle crosses. Spend counted by no counter
// (a period's counter not seeded yet, or the shared counters away) crosses nothing: the
// ledger holds it, and the next counted request that passes a threshold tells.
type BudgetWatch struct {
	Thresholds []int // percents, each in 1..1000
	// Notify is called on the settling request's goroutine: it must not block.
	Notify func(BudgetCrossing)
}

// notice calls Notify for each threshold t with before < t% of the limit <= after, where
// after is the counted spend and before is after less this request's cost.
func (w *BudgetWatch) notice(r *Reservation, cost int64, now time.Time) {
	for i := range r.items {
		it := &r.items[i]
		if it.kind != itemBudget || it.spent < 0 || it.limit <= 0 {
			continue
		}
		after := it.spent
		before := after - cost
		for _, t := range w.Thresholds {
			// t% of the limit, rounded down, without limit*t (limits reach 2^60).
			mark := it.limit/100*int64(t) + it.limit%100*int64(t)/100
			if before < mark && mark <= after {
				start := time.Time{}
				if it.sstart != 0 {
					start = time.UnixMicro(it.sstart).UTC()
				}
				w.Notify(BudgetCrossing{Scope: it.scope, Budget: Budget{Micros: it.limit, Period: it.period},
					PeriodStart: start, Threshold: t, SpentMicros: after})
			}
		}
	}
}

// WatchBudgets makes w hear the budget crossings of every settle, replacing any other
// watch (a reload's configuration takes over from the previous one's).
func (l *Limiter) WatchBudgets(w *BudgetWatch) { l.budgetWatch.Store(w) }

// UnwatchBudgets stops w hearing crossings, unless another watch has replaced it.
func (l *Limiter) UnwatchBudgets(w *BudgetWatch) { l.budgetWatch.CompareAndSwap(w, nil) }

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
			r.items[i].sseed = -1
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

func anyNeedSeed(r *Reservation) bool {
	for i := range r.items {
		if r.items[i].needSeed {
			return true
		}
	}
	return false
}

// sharedUsable reports whether this request should use the shared counters: yes while
// they answer; while they do not, one request every RetryEvery tries them again (after
// resynchronising what was counted elsewhere meanwhile).
func (l *Limiter) sharedUsable(ctx context.Context) bool {
	if !l.down.Load() {
		return true
	}
	since := time.Since(l.base)
	if since-time.Duration(l.lastTry.Load()) < l.retryEvery || !l.probing.CompareAndSwap(false, true) {
		return false
	}
	defer l.probing.Store(false)
	l.lastTry.Store(int64(time.Since(l.base)))
	pctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.redis.resync(pctx); err != nil {
		return false
	}
	l.markUp()
	return true
}

func (l *Limiter) markDown(err error) {
	err = withoutAddress(err)
	l.downMu.Lock()
	defer l.downMu.Unlock()
	l.lastTry.Store(int64(time.Since(l.base)))
	if l.down.Swap(true) {
		return
	}
	if l.onDown != nil {
		l.onDown(err)
	}
}

func (l *Limiter) markUp() {
	l.downMu.Lock()
	defer l.downMu.Unlock()
	if !l.down.Swap(false) {
		return
	}
	// What the fallback counted is stale by the next outage: seed again then.
	l.fallback.unseed()
	if l.onDown != nil {
		l.onDown(nil)
	}
}

// Status is one check's standing: its scope's spend in the current budget period (of
// the current month without a budget, from the ledger), what is reserved by requests in
// flight, what is left of each per-minute allowance, and how many requests are in
// flight. While the shared counters do not answer, the figures are this gateway's
// fallback counters (the ledger's spend for a budget they have not counted).
func (l *Limiter) Status(ctx context.Context, c Check) (*Status, error) {
	now := l.now()
	r := &Reservation{l: l}
	r.plan(Ask{Checks: []Check{c}}, now, l.seeder)
	var backend Counters = l.shared
	if l.fallback != nil && l.down.Load() {
		backend = l.fallback
	}
	_, err := l.call(ctx, backend, func(ctx context.Context) (outcome, error) { return 0, backend.peek(ctx, r, now.UnixMicro()) })
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

// Bucket arithmetic, shared by both backends (the Redis script does the same in Lua):
// a bucket holds up to limit units and refills continuously at limit per minute.
const minuteMicros = 60_000_000

// refill is the bucket's level at now, from level at at.
func refill(level float64, at, now, limit int64) float64 {
	if now > at {
		level += float64(now-at) * float64(limit) / minuteMicros
	}
	return math.Min(level, float64(limit))
}

// waitFor is how long until the bucket holds take, in µs; -1 when it never can.
func waitFor(level float64, take, limit int64) int64 {
	if take > limit {
		return -1
	}
	return int64(math.Ceil((float64(take)-level)*minuteMicros/float64(limit) - ceilSlack))
}

// fullIn is how long until the bucket is whole again, in µs.
func fullIn(level float64, limit int64) int64 {
	return max(int64(math.Ceil((float64(limit)-level)*minuteMicros/float64(limit)-ceilSlack)), 0)
}

// ceilSlack keeps a rounding error of the float arithmetic (0.6 computed as
// 0.6000000000000001) from adding a microsecond to a wait.
const ceilSlack = 1e-6
