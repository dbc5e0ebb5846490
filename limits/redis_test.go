package limits

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// gateways is a Redis server and Limiters on it, each with a client of its own: several
// gateways sharing counters.
type gateways struct {
	srv    *redistest.Server
	admin  *redis.Client
	prefix string
}

func newGateways(t *testing.T) *gateways {
	srv := redistest.Start(t)
	return &gateways{srv: srv, admin: newClient(t, srv), prefix: "sy:"}
}

// limiter is a gateway in exact mode; leaseLimiter one through leases.
func (g *gateways) limiter(t *testing.T, opts Options) *Limiter {
	opts.Exact = true
	return g.leaseLimiter(t, opts)
}

func (g *gateways) leaseLimiter(t *testing.T, opts Options) *Limiter {
	l := New(NewRedis(newClient(t, g.srv), g.prefix), opts)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// notices records what OnUnreachable was told.
type notices struct {
	mu   sync.Mutex
	seen []error
}

func (n *notices) On(err error) {
	n.mu.Lock()
	n.seen = append(n.seen, err)
	n.mu.Unlock()
}

func (n *notices) get() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]error(nil), n.seen...)
}

func TestTwoGatewaysEnforceOneLimit(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	gw := []*Limiter{g.limiter(t, Options{Now: clk.Now}), g.limiter(t, Options{Now: clk.Now})}
	key := Check{Scope: keyScope("k1"), Policy: Policy{TPM: 1_000_000, Budget: budget(10_000, PeriodMonth)}}
	proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 50}}

	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mu sync.Mutex
	var held []*Reservation
	for i := range 100 {
		l := gw[i%2]
		wg.Go(func() {
			<-start
			d, err := l.Reserve(context.Background(), ask(1000, 1000, key, proj))
			if err != nil {
				t.Error(err)
				return
			}
			if d.Refused == nil {
				admitted.Add(1)
				mu.Lock()
				held = append(held, d.Reservation)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int64(10), admitted.Load(), "a budget that fits 10, across two gateways")

	// Settled on either gateway, seen by both.
	for _, r := range held {
		r.Settle(context.Background(), 500, 800)
	}
	for _, l := range gw {
		l.Flush() // settlements are batched: each gateway's go within SettleEvery
	}
	for _, l := range gw {
		st := status(t, l, key)
		require.Equal(t, int64(8000), st.SpentMicros)
		require.Equal(t, int64(0), st.ReservedMicros)
		require.Equal(t, int64(1_000_000-10*500), st.Tokens.Remaining)
		require.Equal(t, int64(40), status(t, l, proj).Requests.Remaining)
	}
	admit(t, gw[0], ask(0, 2000, key, proj))
	refuse(t, gw[1], ask(0, 1, key, proj))
}

func TestRedisKeyLayout(t *testing.T) {
	g := newGateways(t)
	l := g.limiter(t, Options{Now: newClock(t0).Now})
	c := Check{Scope: Scope{Kind: ScopeKey, ID: "k1", Model: "big"}, Policy: Policy{RPM: 5, TPM: 500, Concurrency: 2, Budget: budget(1000, PeriodMonth)}}
	admit(t, l, ask(10, 10, c))
	keys, err := g.admin.Keys(context.Background(), "sy:*").Result()
	require.NoError(t, err)
	sort.Strings(keys)
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Unix()
	b := "sy:{key:k1/model:big}:budget:month:" + strconv.FormatInt(start, 10)
	require.Equal(t, []string{b, b + ":leases", "sy:{key:k1/model:big}:inflight", "sy:{key:k1/model:big}:rate"}, keys)
	ttl, err := g.admin.PTTL(context.Background(), b).Result()
	require.NoError(t, err)
	// Until an hour after April 1st plus the lease, from the Limiter's clock.
	require.Equal(t, time.Date(2026, 4, 1, 1, 15, 0, 0, time.UTC).Sub(t0).Round(time.Minute), ttl.Round(time.Minute))
	ttl, err = g.admin.PTTL(context.Background(), b+":leases").Result()
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 4, 1, 1, 15, 0, 0, time.UTC).Sub(t0).Round(time.Minute), ttl.Round(time.Minute), "the leases expire with their period")
}

