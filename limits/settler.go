package limits

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settlements in Redis leave the request's path: Settle queues the settle script's call,
// and it is sent ahead of the next call this gateway makes to Redis (a reserve, a peek),
// in the same pipeline, or by a flusher within settleEvery when no call comes first. A
// client that sends its next request to the same gateway the moment an answer ends thus
// always finds its slot and tokens given back (its reserve carries the settlement, ahead
// of itself); from another gateway, within settleEvery plus a round trip.

// defaultSettleEvery bounds how long a queued settlement waits for a call to carry it.
const defaultSettleEvery = 2 * time.Millisecond

// settleBatch is how many queued settlements make the flusher send them at once.
const settleBatch = 64

// pendingSettle is one settle script call waiting to be sent, and what to do with its
// answer.
type pendingSettle struct {
	r       *Reservation
	parts   []settlePart  // one call, or in a Cluster one per scope
	one     [1]settlePart // parts' storage for one call
	sent    []int
	tokens  int64
	cost    int64
	now     time.Time
	addOnly bool
	attempt int
	notice  bool      // tell the budget watch once settled
	taken   bool      // a call has it on its way (under qmu)
	queued  time.Time // when it was queued: it goes within settleEvery of it
}

func (rc *redisCounters) enqueue(ps *pendingSettle) {
	rc.qmu.Lock()
	if rc.closed {
		// A straggler after Close: send it alone, now.
		rc.qmu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), rc.callTimeout())
		defer cancel()
		var v []int64
		var err error
		for _, p := range ps.parts {
			pv, e := settleScript.Run(ctx, rc.c, p.keys, p.args...).Int64Slice()
			v, err = append(v, pv...), cmp.Or(err, e)
		}
		ps.r.l.settled(ps, v, err)
		return
	}
	ps.queued = time.Now()
	rc.queue = append(rc.queue, ps)
	n := len(rc.queue)
	if !ps.addOnly {
		for i := range ps.r.items {
			if it := &ps.r.items[i]; it.kind == itemSlot {
				k := rc.slotKey(it)
				if rc.rel == nil {
					rc.rel = make(map[string]map[string]*pendingSettle)
				}
				ids := rc.rel[k]
				if ids == nil {
					ids = make(map[string]*pendingSettle)
					rc.rel[k] = ids
				}
				ids[ps.r.id] = ps
			}
		}
	}
	if rc.kick == nil {
		rc.kick, rc.stop, rc.flusherDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go rc.flusher(rc.kick, rc.stop, rc.flusherDone)
	}
	// An armed flusher looks at the queue within settleEvery of now: no wake-up a
	// request while calls carry the queue.
	wake := !rc.armed || n >= settleBatch
	rc.armed = true
	kick := rc.kick
	rc.qmu.Unlock()
	if wake {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// maxCarried bounds the released slots one reserve frees ahead of their settlement, per
// scope; beyond it (a burst of requests ending at once) they wait for the settlement.
const maxCarried = 64

// releasing appends to args, for each slot key, the count and ids of the slots this
// gateway has released whose settlement another call has taken and not had answered
// yet: it may reach Redis after this call. A settlement this call carries itself (taken
// with batch) goes first anyway; one queued after this call took the queue belongs to a
// request that ended after this one began, which its client does not wait for.
func (rc *redisCounters) releasing(args []any, keys []string, batch []*pendingSettle) []any {
	rc.qmu.Lock()
	defer rc.qmu.Unlock()
	for _, key := range keys {
		at := len(args)
		args = append(args, 0)
		n := 0
		for id, ps := range rc.rel[key] {
			if n == maxCarried {
				break
			}
			if ps.taken && !ps.mine(batch) {
				args = append(args, id)
				n++
			}
		}
		args[at] = n
	}
	return args
}

// mine reports whether ps is one of batch.
func (ps *pendingSettle) mine(batch []*pendingSettle) bool {
	for _, b := range batch {
		if b == ps {
			return true
		}
	}
	return false
}

// answered forgets the released slots of a settlement Redis has answered (or that
// failed: the resync releases it then).
func (rc *redisCounters) answered(ps *pendingSettle) {
	if ps.addOnly {
		return
	}
	rc.qmu.Lock()
	defer rc.qmu.Unlock()
	for i := range ps.r.items {
		if it := &ps.r.items[i]; it.kind == itemSlot {
			k := rc.slotKey(it)
			if ids := rc.rel[k]; ids != nil {
				delete(ids, ps.r.id)
				if len(ids) == 0 {
					delete(rc.rel, k)
				}
			}
		}
	}
}

// take empties the queue.
func (rc *redisCounters) take() []*pendingSettle {
	rc.qmu.Lock()
	q := rc.queue
	rc.queue = nil
	for _, ps := range q {
		ps.taken = true
	}
	rc.qmu.Unlock()
	return q
}

// flusher sends each queued settlement within settleEvery of its queueing, or at once
// when settleBatch are queued. Woken by the first settlement queued while it is not
// armed, it looks at the queue settleEvery later, then whenever the oldest one queued is
// due, until it finds the queue empty. Under load calls carry the queue first: it wakes
// about once every settleEvery, not once a request, and sends nothing on its own.
func (rc *redisCounters) flusher(kick, stop, done chan struct{}) {
	defer close(done)
	every := rc.settleEvery
	if every <= 0 {
		every = defaultSettleEvery
	}
	t := time.NewTimer(every)
	t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-kick:
		}
		wait := every
	armed:
		for {
			t.Reset(wait)
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
			case <-kick: // a full batch
				t.Stop()
			}
			for {
				rc.qmu.Lock()
				n := len(rc.queue)
				if n == 0 {
					rc.armed = false
					rc.qmu.Unlock()
					break armed
				}
				wait = every - time.Since(rc.queue[0].queued)
				rc.qmu.Unlock()
				if n < settleBatch && wait > 0 {
					break
				}
				rc.flushOut()
			}
		}
	}
}

