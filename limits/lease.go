package limits

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Leases (the default with Redis): a gateway takes allowance from a counter in Redis in
// batches, one lease per scope and kind of limit, and admits requests from it in memory.
// A lease holds what its requests in flight hold, and beyond that at most an eighth of
// what remained in the counter after the request that took it, in whole requests like
// that one (see leaseScript); so far from a limit one call serves many requests, and
// within nine requests of it a lease holds nothing more and every request asks Redis, as
// in exact mode. Allowance a lease holds beyond that share (tokens and spend refunded by
// requests that used less than they reserved, slots freed) is given back at once, and
// everything a lease holds beyond its requests in flight when it has been idle for
// LeaseIdle, when the limit's figure changes, and at Close.
//
// What this changes against exact mode: nothing is admitted past a limit (every request
// spends allowance taken from the shared counter before it); a request may be refused
// while another gateway holds unused allowance in a lease: at most that gateway's share.

// Default timings of the leases.
const (
	defaultLeaseLife = 30 * time.Second // a lease not renewed lapses in Redis after this
	defaultLeaseIdle = 2 * time.Second
	defaultLeaseTick = time.Second
	maxLeaseBatch    = 1024 // requests' worth a lease asks for beyond its request, at most
	minLeaseBatch    = 4
	maxLeases        = 100_000 // leases kept in memory; beyond, requests count in exact mode
)

// LeaseStats count what the leases did, since the Limiter was made.
type LeaseStats struct {
	Local    int64 // asks admitted from leases in memory, without a call to Redis
	Renewals int64 // calls to Redis that took, resized or gave back leases
	Refused  int64 // asks refused by a lease call
}

type leaseKey struct {
	scope  Scope
	kind   itemKind
	limit  int64
	period Period
	start  int64 // budget: the period's start, µs
	end    int64 // budget: the period's end, µs (0: total)
}

// leaseObj is one lease. Its counts are under the book's mu; renewMu is held by the one
// call to Redis about it at a time.
type leaseObj struct {
	key     leaseKey
	id      uint64
	renewMu sync.Mutex

	renewing bool  // a call about it is on its way: nothing is taken from it meanwhile
	unused   int64 // allowance held and not in use (tokens: negative when used past it)
	inflight int64 // slots: requests holding one; budget: micros reserved by requests in flight
	pending  int64 // budget: spend settled here and not yet added in Redis
	last     int64 // slots: the highest member number it may have in the set
	spare    int64 // the most it may hold unused: the extra of its last grant
	needSeed bool  // budget: its counter is absent, and it has spend to add
	seed     int64 // budget: the ledger's spend to seed it with, -1: none
	batch    int64 // requests' worth to ask for beyond the asking one
	level    int64 // buckets: whole units left in Redis after the last call
	reset    int64 // buckets: µs to full after the last call
	at       time.Time
	lastUse  time.Time
	lastSent time.Time
	lastGrow time.Time
}

func (o *leaseObj) holdsInRedis() bool {
	return o.unused != 0 || o.inflight > 0 || o.pending > 0 || o.last > 0
}

// fits reports whether take can be admitted from the lease now.
func (o *leaseObj) fits(take int64) bool {
	if o.renewing {
		return false
	}
	if o.key.kind == itemSlot {
		// Without a limit, a slot only counts this gateway's requests in flight.
		return o.unused >= 1 || o.key.limit <= 0
	}
	return o.unused >= take
}

func (o *leaseObj) take(it *item, now time.Time) {
	o.lastUse = now
	o.move(it, 1)
}

// untake gives back what take took: for an ask refused by another of its limits.
func (o *leaseObj) untake(it *item) { o.move(it, -1) }

// move takes its share out of unused into use (sign 1), or puts it back (sign -1).
func (o *leaseObj) move(it *item, sign int64) {
	n := it.take
	if o.key.kind == itemSlot {
		n = 1
	}
	o.unused -= sign * n
	if o.key.kind == itemSlot || o.key.kind == itemBudget {
		o.inflight += sign * n
	}
}

// leaseBook is a gateway's leases.
type leaseBook struct {
	l    *Limiter
	rc   *redisCounters
	gw   string // this gateway's id in Redis: "L:" and random hex
	life time.Duration
	idle time.Duration

	mu     sync.Mutex
	objs   map[leaseKey]*leaseObj
	nextID uint64
	closed bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	local, renewals, refused atomic.Int64
}