// A bucket's hash is kept until the bucket would be full again, however deep in debt an
// answer that used more than reserved puts it (its expiry is not renewed on every call).
func TestABucketInDebtOutlivesItsRefill(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	l := g.limiter(t, Options{Now: clk.Now})
	c := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 100, TPM: 1000}}
	ctx := context.Background()
	admit(t, l, ask(10, 0, c)).Settle(ctx, 10, 0)
	admit(t, l, ask(10, 0, c)).Settle(ctx, 5010, 0) // 4000 tokens in debt: 5 minutes to full
	l.Flush()
	st := status(t, l, c)
	require.Greater(t, st.Tokens.Reset, 5*time.Minute)
	ttl, err := g.admin.PTTL(ctx, "sy:{key:k1}:rate").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, ttl, st.Tokens.Reset+time.Second, "the bucket outlives its refill")
}

// A reservation left by a crashed gateway gives its budget back the moment it lapses,
// even when another request swept the budget an instant before.
func TestALapsedReservationNeverRefusesEvenRightAfterASweep(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	crashed := g.limiter(t, Options{Now: clk.Now, Lease: time.Minute})
	l := g.limiter(t, Options{Now: clk.Now, Lease: time.Minute})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}
	admit(t, crashed, ask(0, 900, c)) // never settled
	clk.Add(59*time.Second + 500*time.Millisecond)
	admit(t, l, ask(0, 100, c)).Settle(context.Background(), 0, 0) // sweeps: nothing has lapsed yet
	clk.Add(700 * time.Millisecond)                                // the crashed one's lease lapsed, within a second of that sweep
	admit(t, l, ask(0, 1000, c))
}

// Slots of requests that never settled (a crashed gateway) linger only so long: beyond
// 1024 in a set, the lapsed ones are swept even far below the limit.
func TestLapsedSlotsAreSweptBeyondABound(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	l := g.limiter(t, Options{Now: clk.Now, Lease: time.Minute})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1 << 20}}
	for range 1100 {
		admit(t, l, ask(0, 0, c)) // never settled
	}
	clk.Add(2 * time.Minute)
	admit(t, l, ask(0, 0, c))
	n, err := g.admin.ZCard(context.Background(), "sy:{key:k1}:inflight").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

func TestRedisFlushSeedsSpendFromTheLedgerAgain(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	lg := &ledger{}
	l := g.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}

	r := admit(t, l, ask(0, 800, c))
	lg.add(c.Scope, clk.Now(), 700) // the ledger records the request as it ends
	r.Settle(context.Background(), 0, 700)
	l.Flush()                                                        // counted in Redis before it restarts
	require.NoError(t, g.admin.FlushAll(context.Background()).Err()) // a restart without persistence

	queries := lg.queries.Load()
	refuse(t, l, ask(0, 301, c))
	require.Equal(t, queries+1, lg.queries.Load(), "the lost counter was seeded from the ledger")
	admit(t, l, ask(0, 300, c))
	require.Equal(t, int64(700), status(t, l, c).SpentMicros)
}

func TestRedisUnreachableRefusesBudgetsAndCountsRatesLocally(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	var n notices
	l := g.limiter(t, Options{Now: clk.Now, OnUnreachable: n.On, RetryEvery: 20 * time.Millisecond})
	withBudget := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 100, Budget: budget(1000, PeriodMonth)}}
	rates := Check{Scope: keyScope("k2"), Policy: Policy{RPM: 3}}
	admit(t, l, ask(0, 10, withBudget)).Settle(context.Background(), 0, 10)

	g.srv.Stop(t)
	_, err := l.Reserve(context.Background(), ask(0, 10, withBudget))
	require.ErrorIs(t, err, ErrUnavailable)
	require.Len(t, n.get(), 1)
	require.Error(t, n.get()[0])
	require.NotContains(t, n.get()[0].Error(), "127.0.0.1", "the notice may be logged: no address")
	require.NotContains(t, err.Error(), "127.0.0.1")
	for range 3 {
		admit(t, l, ask(0, 0, rates)).Settle(context.Background(), 0, 0)
	}
	ref := refuse(t, l, ask(0, 0, rates))
	require.Equal(t, KindRequests, ref.Kind, "the rate is counted locally meanwhile")
	require.Equal(t, 20*time.Second, ref.RetryAfter)
	st := status(t, l, rates) // from the local counters
	require.Equal(t, int64(0), st.Requests.Remaining)

	g.srv.Start(t)
	require.Eventually(t, func() bool {
		_, err := l.Reserve(context.Background(), ask(0, 0, withBudget))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Len(t, n.get(), 2)
	require.NoError(t, n.get()[1], "told once that the counters answer again")
	// Shared again: the restarted Redis holds a full bucket for k2.
	require.Equal(t, int64(3), status(t, l, rates).Requests.Remaining)
}

func TestRedisUnreachableWithLocalBudgets(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	lg := &ledger{}
	lg.add(keyScope("k1"), t0, 900)
	l := g.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder, BudgetWhenUnreachable: "local", RetryEvery: time.Hour})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}

	g.srv.Stop(t)
	refuse(t, l, ask(0, 101, c)) // seeded from the ledger in memory
	r := admit(t, l, ask(0, 100, c))
	refuse(t, l, ask(0, 1, c))
	r.Settle(context.Background(), 0, 50)
	admit(t, l, ask(0, 50, c))

	lg.fail.Store(true)
	_, err := l.Reserve(context.Background(), ask(0, 1, Check{Scope: keyScope("k2"), Policy: c.Policy}))
	require.ErrorIs(t, err, ErrUnavailable, "no ledger, no shared counters: a budget cannot be counted")
}

