package limits

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// burstAsks sends n concurrent asks made by mk, alternately to each gateway, and holds every
// admitted one to the end: all admitted requests are in flight at once.
func burstAsks(t *testing.T, gws []*Limiter, n int, mk func() Ask) (admitted []*Reservation) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		l := gws[i%len(gws)]
		wg.Go(func() {
			<-start
			d, err := l.Reserve(context.Background(), mk())
			if err != nil {
				t.Error(err)
				return
			}
			if d.Refused == nil {
				mu.Lock()
				admitted = append(admitted, d.Reservation)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return admitted
}

// Far from its limits a gateway admits from its leases: one call to Redis serves many
// requests, and the calls per request fall to a tenth and below.
func TestALeaseServesManyRequestsPerCallFarFromTheLimits(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	l := g.leaseLimiter(t, Options{Now: clk.Now})
	key := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 1_000_000, TPM: 1_000_000_000, Concurrency: 10_000, Budget: budget(1_000_000_000_000, PeriodMonth)}}
	proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 1_000_000, Budget: budget(1_000_000_000_000, PeriodMonth)}}
	const n = 2000
	for range n {
		clk.Add(time.Millisecond)
		admit(t, l, ask(500, 1000, key, proj)).Settle(context.Background(), 300, 700)
	}
	st := l.LeaseStats()
	t.Logf("%d requests: %d admitted from memory, %d calls to Redis", n, st.Local, st.Renewals)
	require.LessOrEqual(t, float64(st.Renewals)/n, 0.1, "calls to Redis per request")
	l.Flush()
	ks := status(t, l, key)
	require.Equal(t, int64(n*700), ks.SpentMicros, "every request's cost counted")
	require.Equal(t, int64(0), ks.ReservedMicros)
	require.Equal(t, int64(0), ks.InFlight)
}

// A lease holds at most an eighth of what remained, in whole requests: another gateway
// is refused early by at most that, and the refusal is the only difference from exact
// mode. Given back (idle, or at Close), all of it is there again.
func TestAnotherGatewaysLeaseBoundsAnEarlyRefusal(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	a := g.leaseLimiter(t, Options{Now: clk.Now, LeaseIdle: time.Second})
	b := g.leaseLimiter(t, Options{Now: clk.Now})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(100_000, PeriodTotal)}}
	admit(t, a, ask(0, 1000, c)).Settle(context.Background(), 0, 1000)
	// a holds a lease of whole requests: at most an eighth of the 99 that remained.
	held := 0
	for ; ; held++ {
		d, err := b.Reserve(context.Background(), ask(0, 1000, c))
		require.NoError(t, err)
		if d.Refused != nil {
			break
		}
		d.Reservation.Settle(context.Background(), 0, 1000)
	}
	early := 99 - held
	t.Logf("b admitted %d, refused while a held %d requests' worth", held, early)
	require.Positive(t, early, "a holds a lease")
	require.LessOrEqual(t, early, 99/8, "at most an eighth of what remained")
	// a spends its lease: nothing beyond the budget, ever.
	for range early {
		admit(t, a, ask(0, 1000, c)).Settle(context.Background(), 0, 1000)
	}
	refuse(t, a, ask(0, 1000, c))
	a.Flush()
	require.Equal(t, int64(100_000), status(t, b, c).SpentMicros)

	// A lease not used within LeaseIdle goes back.
	c2 := Check{Scope: keyScope("k2"), Policy: Policy{Budget: budget(80_000, PeriodTotal)}}
	admit(t, a, ask(0, 1000, c2)).Settle(context.Background(), 0, 1000)
	require.Positive(t, status(t, b, c2).ReservedMicros, "a's lease, as b sees it")
	clk.Add(time.Second)
	a.Flush()
	st := status(t, b, c2)
	require.Equal(t, int64(0), st.ReservedMicros, "given back once idle")
	require.Equal(t, int64(1000), st.SpentMicros)
}

// A limit's new figure is never spent from a lease taken under the old one: the next
// request asks Redis, and the old lease goes back.
func TestALoweredLimitIsNotSpentFromAnOldLease(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	a := g.leaseLimiter(t, Options{Now: clk.Now})
	b := g.leaseLimiter(t, Options{Now: clk.Now})
	old := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 800}}
	admit(t, a, ask(0, 0, old))
	calls := a.LeaseStats().Renewals
	admit(t, a, ask(0, 0, old))
	require.Equal(t, calls, a.LeaseStats().Renewals, "from the lease")
	lowered := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 10}}
	// The bucket holds at most the new figure: a's lease, taken from the old, is not
	// used for it.
	n := len(burstAsks(t, []*Limiter{a, b}, 30, func() Ask { return ask(0, 0, lowered) }))
	require.Equal(t, 10, n, "the new figure, and nothing from the old lease")
	require.Greater(t, a.LeaseStats().Renewals, calls)
}

// A gateway killed with its leases open loses at most them: the other is refused early
// by at most what they held until they lapse, then the spend is seeded again from the
// ledger, which has what the dead gateway had not added yet.
func TestAKilledGatewayLosesAtMostItsOpenLeases(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	lg := &ledger{}
	opts := Options{Now: clk.Now, Seeder: lg.Seeder, LeaseLife: 30 * time.Second}
	a, b := g.leaseLimiter(t, opts), g.leaseLimiter(t, opts)
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(100_000, PeriodMonth)}}
	spend := func(l *Limiter) bool {
		d, err := l.Reserve(context.Background(), ask(0, 1000, c))
		require.NoError(t, err)
		if d.Refused != nil {
			return false
		}
		lg.add(c.Scope, clk.Now(), 1000)
		d.Reservation.Settle(context.Background(), 0, 1000)
		return true
	}
	for range 3 {
		require.True(t, spend(a))
	}
	a.book.abandon() // killed: its spend not added, its lease not given back
	n := 0
	for spend(b) {
		n++
	}
	require.GreaterOrEqual(t, n, 97-99/8-1, "refused early by at most a's lease")
	require.Less(t, n, 97)
	clk.Add(31 * time.Second)
	for spend(b) {
		n++
	}
	require.Equal(t, 97, n, "a's lease lapsed: the rest is b's, and a's spend counted from the ledger")
	b.Flush()
	require.Equal(t, int64(100_000), status(t, b, c).SpentMicros)
}