// flushOut sends the queue on its own; calls to Redis wait for it (flushMu), so that
// none can overtake a settlement queued before it began.
func (rc *redisCounters) flushOut() {
	rc.flushMu.Lock()
	defer rc.flushMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), rc.callTimeout())
	defer cancel()
	rc.exec(ctx, nil, nil, nil, nil)
}

// maxPipelines bounds the pipelines of calls on their way to Redis at once: calls made
// meanwhile wait and go together in the next one, so that under load one write, one
// read and one wake-up of Redis's event loop serve many requests.
const maxPipelines = 2

// part is one script call: a call sends one or several (a Cluster's scopes) together.
type part struct {
	s        *redis.Script
	keys     []string
	args     []any
	slotKeys []string
	res      *redis.Cmd
}

// call is script calls waiting for a pipeline.
type call struct {
	parts []*part
	done  chan struct{} // closed when res is in, or when this call is to send group
	group []*call       // handed over with done: the calls to send, this one first
	// The storage of a call of one part (nearly all): no allocation beyond the call.
	one    part
	oneRef [1]*part
}

// exec sends the queued settlements, then script s (nil: none) with keys and args, in
// one pipeline: one round trip. Each settlement's answer goes to its Limiter; the result
// is s's.
// slotKeys are the reserve's slot keys: after the call has taken the queue, the slots
// released here whose settlement is on its way in another call are added to args.
// While maxPipelines are on their way, a call waits and goes with the others waiting in
// the next pipeline, sent by the first of them when one comes back.
func (rc *redisCounters) exec(ctx context.Context, s *redis.Script, keys []string, args []any, slotKeys []string) *redis.Cmd {
	if s == nil {
		rc.send(ctx, nil)
		return nil
	}
	c := &call{one: part{s: s, keys: keys, args: args, slotKeys: slotKeys}}
	c.oneRef[0] = &c.one
	c.parts = c.oneRef[:]
	rc.execCall(ctx, c)
	return c.one.res
}

// execParts is exec for several script calls sent together, in the same pipeline: each
// part's res is set.
func (rc *redisCounters) execParts(ctx context.Context, parts []*part) {
	rc.execCall(ctx, &call{parts: parts})
}

func (rc *redisCounters) execCall(ctx context.Context, c *call) {
	parts := c.parts
	rc.cmu.Lock()
	if rc.pipelines < maxPipelines {
		rc.pipelines++
		rc.cmu.Unlock()
		c.group = []*call{c}
	} else {
		c.done = make(chan struct{})
		rc.waiting = append(rc.waiting, c)
		rc.cmu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			rc.cmu.Lock()
			for i, w := range rc.waiting {
				if w == c {
					rc.waiting = append(rc.waiting[:i], rc.waiting[i+1:]...)
					rc.cmu.Unlock()
					for _, p := range parts {
						p.res = redis.NewCmd(ctx)
						p.res.SetErr(ctx.Err())
					}
					return
				}
			}
			rc.cmu.Unlock()
			<-c.done // taken: its pipeline is bounded by callTimeout
		}
		if c.group == nil {
			return
		}
	}
	rc.send(ctx, c.group)
	rc.cmu.Lock()
	next := rc.waiting
	rc.waiting = nil
	if len(next) == 0 {
		rc.pipelines--
	}
	rc.cmu.Unlock()
	if len(next) > 0 {
		next[0].group = next
		close(next[0].done)
	}
	for _, g := range c.group[1:] {
		close(g.done)
	}
}