func TestGatewayStartsWhileRedisIsDownAndSharesOnceItAnswers(t *testing.T) {
	g := newGateways(t)
	g.srv.Stop(t)
	clk := newClock(t0)
	var n1, n2 notices
	gw := []*Limiter{
		g.limiter(t, Options{Now: clk.Now, OnUnreachable: n1.On, RetryEvery: 20 * time.Millisecond}),
		g.limiter(t, Options{Now: clk.Now, OnUnreachable: n2.On, RetryEvery: 20 * time.Millisecond}),
	}
	c := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 4}}
	// Apart, each gateway counts its own.
	for _, l := range gw {
		for range 4 {
			admit(t, l, ask(0, 0, c)).Settle(context.Background(), 0, 0)
		}
		refuse(t, l, ask(0, 0, c))
	}
	g.srv.Start(t)
	probe := Check{Scope: keyScope("probe"), Policy: Policy{RPM: 1_000_000}}
	for _, l := range gw {
		require.Eventually(t, func() bool {
			_, _ = l.Reserve(context.Background(), ask(0, 0, probe))
			return !l.down.Load()
		}, 10*time.Second, 10*time.Millisecond)
	}
	require.Len(t, n1.get(), 2)
	require.Len(t, n2.get(), 2)
	// Together again: one bucket of 4 for both.
	var admitted int
	for i := range 10 {
		d, err := gw[i%2].Reserve(context.Background(), ask(0, 0, c))
		require.NoError(t, err)
		if d.Refused == nil {
			admitted++
		}
	}
	require.Equal(t, 4, admitted)
}

// A Redis that stops answering without losing its data (CLIENT PAUSE): what was held
// there is released when it answers again, and the spend counted locally meanwhile
// reaches the shared counter through the ledger.
func TestRedisPauseResyncsReleasesAndSpend(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	lg := &ledger{}
	opts := Options{Now: clk.Now, Seeder: lg.Seeder, BudgetWhenUnreachable: "local", Timeout: 100 * time.Millisecond, RetryEvery: 20 * time.Millisecond}
	l := g.limiter(t, opts)
	c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1, Budget: budget(1000, PeriodMonth)}}
	settle := func(r *Reservation, cost int64) {
		lg.add(c.Scope, clk.Now(), cost)
		r.Settle(context.Background(), 0, cost)
	}

	settle(admit(t, l, ask(0, 300, c)), 300)
	inRedis := admit(t, l, ask(0, 100, c)) // holds the shared slot

	require.NoError(t, g.admin.Do(context.Background(), "CLIENT", "PAUSE", "600", "ALL").Err())
	settle(inRedis, 100) // cannot reach Redis: released there once it answers
	l.Flush()            // the batched settlement finds Redis away
	require.True(t, l.down.Load())
	local := admit(t, l, ask(0, 400, c)) // counted in memory, seeded from the ledger (400)
	refuse(t, l, ask(0, 201, c))         // 400 + 400 + 201 > 1000, and the local slot is taken
	settle(local, 400)                   // the ledger now holds 800

	require.Eventually(t, func() bool {
		_, _ = l.Reserve(context.Background(), ask(0, 0, Check{Scope: keyScope("probe"), Policy: Policy{RPM: 1000}}))
		return !l.down.Load()
	}, 10*time.Second, 10*time.Millisecond)
	// The shared slot was released by the resync, not by its 15-minute lease, and the
	// shared spend is the ledger's 800, not the 300 Redis had counted itself.
	refuse(t, l, ask(0, 201, c))
	r := admit(t, l, ask(0, 200, c))
	st := status(t, l, c)
	require.Equal(t, int64(800), st.SpentMicros)
	require.Equal(t, int64(200), st.ReservedMicros)
	require.Equal(t, int64(1), st.InFlight)
	r.Settle(context.Background(), 0, 200)
}