func newLeaseBook(l *Limiter, rc *redisCounters, opts Options) *leaseBook {
	var id [8]byte
	_, _ = rand.Read(id[:])
	b := &leaseBook{l: l, rc: rc, gw: "L:" + hex.EncodeToString(id[:]), life: opts.LeaseLife, idle: opts.LeaseIdle,
		objs: make(map[leaseKey]*leaseObj), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if b.life <= 0 {
		b.life = defaultLeaseLife
	}
	if b.idle <= 0 {
		b.idle = defaultLeaseIdle
	}
	tick := opts.LeaseTick
	if tick <= 0 {
		tick = defaultLeaseTick
	}
	go b.run(tick)
	return b
}

// LeaseStats reports what the leases did; zero without leases.
func (l *Limiter) LeaseStats() LeaseStats {
	if l.book == nil {
		return LeaseStats{}
	}
	return LeaseStats{Local: l.book.local.Load(), Renewals: l.book.renewals.Load(), Refused: l.book.refused.Load()}
}

// attach finds (or makes) the lease of each item of r (under mu); false when there are
// too many leases to keep (the ask then goes to Redis as in exact mode).
func (b *leaseBook) attach(r *Reservation) bool {
	if b.closed {
		return false
	}
	for i := range r.items {
		it := &r.items[i]
		it.lo = nil
		o := b.objOf(keyOf(it))
		if o == nil {
			return false
		}
		it.lo = o
	}
	return true
}

// objOf is the lease of k, made when new (under mu); nil when there are too many.
func (b *leaseBook) objOf(k leaseKey) *leaseObj {
	o := b.objs[k]
	if o == nil {
		if len(b.objs) >= maxLeases {
			return nil
		}
		b.nextID++
		o = &leaseObj{key: k, id: b.nextID, batch: minLeaseBatch, seed: -1}
		b.objs[k] = o
	}
	return o
}

// keyOf is the lease key of an item.
func keyOf(it *item) leaseKey {
	k := leaseKey{scope: it.scope, kind: it.kind, limit: it.limit}
	if it.kind == itemBudget {
		k.period, k.start, k.end = it.period, it.start, it.end
	}
	return k
}

// holdFor locks the calls about the leases of r's items that exist (for Status to read
// Redis and them together); release unlocks them.
func (b *leaseBook) holdFor(r *Reservation) []*leaseObj {
	b.mu.Lock()
	objs := make([]*leaseObj, 0, len(r.items))
	for i := range r.items {
		if o := b.objs[keyOf(&r.items[i])]; o != nil {
			objs = append(objs, o)
		}
	}
	b.mu.Unlock()
	lockCalls(objs)
	return objs
}

// byID orders leases as every caller that holds several leases' calls takes them.
func byID(objs []*leaseObj) {
	slices.SortFunc(objs, func(x, y *leaseObj) int { return cmp.Compare(x.id, y.id) })
}

// lockCalls holds the calls about objs, taken in the order of their ids (so that two
// callers never wait on each other); release lets them go.
func lockCalls(objs []*leaseObj) {
	byID(objs)
	for _, o := range objs {
		o.renewMu.Lock()
	}
}

func (b *leaseBook) release(objs []*leaseObj) {
	for _, o := range objs {
		o.renewMu.Unlock()
	}
}

// adjust turns the standing Redis gave r's items (peek) into what requests hold: this
// gateway's allowance taken and unused is left, its spend settled here and not added
// yet is spent, its slots held beyond its requests in flight are free.
func (b *leaseBook) adjust(r *Reservation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range r.items {
		it := &r.items[i]
		o := b.objs[keyOf(it)]
		if o == nil {
			continue
		}
		switch it.kind {
		case itemRequests, itemTokens:
			it.after = min(it.after+max(o.unused, 0), it.limit)
			if it.after >= it.limit {
				it.reset = 0
			}
		case itemSlot:
			it.after = max(it.after-(o.last-o.inflight), 0)
		case itemBudget:
			if !it.needSeed {
				it.after += o.pending
			}
			it.held = max(it.held-max(o.unused, 0)-o.pending, 0)
		}
	}
}

// takeAll admits r from its leases, all or nothing; short lists the items that do not
// fit (nothing taken then).
func (b *leaseBook) takeAll(r *Reservation, now time.Time, skip []bool) (short []int) {
	for i := range r.items {
		it := &r.items[i]
		if it.lo == nil || skip != nil && skip[i] {
			continue
		}
		if !it.lo.fits(it.take) {
			short = append(short, i)
		}
	}
	if len(short) > 0 {
		return short
	}
	for i := range r.items {
		it := &r.items[i]
		if it.lo != nil && (skip == nil || !skip[i]) {
			it.lo.take(it, now)
		}
	}
	return nil
}

// errLeaseCall is a failed call to Redis about leases, for the caller to count as the
// exact path counts its own.
type errLeaseCall struct{ err error }

func (e *errLeaseCall) Error() string { return e.err.Error() }

// reserve admits r through leases. handled is false when the ask must go the exact way
// instead (Redis does not answer, or too many leases).
func (b *leaseBook) reserve(ctx context.Context, r *Reservation, a Ask, now time.Time) (d Decision, err error, handled bool) {
	b.mu.Lock()
	if !b.attach(r) {
		b.mu.Unlock()
		return Decision{}, nil, false
	}
	short := b.takeAll(r, now, nil)
	if short == nil {
		b.admitted(r, now)
		b.mu.Unlock()
		b.local.Add(1)
		return r.decision(), nil, true
	}
	b.mu.Unlock()
	if !b.l.sharedUsable(ctx) {
		return Decision{}, nil, false
	}
	granted := make([]bool, len(r.items))
	for attempt := 0; ; attempt++ {
		if attempt == 3 {
			// Others keep taking what a call refilled: every item asks Redis for itself.
			short = short[:0]
			for i := range r.items {
				if r.items[i].lo != nil && !granted[i] {
					short = append(short, i)
				}
			}
		}
		out, err := b.renewFor(ctx, r, short, granted, now)
		if err != nil {
			b.giveBack(r, granted)
			var lc *errLeaseCall
			if errors.As(err, &lc) {
				b.l.markDown(lc.err)
				if ctx.Err() != nil {
					return Decision{}, ctx.Err(), true
				}
				return Decision{}, nil, false
			}
			return Decision{}, err, true
		}
		if out == refused {
			b.giveBack(r, granted)
			b.refused.Add(1)
			return Decision{Refused: r.refusal(a, now)}, nil, true
		}
		b.mu.Lock()
		short = b.takeAll(r, now, granted)
		if short == nil {
			b.admitted(r, now)
		}
		b.mu.Unlock()
		if short == nil {
			return r.decision(), nil, true
		}
		if attempt == 3 {
			b.giveBack(r, granted)
			return Decision{}, errors.New("limits: leases kept changing under this request"), true
		}
	}
}

// giveBack returns what the items marked granted took, to their leases' unused.
func (b *leaseBook) giveBack(r *Reservation, granted []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range r.items {
		if granted[i] {
			r.items[i].lo.untake(&r.items[i])
			granted[i] = false
		}
	}
}

// admitted marks r admitted from its leases once every item has taken its share, and
// sets what its answer tells of each allowance (under mu).
func (b *leaseBook) admitted(r *Reservation, now time.Time) {
	r.leased = true
	for i := range r.items {
		it := &r.items[i]
		o := it.lo
		if o == nil || it.kind != itemRequests && it.kind != itemTokens {
			continue
		}
		// What Redis had at the last call, refilled since, and what the lease holds.
		level := float64(o.level)
		if !o.at.IsZero() {
			level += float64(now.Sub(o.at).Microseconds()) * float64(it.limit) / minuteMicros
		}
		level = min(level+float64(max(o.unused, 0)), float64(it.limit))
		it.after = int64(level)
		it.reset = max(0, int64((float64(it.limit)-level)*minuteMicros/float64(it.limit)))
	}
}

// renewFor asks Redis for the short items' leases, each granted its item's take
// directly (marked in granted); it answers refused when one of them is refused (the
// items' refusal answers set), admitted otherwise.
func (b *leaseBook) renewFor(ctx context.Context, r *Reservation, short []int, granted []bool, now time.Time) (outcome, error) {
	objs := make([]*leaseObj, 0, len(short))
	for _, i := range short {
		objs = append(objs, r.items[i].lo)
	}
	lockCalls(objs)
	defer b.release(objs)
	for seeding := 0; seeding < 3; seeding++ {
		nowUS := now.UnixMicro()
		var ops []*leaseOp
		var opItem []int
		b.mu.Lock()
		for _, i := range short {
			it := &r.items[i]
			o := it.lo
			if granted[i] {
				continue
			}
			if o.fits(it.take) {
				// A call just made refilled it.
				o.take(it, now)
				granted[i] = true
				continue
			}
			ops = append(ops, b.opFor(o, it, now, seeding == 0))
			opItem = append(opItem, i)
		}
		b.mu.Unlock()
		if len(ops) == 0 {
			return admitted, nil
		}
		cctx, cancel := context.WithTimeout(ctx, b.l.timeout)
		calls, err := b.rc.renew(cctx, b.gw, ops, nowUS, b.life.Microseconds())
		cancel()
		b.renewals.Add(int64(calls))
		out := admitted
		seed := false
		b.mu.Lock()
		for j, op := range ops {
			it := &r.items[opItem[j]]
			b.answered(op, it, err, now)
			switch {
			case err != nil:
			case op.status == 0:
				granted[opItem[j]] = true
			case op.status == 1:
				out = refused
				it.refused = true
				if it.kind == itemBudget {
					it.held = max(op.v2, 0)
				} else {
					it.wait = op.v2
				}
			case op.status == 2:
				it.needSeed = true
				seed = true
			}
		}
		b.mu.Unlock()
		if err != nil {
			return 0, &errLeaseCall{err}
		}
		if out == refused {
			return refused, nil
		}
		if !seed {
			return admitted, nil
		}
		if err := b.l.seed(ctx, r, false); err != nil {
			return 0, err
		}
		for i := range r.items {
			r.items[i].needSeed = false
		}
	}
	return 0, errors.New("limits: a budget counter could not be seeded")
}

// opFor is the call about o that takes it.take for it (under mu): the lease gives back
// what it holds unused and asks for the take and a batch more; adapt is false for the
// same request's call again after seeding.
func (b *leaseBook) opFor(o *leaseObj, it *item, now time.Time, adapt bool) *leaseOp {
	// A lease that ran out within a second asks for twice as much; one idle for long,
	// half. The same request asking again, its budget seeded meanwhile, is no new need.
	switch since := now.Sub(o.lastGrow); {
	case !adapt:
	case o.lastGrow.IsZero():
	case since < time.Second:
		o.batch = min(o.batch*2, maxLeaseBatch)
	case since > 10*time.Second:
		o.batch = max(o.batch/2, minLeaseBatch)
	}
	if adapt {
		o.lastGrow = now
	}
	op := &leaseOp{o: o, need: it.take, seed: -1}
	switch o.key.kind {
	case itemRequests, itemTokens:
		op.desired = o.batch * max(it.take, 1)
		op.give, o.unused = o.unused, 0
	case itemSlot:
		op.need, op.desired = 1, o.batch
		op.keep, op.last = o.inflight, o.last
		op.sentUnused, o.unused = o.unused, 0
	case itemBudget:
		op.desired = o.batch * it.take
		op.give, o.pending = o.pending, 0
		op.keep = o.inflight
		op.sentUnused, o.unused = o.unused, 0
		op.seed = it.seed
	}
	o.renewing = true
	return op
}

// answered applies a call's answer (or its failure) to the lease (under mu). A granted
// op's take goes to it: it.take is in flight.
func (b *leaseBook) answered(op *leaseOp, it *item, err error, now time.Time) {
	o := op.o
	o.renewing = false
	if err != nil {
		// The call may or may not have run. Allowance given back is not taken again
		// (it may be back in Redis); spend given is kept, to add again (counted twice
		// at worst); slots: the set may hold up to the highest number sent.
		if o.key.kind == itemBudget {
			o.pending += op.give
		}
		if o.key.kind == itemSlot {
			o.last = max(o.last, op.last, op.keep+op.need+op.desired)
		}
		return
	}
	o.lastSent = now
	if op.status == 2 {
		// Nothing changed in Redis: the counter is to be seeded first.
		o.unused += op.sentUnused
		o.pending += op.give
		o.needSeed = it == nil
		return
	}
	if o.key.kind == itemRequests || o.key.kind == itemTokens {
		o.level, o.reset, o.at = op.v1, op.v2, now
	}
	if o.key.kind == itemSlot {
		size := op.keep
		if op.status == 0 {
			size += op.granted
		}
		o.last = size
	}
	if o.key.kind == itemBudget && op.give > 0 && op.v1 >= 0 {
		b.l.noticeLeaseSpend(o.key, op.v1-op.give, op.v1, now)
	}
	if op.status != 0 || op.need == 0 {
		return
	}
	o.spare = op.granted - op.need
	o.unused += op.granted - op.need
	if it != nil {
		switch o.key.kind {
		case itemSlot:
			o.inflight++
		case itemBudget:
			o.inflight += it.take
		}
		o.lastUse = now
	}
}

// settle ends r's share of its leases: tokens and spend are corrected, the slot and the
// reservation go back to the lease. Nothing is sent to Redis here; what a lease then
// holds beyond its share is given back by the upkeep, woken at once.
func (b *leaseBook) settle(r *Reservation, tokens, cost int64, now time.Time) {
	b.mu.Lock()
	wake := b.closed
	for i := range r.items {
		it := &r.items[i]
		o := it.lo
		if o == nil {
			continue
		}
		switch it.kind {
		case itemTokens:
			o.unused += it.take - tokens
		case itemSlot:
			o.inflight--
			o.unused++
		case itemBudget:
			o.inflight -= it.take
			to := o
			if start := micros(Budget{Period: it.period}.Start(now)); start != o.key.start {
				// Settled in the next period: the spend counts there, the whole
				// reservation comes back here.
				k := o.key
				k.start, k.end = start, micros(Budget{Period: it.period}.Reset(now))
				to = b.objOf(k)
			}
			if to != nil {
				to.pending += cost
				to.lastUse = now
				o.unused += it.take
				if to != o {
					wake = true
				} else {
					o.unused -= cost
				}
			} else {
				o.unused += it.take // too many leases: the ledger has the spend
			}
		}
		if o.unused > o.spare {
			wake = true
		}
	}
	closed := b.closed
	b.mu.Unlock()
	if closed {
		// A request that outlived Close: what it holds goes back now.
		b.upkeep(upkeepAll)
		return
	}
	if wake {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

func (b *leaseBook) run(tick time.Duration) {
	defer close(b.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.kick:
		}
		b.upkeep(upkeepTick)
	}
}

// What upkeep does beyond its rounds: add every spend settled here now (Flush), or
// give back everything (Close).
type upkeepMode uint8

const (
	upkeepTick upkeepMode = iota
	upkeepFlush
	upkeepAll
)

// upkeep gives back what leases hold beyond their share, everything beyond their
// requests in flight once idle (or with upkeepAll: at Close), adds the spend settled here
// to Redis within a second, renews each lease well before it would lapse, and forgets
// leases empty and idle for a minute.
func (b *leaseBook) upkeep(mode upkeepMode) {
	// A spend that found its counter absent goes again once, seeded from the ledger.
	if b.upkeepOnce(mode) {
		b.upkeepOnce(mode)
	}
}

// upkeepOnce is one round of upkeep; true when a spend found its counter absent.
func (b *leaseBook) upkeepOnce(mode upkeepMode) bool {
	all := mode == upkeepAll
	now := b.l.now() // the times in Redis are the Limiter's clock's
	life := b.life
	b.seedAbsent(now)
	var ops []*leaseOp
	b.mu.Lock()
	// In the order of their ids, as every caller that holds several leases' calls takes
	// them (renewFor, holdFor), and from a copy, since mu is given up on the way.
	objs := make([]*leaseObj, 0, len(b.objs))
	for _, o := range b.objs {
		objs = append(objs, o)
	}
	byID(objs)
	for _, o := range objs {
		k := o.key
		if o.renewing || b.objs[k] != o {
			continue
		}
		idle := now.Sub(o.lastUse) >= b.idle
		if o.key.kind == itemSlot && o.key.limit <= 0 {
			if idle && o.inflight == 0 && now.Sub(o.lastUse) > time.Minute {
				delete(b.objs, k)
			}
			continue // nothing of it in Redis
		}
		if idle && !o.holdsInRedis() {
			if now.Sub(o.lastUse) > time.Minute {
				delete(b.objs, k)
			}
			continue
		}
		keepSpare := o.spare
		if all || idle {
			keepSpare = 0
		}
		keepSpare = min(keepSpare, max(o.unused, 0))
		excess := o.unused != keepSpare
		due := now.Sub(o.lastSent) >= life/3 && o.holdsInRedis()
		push := o.pending > 0 && (mode != upkeepTick || now.Sub(o.lastSent) >= time.Second)
		if !excess && !due && !push {
			continue
		}
		if mode == upkeepTick {
			if !o.renewMu.TryLock() {
				continue
			}
		} else {
			// Flush and Close wait for a call on its way (mu is given up meanwhile).
			b.mu.Unlock()
			o.renewMu.Lock()
			b.mu.Lock()
			if o.renewing || b.objs[k] != o {
				o.renewMu.Unlock()
				continue
			}
			keepSpare = min(keepSpare, max(o.unused, 0))
		}
		op := &leaseOp{o: o, seed: b.noSeed()}
		if o.seed >= 0 {
			op.seed, o.seed = o.seed, -1
		}
		switch o.key.kind {
		case itemRequests, itemTokens:
			op.give = o.unused - keepSpare
			o.unused = keepSpare
		case itemSlot:
			op.keep, op.last = o.inflight+keepSpare, o.last
			o.unused = keepSpare
		case itemBudget:
			op.give, o.pending = o.pending, 0
			op.keep = o.inflight + keepSpare
			o.unused = keepSpare
		}
		o.renewing = true
		ops = append(ops, op)
	}
	if all {
		b.closed = true
	}
	b.mu.Unlock()
	if len(ops) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.l.timeout)
	calls, err := b.rc.renew(ctx, b.gw, ops, now.UnixMicro(), life.Microseconds())
	cancel()
	b.renewals.Add(int64(calls))
	seed := false
	b.mu.Lock()
	for _, op := range ops {
		b.answered(op, nil, err, now)
		seed = seed || op.o.needSeed
	}
	b.mu.Unlock()
	for _, op := range ops {
		op.o.renewMu.Unlock()
	}
	if err != nil {
		b.l.markDown(err)
		return false
	}
	return seed && b.l.seeder != nil
}

// seedAbsent asks the ledger for the spend of the budget periods whose counters were
// absent when spend settled here was to be added to them.
func (b *leaseBook) seedAbsent(now time.Time) {
	if b.l.seeder == nil {
		return
	}
	b.mu.Lock()
	var want []*leaseObj
	for _, o := range b.objs {
		if o.needSeed {
			want = append(want, o)
		}
	}
	b.mu.Unlock()
	for _, o := range want {
		var since time.Time
		if o.key.start != 0 {
			since = time.UnixMicro(o.key.start).UTC()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := b.l.seeder(ctx, o.key.scope, since)
		cancel()
		b.mu.Lock()
		if err == nil {
			o.seed, o.needSeed = max(v, 0), false
		}
		b.mu.Unlock()
	}
}

// close gives back every lease: what each holds beyond its requests in flight, and the
// spend settled here.
func (b *leaseBook) close() {
	select {
	case <-b.stop:
		return
	default:
	}
	close(b.stop)
	<-b.done
	b.upkeep(upkeepAll)
}

// noSeed is the seed of a call that has not asked the ledger: none (-1: spend added to
// a period's counter that is absent is left to the ledger, whose figure the next request
// seeds it with), or 0 without a ledger.
func (b *leaseBook) noSeed() int64 {
	if b.l.seeder == nil {
		return 0
	}
	return -1
}

// abandon stops looking after the leases without giving anything back: a gateway that
// died, for tests.
func (b *leaseBook) abandon() {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// noticeLeaseSpend tells the budget watch of a threshold crossed by spend a lease added.
func (l *Limiter) noticeLeaseSpend(k leaseKey, before, after int64, now time.Time) {
	w := l.budgetWatch.Load()
	if w == nil {
		return
	}
	r := Reservation{items: []item{{scope: k.scope, kind: itemBudget, limit: k.limit, period: k.period, settleStart: k.start, spent: after}}}
	w.notice(&r, after-before, now)
}