// send sends the queued settlements, then the calls of group, in one pipeline, and sets
// each call's res.
func (rc *redisCounters) send(ctx context.Context, group []*call) {
	var batch []*pendingSettle
	if group != nil {
		// Wait for a batch the flusher is sending (rare under load: calls carry the
		// queue before it fires), and take the queue before it can.
		rc.flushMu.Lock()
		batch = rc.take()
		rc.flushMu.Unlock()
	} else {
		batch = rc.take()
	}
	nparts := 0
	for _, c := range group {
		for _, p := range c.parts {
			if len(p.slotKeys) > 0 {
				p.args = rc.releasing(p.args, p.slotKeys, batch)
			}
			nparts++
		}
	}
	if len(batch) > 0 && !rc.loaded.Load() {
		// The settle script must be in the server's cache before it goes ahead of
		// another script in a pipeline: sent again as text after a NOSCRIPT, it would
		// run after it. (A Cluster client loads it on every node.)
		if err := settleScript.Load(ctx, rc.c).Err(); err == nil {
			rc.loaded.Store(true)
		}
	}
	if len(batch) == 0 && nparts <= 1 {
		if nparts == 1 {
			p := group[0].parts[0]
			p.res = p.s.Run(ctx, rc.c, p.keys, p.args...)
		}
		return
	}
	rc.sending.RLock()
	defer rc.sending.RUnlock()
	// Settlements must not be cut short by the carrying request's client leaving: a
	// pipeline given up once written may have run, and sent again would count twice.
	// Nor the other calls of a group by the one sending it leaving.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rc.callTimeout())
	defer cancel()
	pipe := rc.c.Pipeline()
	cmds := make([]*redis.Cmd, 0, len(batch)) // each settlement's parts in turn
	for _, ps := range batch {
		for _, p := range ps.parts {
			cmds = append(cmds, pipe.EvalSha(ctx, settleScript.Hash(), p.keys, p.args...))
		}
	}
	for _, c := range group {
		for _, p := range c.parts {
			p.res = pipe.EvalSha(ctx, p.s.Hash(), p.keys, p.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	next := 0
	for _, ps := range batch {
		var v []int64
		var err error
		for j := range ps.parts {
			c := cmds[next]
			next++
			if noScript(c.Err()) {
				rc.loaded.Store(false)
				// The server lost its script cache (or, in a Cluster, a replica
				// promoted since it was loaded never had it): send the script's text.
				c = settleScript.Eval(ctx, rc.c, ps.parts[j].keys, ps.parts[j].args...)
			}
			pv, e := c.Int64Slice()
			if j == 0 {
				v, err = pv, e
			} else {
				v, err = append(v, pv...), cmp.Or(err, e)
			}
		}
		ps.r.l.settled(ps, v, err)
	}
	for _, c := range group {
		for _, p := range c.parts {
			if noScript(p.res.Err()) {
				p.res = p.s.Eval(ctx, rc.c, p.keys, p.args...)
			}
		}
	}
}

func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// settleLater queues r's settlement in Redis (the addOnly pass after seeding too).
func (l *Limiter) settleLater(ps *pendingSettle) {
	ps.parts, ps.sent = l.redis.settleArgs(ps.one[:0], ps.r, ps.tokens, ps.cost, ps.now.UnixMicro(), ps.addOnly, true)
	if len(ps.sent) == 0 {
		l.settled(ps, nil, nil)
		return
	}
	l.redis.enqueue(ps)
}

// settled takes a queued settlement's answer: it seeds a settle period whose counter was
// absent (a rollover) and adds the cost there, else tells the budget watch. It runs on
// the goroutine whose call carried the settlement: the ledger query goes elsewhere.
func (l *Limiter) settled(ps *pendingSettle, v []int64, err error) {
	r := ps.r
	l.redis.answered(ps)
	if err != nil && !errors.Is(err, redis.Nil) {
		// The spend is in the ledger but not in the shared counters: they take it from
		// there once they answer again. The reservation is released then too.
		l.markDown(err)
		l.redis.markStale(r, true, ps.addOnly)
		return
	}
	settleResult(r, ps.sent, v)
	if anyNeedSeed(r) && ps.attempt < 2 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if l.seed(ctx, r, true) != nil {
				// The settle period's counter stays absent: the next reservation seeds
				// it from the ledger, which holds this request.
				l.noticeSpend(ps)
				return
			}
			l.settleLater(&pendingSettle{r: r, tokens: ps.tokens, cost: ps.cost, now: ps.now,
				addOnly: true, attempt: ps.attempt + 1, notice: ps.notice})
		}()
		return
	}
	l.noticeSpend(ps)
}

func (l *Limiter) noticeSpend(ps *pendingSettle) {
	if !ps.notice {
		return
	}
	if w := l.budgetWatch.Load(); w != nil {
		w.notice(ps.r, ps.cost, ps.now)
	}
}

// Flush sends the settlements this Limiter has queued for Redis and returns once they
// are counted there (a no-op with counters in memory). Close flushes too.
func (l *Limiter) Flush() {
	if l.redis == nil {
		return
	}
	if l.book != nil {
		l.book.upkeep(upkeepFlush)
	}
	l.redis.flushOut()
	// Wait for batches other goroutines took before this call.
	l.redis.sending.Lock()
	l.redis.sending.Unlock() //nolint:staticcheck // an empty section: waiting is the point
}

// callTimeout bounds a call that carries settlements: the Limiter's Timeout.
func (rc *redisCounters) callTimeout() time.Duration {
	if rc.timeout > 0 {
		return rc.timeout
	}
	return 500 * time.Millisecond
}