// While Redis fails every resync and requests go on being released meanwhile, the
// reservations kept for release once it answers stay within their bound: each failed
// resync hands back what it took, and what was noted while it ran does not add to that
// past the bound (it did: a failover test's gateway grew by the bound each retry, to the
// machine's whole memory).
func TestReleasesKeptThroughAnOutageStayWithinTheirBound(t *testing.T) {
	g := newGateways(t)
	l := g.limiter(t, Options{Timeout: 50 * time.Millisecond})
	r := admit(t, l, ask(0, 1000, Check{Scope: keyScope("k-outage"), Policy: Policy{Concurrency: 5}}))
	g.srv.Stop(t)
	rc := l.redis
	kept := func() int {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.release)
	}
	for range maxRelease {
		rc.markStale(r, false, false)
	}
	require.Equal(t, maxRelease, kept())
	noting := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		close(noting)
		for {
			select {
			case <-stop:
				return
			default:
				rc.markStale(r, false, false) // a request released while Redis is away
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	<-noting
	for i := range 100 {
		require.Error(t, rc.resync(context.Background()), "Redis is stopped")
		require.LessOrEqual(t, kept(), maxRelease, "after %d failed resyncs", i+1)
	}
}

// A settlement queued for Redis that fails (Redis refuses it, or does not answer) leaves
// the spend in the ledger only: once Redis answers again, the budget's counter is seeded
// from the ledger, and the next admission sees the ledger's spend, the failed request's
// cost included, and nothing of its reservation. Nothing is counted locally meanwhile,
// so only the failed settlement can mark the counter for seeding.
func TestAFailedSettlementIsSeededAgainFromTheLedger(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fail, mend  func(t *testing.T, admin *redis.Client)
		callTimeout time.Duration
	}{
		// Out of memory, Redis refuses the script's first write: certainly nothing of it ran.
		{"refused", func(t *testing.T, admin *redis.Client) {
			require.NoError(t, admin.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err())
			require.NoError(t, admin.ConfigSet(context.Background(), "maxmemory", "1").Err())
		}, func(t *testing.T, admin *redis.Client) {
			require.NoError(t, admin.ConfigSet(context.Background(), "maxmemory", "0").Err())
		}, 0},
		// Paused, Redis answers nothing within the call's timeout.
		{"away", func(t *testing.T, admin *redis.Client) {
			require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", "100000", "WRITE").Err())
		}, func(t *testing.T, admin *redis.Client) {
			require.NoError(t, admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err())
		}, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateways(t)
			ctx := context.Background()
			clk := newClock(t0)
			lg := &ledger{}
			l := g.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder, RetryEvery: 10 * time.Millisecond, Timeout: tc.callTimeout})
			// The key's slot is held by another reservation (admission's first phase): the
			// settlement's first write is the budget's, which an out-of-memory Redis refuses.
			c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}, SlotHeld: true}
			settle := func(r *Reservation, cost int64) {
				lg.add(c.Scope, clk.Now(), cost)
				r.Settle(ctx, 0, cost)
				l.Flush()
			}
			counted := func() int64 {
				key := g.prefix + "{key:k1}:budget:month:" + strconv.FormatInt(Budget{Period: PeriodMonth}.Start(t0).Unix(), 10)
				v, err := g.admin.HGet(ctx, key, "spent").Int64()
				require.NoError(t, err)
				return v
			}

			settle(admit(t, l, ask(0, 300, c)), 300)
			failing := admit(t, l, ask(0, 200, c))
			tc.fail(t, g.admin)
			settle(failing, 200) // the ledger holds 500; the settlement fails
			require.True(t, l.down.Load(), "the failed settlement marks the shared counters down")
			tc.mend(t, g.admin)
			require.Equal(t, int64(300), counted(), "the settlement did not reach the counter")

			require.Eventually(t, func() bool {
				_, err := l.Reserve(ctx, ask(0, 0, c)) // ErrUnavailable until Redis is tried again
				return err == nil
			}, 10*time.Second, 5*time.Millisecond)
			require.False(t, l.down.Load())
			st := status(t, l, c)
			require.Equal(t, int64(500), st.SpentMicros, "the next admission sees the ledger's spend")
			require.Equal(t, int64(0), st.ReservedMicros, "the failed settlement's reservation was released")
			refuse(t, l, ask(0, 501, c))
			admit(t, l, ask(0, 500, c))
		})
	}
}