// While Redis does not answer, a gateway spends the lease it holds, then does what
// exact mode does (a budget: refused as unavailable).
func TestRedisAwaySpendsOnlyTheLeaseHeld(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	l := g.leaseLimiter(t, Options{Now: clk.Now, RetryEvery: time.Hour})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1_000_000, PeriodMonth)}}
	admit(t, l, ask(0, 1000, c)).Settle(context.Background(), 0, 0)
	g.srv.Stop(t)
	var admitted atomic.Int64
	for {
		d, err := l.Reserve(context.Background(), ask(0, 1000, c))
		if err != nil {
			require.ErrorIs(t, err, ErrUnavailable)
			break
		}
		require.Nil(t, d.Refused)
		admitted.Add(1)
		require.Less(t, admitted.Load(), int64(1000), "bounded by the lease")
	}
	t.Logf("%d admitted from the lease while Redis was away", admitted.Load())
	require.Positive(t, admitted.Load())
	require.LessOrEqual(t, admitted.Load(), int64(999/8+1))
}

// Close gives back everything: a lease's unused allowance is in Redis again.
func TestCloseGivesBackEveryLease(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	a := g.leaseLimiter(t, Options{Now: clk.Now})
	c := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 800, Concurrency: 100, Budget: budget(800_000, PeriodMonth)}}
	admit(t, a, ask(0, 1000, c)).Settle(context.Background(), 0, 600)
	other := g.limiter(t, Options{Now: clk.Now})
	require.Less(t, status(t, other, c).Requests.Remaining, int64(799))
	require.NoError(t, a.Close())
	st := status(t, other, c)
	require.Equal(t, int64(799), st.Requests.Remaining)
	require.Equal(t, int64(0), st.InFlight)
	require.Equal(t, int64(600), st.SpentMicros)
	require.Equal(t, int64(0), st.ReservedMicros)
}

// Many leases go back at Close in calls of a bounded size, every one of them.
func TestCloseGivesBackManyLeasesInBoundedCalls(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	a := g.leaseLimiter(t, Options{Now: clk.Now})
	const keys = 300
	checks := make([]Check, keys)
	for i := range checks {
		checks[i] = Check{Scope: keyScope(fmt.Sprintf("k%d", i)), Policy: Policy{RPM: 800}}
		admit(t, a, ask(0, 0, checks[i]))
	}
	before := a.LeaseStats().Renewals
	require.NoError(t, a.Close())
	require.GreaterOrEqual(t, a.LeaseStats().Renewals-before, int64((keys+maxOpsPerCall-1)/maxOpsPerCall))
	other := g.limiter(t, Options{Now: clk.Now})
	for _, c := range checks {
		require.Equal(t, int64(799), status(t, other, c).Requests.Remaining, "%s", c.Scope)
	}
}

// Flush, Status and Close run while requests renew leases of several scopes at once, new
// scopes among them: none of them waits on another for ever, and the limit holds.
func TestFlushAndStatusBesideRenewingRequests(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	l := g.leaseLimiter(t, Options{Now: clk.Now})
	proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 400, Budget: budget(400_000, PeriodMonth)}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 6 {
		wg.Go(func() {
			for i := range 150 {
				key := Check{Scope: keyScope(fmt.Sprintf("k%d-%d", w, i%40)), Policy: Policy{RPM: 50, Concurrency: 2}}
				d, err := l.Reserve(context.Background(), ask(0, 1000, key, proj))
				require.NoError(t, err)
				if d.Refused == nil {
					admitted.Add(1)
					d.Reservation.Settle(context.Background(), 0, 1000)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			l.Flush()
			status(t, l, proj)
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	require.LessOrEqual(t, admitted.Load(), int64(400), "the project's rate")
	require.NoError(t, l.Close())
	other := g.limiter(t, Options{Now: clk.Now})
	st := status(t, other, proj)
	require.Equal(t, admitted.Load()*1000, st.SpentMicros, "every admitted request's spend, given back at Close")
	require.Equal(t, 400-admitted.Load(), st.Requests.Remaining)
}

// A budget's first lease is as large after seeding from the ledger as without: the call
// made again once seeded is the same request's, not a lease that ran out.
func TestSeedingDoesNotGrowTheFirstLease(t *testing.T) {
	g := newGateways(t)
	clk := newClock(t0)
	lg := &ledger{}
	a := g.leaseLimiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
	b := g.leaseLimiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
	c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(100_000, PeriodMonth)}}
	admit(t, a, ask(0, 1000, c)).Settle(context.Background(), 0, 1000)
	n := 0
	for {
		d, err := b.Reserve(context.Background(), ask(0, 1000, c))
		require.NoError(t, err)
		if d.Refused != nil {
			break
		}
		n++
		d.Reservation.Settle(context.Background(), 0, 1000)
	}
	require.Equal(t, 99-minLeaseBatch, n, "a holds its first batch, 4 requests' worth, and no more")
}
