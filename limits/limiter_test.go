package limits

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

func TestRequestsBucketRefillsAndRetryAfterIsExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 60}}
		for i := range 60 {
			d, err := l.Reserve(context.Background(), ask(0, 0, c))
			require.NoError(t, err)
			require.Nil(t, d.Refused, "request %d", i)
			require.Equal(t, int64(60), d.Requests.Limit)
			require.Equal(t, int64(59-i), d.Requests.Remaining)
			require.Nil(t, d.Tokens, "no TPM, no tokens allowance")
			d.Reservation.Settle(context.Background(), 0, 0)
		}
		ref := refuse(t, l, ask(0, 0, c))
		require.Equal(t, KindRequests, ref.Kind)
		require.Equal(t, keyScope("k1"), ref.Scope)
		require.Equal(t, int64(60), ref.Limit)
		require.Equal(t, time.Second, ref.RetryAfter, "60 rpm refills one request a second")

		clk.Add(400 * time.Millisecond)
		require.Equal(t, 600*time.Millisecond, refuse(t, l, ask(0, 0, c)).RetryAfter)
		clk.Add(599 * time.Millisecond)
		require.Equal(t, time.Millisecond, refuse(t, l, ask(0, 0, c)).RetryAfter)
		clk.Add(time.Millisecond)
		admit(t, l, ask(0, 0, c)).Settle(context.Background(), 0, 0)

		// A minute idle fills the bucket, never beyond its capacity.
		clk.Add(10 * time.Minute)
		st := status(t, l, c)
		require.Equal(t, &Allowance{Limit: 60, Remaining: 60, Reset: 0}, st.Requests)
	})
}

func TestTokensBucketSettleRefundsAndTakes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{TPM: 6000}}

		// More than the whole minute's allowance can never fit: no wait would help.
		ref := refuse(t, l, ask(6001, 0, c))
		require.Equal(t, KindTokens, ref.Kind)
		require.Equal(t, time.Duration(0), ref.RetryAfter)

		d, err := l.Reserve(context.Background(), ask(5000, 0, c))
		require.NoError(t, err)
		require.Equal(t, &Allowance{Limit: 6000, Remaining: 1000, Reset: 50 * time.Second}, d.Tokens)
		// 2000 more do not fit: 1000 are missing, refilled at 100 a second.
		require.Equal(t, 10*time.Second, refuse(t, l, ask(2000, 0, c)).RetryAfter)
		// The answer used 1000 of the 5000 reserved: 4000 come back.
		d.Reservation.Settle(context.Background(), 1000, 0)
		require.Equal(t, int64(5000), status(t, l, c).Tokens.Remaining)

		// An answer that used more than reserved takes the rest: the bucket goes below zero.
		r := admit(t, l, ask(5000, 0, c))
		r.Settle(context.Background(), 6000, 0) // 5000 - 5000 - 1000 = -1000
		ref = refuse(t, l, ask(1, 0, c))
		require.Equal(t, 10010*time.Millisecond, ref.RetryAfter, "1001 tokens missing at 100/s")
		require.Equal(t, int64(0), status(t, l, c).Tokens.Remaining, "shown as none left, never negative")
		clk.Add(10010 * time.Millisecond)
		admit(t, l, ask(1, 0, c)).Settle(context.Background(), 1, 0)
	})
}

func TestRefusedAskReservesNothingAnywhere(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		key := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 10, TPM: 1000, Concurrency: 5, Budget: budget(1000, PeriodMonth)}}
		proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 100, Concurrency: 1, Budget: budget(500, PeriodDay)}}

		held := admit(t, l, ask(100, 100, key, proj)) // the project's only slot
		for _, a := range []Ask{
			ask(100, 100, key, proj), // project concurrency
			ask(100, 600, key, proj), // project budget
		} {
			refuse(t, l, a)
		}
		held.Settle(context.Background(), 100, 100)
		refuse(t, l, ask(100, 401, key, proj)) // project budget: 100 spent + 401 > 500
		refuse(t, l, ask(1001, 0, key, proj))  // key tokens

		ks, ps := status(t, l, key), status(t, l, proj)
		require.Equal(t, int64(9), ks.Requests.Remaining, "only the admitted request took a request")
		require.Equal(t, int64(900), ks.Tokens.Remaining)
		require.Equal(t, int64(99), ps.Requests.Remaining)
		require.Equal(t, int64(0), ks.InFlight)
		require.Equal(t, int64(0), ps.InFlight)
		require.Equal(t, int64(100), ks.SpentMicros)
		require.Equal(t, int64(0), ks.ReservedMicros)
		require.Equal(t, int64(0), ps.ReservedMicros)
		require.Equal(t, int64(400), *ps.RemainingMicros)
		// And what fits is admitted.
		admit(t, l, ask(100, 400, key, proj)).Settle(context.Background(), 100, 400)
	})
}

func TestBudgetAdmitsAtTheEdgeAndRefusesOneMore(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}

		inFlight := admit(t, l, ask(0, 600, c))
		// Nothing is spent yet: only the request in flight stands in the way, and it
		// ends within seconds. The refusal says so, and that a retry soon may fit.
		ref := refuse(t, l, ask(0, 401, c))
		require.Equal(t, KindBudget, ref.Kind)
		require.Equal(t, int64(1000), ref.Limit)
		require.Equal(t, budget(1000, PeriodMonth), ref.Budget)
		reset := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
		require.Equal(t, reset, ref.ResetAt)
		require.Equal(t, int64(600), ref.HeldMicros)
		require.Equal(t, time.Second, ref.RetryAfter)
		require.Zero(t, refuse(t, l, ask(0, 1001, c)).HeldMicros, "more than the whole budget: no wait helps")
		edge := admit(t, l, ask(0, 400, c)) // 600 + 400 == 1000
		st := status(t, l, c)
		require.Equal(t, int64(1000), st.ReservedMicros)
		require.Equal(t, int64(0), *st.RemainingMicros)
		require.Equal(t, int64(2), st.InFlight)

		inFlight.Settle(context.Background(), 0, 500) // cheaper than reserved
		edge.Settle(context.Background(), 0, 400)
		st = status(t, l, c)
		require.Equal(t, int64(900), st.SpentMicros)
		require.Equal(t, int64(0), st.ReservedMicros)
		require.Equal(t, int64(100), *st.RemainingMicros)
		require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), st.PeriodStart)
		require.Equal(t, reset, st.ResetAt)
		admit(t, l, ask(0, 100, c)).Settle(context.Background(), 0, 100)
		ref = refuse(t, l, ask(0, 1, c))
		require.Zero(t, ref.HeldMicros, "spent: nothing in flight to wait for")
		require.Equal(t, reset.Sub(t0), ref.RetryAfter, "until the period resets")

		// An ask bigger than the whole budget never fits: no Retry-After.
		require.Equal(t, time.Duration(0), refuse(t, l, ask(0, 1001, c)).RetryAfter)
	})
}

// A budget refusal caused only by requests in flight tells itself apart from one whose
// spend is used up, in memory and in Redis: the first frees as they end.
func TestBudgetHeldOnlyByRequestsInFlightIsATemporaryRefusal(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}
		admit(t, l, ask(0, 900, c)).Settle(context.Background(), 0, 900)
		inFlight := admit(t, l, ask(0, 60, c))

		ref := refuse(t, l, ask(0, 50, c)) // 900 + 50 fits; 900 + 60 + 50 does not
		require.Equal(t, int64(60), ref.HeldMicros)
		require.Equal(t, time.Second, ref.RetryAfter)
		ref = refuse(t, l, ask(0, 150, c)) // 900 + 150 does not fit even once they end
		require.Zero(t, ref.HeldMicros)
		require.Equal(t, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(t0), ref.RetryAfter)

		inFlight.Settle(context.Background(), 0, 30)
		admit(t, l, ask(0, 50, c))
	})
}

func TestZeroBudgetRefusesAnyCostAndAdmitsFree(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.limiter(t, Options{Now: newClock(t0).Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(0, PeriodDay)}}
		require.Equal(t, KindBudget, refuse(t, l, ask(0, 1, c)).Kind)
		admit(t, l, ask(0, 0, c)).Settle(context.Background(), 0, 0)
	})
}

func TestBudgetPeriodsStartAndReset(t *testing.T) {
	for _, tc := range []struct {
		name        string
		b           Budget
		at          time.Time
		start, next time.Time
	}{
		{"day", Budget{Period: PeriodDay}, time.Date(2026, 3, 10, 23, 59, 59, 999, time.UTC),
			time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC)},
		{"day in another zone counts in UTC", Budget{Period: PeriodDay},
			time.Date(2026, 3, 11, 1, 0, 0, 0, time.FixedZone("CET", 3600)),
			time.Date(2026, 3, 11, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC)},
		{"month end", Budget{Period: PeriodMonth}, time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC),
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"december to january", Budget{Period: PeriodMonth}, time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC),
			time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"leap february", Budget{Period: PeriodMonth}, time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
			time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"leap day", Budget{Period: PeriodDay}, time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
			time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"total", Budget{Period: PeriodTotal}, t0, time.Time{}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.start, tc.b.Start(tc.at))
			require.Equal(t, tc.next, tc.b.Reset(tc.at))
		})
	}
}

func TestBudgetStartsAgainAtRolloverButTotalNever(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		// The last second of a leap February, then March.
		clk := newClock(time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC))
		l := b.limiter(t, Options{Now: clk.Now})
		month := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(100, PeriodMonth)}}
		day := Check{Scope: keyScope("k2"), Policy: Policy{Budget: budget(100, PeriodDay)}}
		total := Check{Scope: keyScope("k3"), Policy: Policy{Budget: budget(100, PeriodTotal)}}
		for _, c := range []Check{month, day, total} {
			admit(t, l, ask(0, 100, c)).Settle(context.Background(), 0, 100)
			refuse(t, l, ask(0, 1, c))
		}
		ref := refuse(t, l, ask(0, 1, total))
		require.Equal(t, time.Duration(0), ref.RetryAfter, "a total budget never resets")
		require.True(t, ref.ResetAt.IsZero())
		require.Equal(t, time.Second, refuse(t, l, ask(0, 1, month)).RetryAfter)

		clk.Add(time.Second) // 2028-03-01 00:00:00
		admit(t, l, ask(0, 100, month)).Settle(context.Background(), 0, 100)
		admit(t, l, ask(0, 100, day)).Settle(context.Background(), 0, 100)
		refuse(t, l, ask(0, 1, total))
		clk.Add(400 * 24 * time.Hour)
		refuse(t, l, ask(0, 1, total))
		require.Equal(t, int64(100), status(t, l, total).SpentMicros)
	})
}

func TestSettleAfterRolloverCountsInTheNewPeriod(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC))
		l := b.limiter(t, Options{Now: clk.Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}
		admit(t, l, ask(0, 300, c)).Settle(context.Background(), 0, 300) // December
		r := admit(t, l, ask(0, 700, c))                                 // reserved in December
		clk.Add(2 * time.Second)                                         // January
		r.Settle(context.Background(), 0, 600)

		st := status(t, l, c)
		require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), st.PeriodStart)
		require.Equal(t, int64(600), st.SpentMicros, "the request ended in January")
		require.Equal(t, int64(0), st.ReservedMicros)
		admit(t, l, ask(0, 400, c)).Settle(context.Background(), 0, 400)
		refuse(t, l, ask(0, 1, c))
	})
}

// A request reserved in one period that ends in the next counts once, in the next: not
// in the period it was reserved in as well, and not twice in the new one when one of its
// budgets' new counters exists already and another's is seeded from the ledger by the
// settlement itself (the pass that adds to the seeded one must leave the other alone).
func TestSettleAcrossRolloverCountsEachBudgetOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		december := time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC)
		clk := newClock(december)
		lg := &ledger{}
		l := b.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
		key := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}
		project := Check{Scope: projectScope("p1"), Policy: Policy{Budget: budget(5000, PeriodMonth)}}
		// The ledger's database receives a record after the request's settlement has
		// counted it (records wait in the journal a batch interval first).
		recorded := func(cost int64, at time.Time, scopes ...Scope) {
			for _, s := range scopes {
				lg.add(s, at, cost)
			}
		}

		admit(t, l, ask(0, 300, key, project)).Settle(context.Background(), 0, 300)
		recorded(300, clk.Now(), key.Scope, project.Scope)
		straddling := admit(t, l, ask(0, 700, key, project)) // reserved in December

		clk.Add(2 * time.Second) // January: the project's new counter starts, the key's not yet
		admit(t, l, ask(0, 100, project)).Settle(context.Background(), 0, 100)
		recorded(100, clk.Now(), project.Scope)
		straddling.Settle(context.Background(), 0, 600)
		require.Eventually(t, func() bool {
			l.Flush() // the add-only pass after the seeding is queued too
			return status(t, l, key).SpentMicros == 600
		}, 10*time.Second, time.Millisecond, "the key's January counter seeded from the ledger and given the request's cost")
		recorded(600, clk.Now(), key.Scope, project.Scope)

		st := status(t, l, project)
		require.Equal(t, int64(700), st.SpentMicros, "the project counts the request once in January")
		require.Equal(t, int64(0), st.ReservedMicros)
		st = status(t, l, key)
		require.Equal(t, int64(600), st.SpentMicros)
		require.Equal(t, int64(0), st.ReservedMicros)
		admit(t, l, ask(0, 400, key)).Settle(context.Background(), 0, 0)
		refuse(t, l, ask(0, 401, key))

		if !b.shared() {
			return // memory drops December's counters once January's are made
		}
		clk.Add(december.Sub(clk.Now())) // read December's counters, which Redis keeps an hour
		for _, c := range []Check{key, project} {
			st := status(t, l, c)
			require.Equal(t, int64(300), st.SpentMicros, "%s: December keeps only what ended in December", c.Scope)
			require.Equal(t, int64(0), st.ReservedMicros, "%s: the reservation was released", c.Scope)
		}
	})
}

func TestSettleTwiceAndNilAreHarmless(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.limiter(t, Options{Now: newClock(t0).Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{TPM: 1000, Concurrency: 1, Budget: budget(1000, PeriodMonth)}}
		r := admit(t, l, ask(500, 500, c))
		r.Settle(context.Background(), 100, 200)
		r.Settle(context.Background(), 100, 200)
		r.Settle(context.Background(), 0, 0)
		var none *Reservation
		none.Settle(context.Background(), 1, 1)
		st := status(t, l, c)
		require.Equal(t, int64(200), st.SpentMicros)
		require.Equal(t, int64(900), st.Tokens.Remaining)
		require.Equal(t, int64(0), st.InFlight)
	})
}

func TestSettleReleasesOnACancelledContext(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.limiter(t, Options{Now: newClock(t0).Now})
		c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1, Budget: budget(1000, PeriodMonth)}}
		ctx, cancel := context.WithCancel(context.Background())
		r := admit(t, l, ask(0, 1000, c))
		cancel() // the client left
		r.Settle(ctx, 0, 0)
		admit(t, l, ask(0, 1000, c))
	})
}

func TestLeaseExpiryFreesACrashedGatewaysHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		c := Check{Scope: keyScope("k1"), Policy: Policy{Concurrency: 1, Budget: budget(1000, PeriodMonth)}}
		// Through leases the gateway's lease lives LeaseLife unless renewed: a minute too.
		crashed := b.limiter(t, Options{Now: clk.Now, Lease: time.Minute, LeaseLife: time.Minute})
		admit(t, crashed, ask(0, 1000, c)) // never settled
		if crashed.book != nil {
			crashed.book.abandon() // nothing renewed or given back from now on
		}
		l := crashed
		if b.shared() {
			l = b.limiter(t, Options{Now: clk.Now, Lease: time.Minute, LeaseLife: time.Minute}) // another gateway
		}
		ref := refuse(t, l, ask(0, 1, c))
		require.Contains(t, []Kind{KindConcurrency, KindBudget}, ref.Kind)
		require.Equal(t, time.Second, refuse(t, l, ask(0, 0, c)).RetryAfter, "concurrency: a one-second hint")
		clk.Add(59 * time.Second)
		refuse(t, l, ask(0, 0, c))
		clk.Add(time.Second)
		st := status(t, l, c)
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.ReservedMicros)
		admit(t, l, ask(0, 1000, c))
	})
}

func TestRefusalNamesTheBudgetFirstThenTheLongestWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		l := b.limiter(t, Options{Now: clk.Now})
		key := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 60, Budget: budget(10, PeriodDay)}}
		proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 6}}
		admit(t, l, ask(0, 10, key, proj)).Settle(context.Background(), 0, 10)
		for range 5 {
			admit(t, l, ask(0, 0, key, proj)).Settle(context.Background(), 0, 0)
		}
		ref := refuse(t, l, ask(0, 1, key, proj))
		require.Equal(t, KindBudget, ref.Kind)
		require.Equal(t, keyScope("k1"), ref.Scope)
		ref = refuse(t, l, ask(0, 0, key, proj))
		require.Equal(t, KindRequests, ref.Kind)
		require.Equal(t, projectScope("p1"), ref.Scope)
		require.Equal(t, 10*time.Second, ref.RetryAfter, "6 rpm: one every ten seconds")
	})
}

func TestTightestAllowanceIsReported(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.limiter(t, Options{Now: newClock(t0).Now})
		key := Check{Scope: keyScope("k1"), Policy: Policy{RPM: 100, TPM: 1000}}
		proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 10, TPM: 100000}}
		d, err := l.Reserve(context.Background(), ask(100, 0, key, proj))
		require.NoError(t, err)
		require.Equal(t, int64(10), d.Requests.Limit)
		require.Equal(t, int64(9), d.Requests.Remaining)
		require.Equal(t, 6*time.Second, d.Requests.Reset)
		require.Equal(t, int64(1000), d.Tokens.Limit)
		require.Equal(t, int64(900), d.Tokens.Remaining)
		d.Reservation.Settle(context.Background(), 100, 0)
	})
}

func TestSeedingFromTheLedger(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		clk := newClock(t0)
		lg := &ledger{}
		s := keyScope("k1")
		lg.add(s, time.Date(2026, 2, 27, 0, 0, 0, 0, time.UTC), 5000) // last month: not this period
		lg.add(s, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC), 900)
		l := b.limiter(t, Options{Now: clk.Now, Seeder: lg.Seeder})
		c := Check{Scope: s, Policy: Policy{Budget: budget(1000, PeriodMonth)}}

		refuse(t, l, ask(0, 101, c))
		require.Equal(t, int64(1), lg.queries.Load())
		r := admit(t, l, ask(0, 100, c))
		require.Equal(t, int64(1), lg.queries.Load(), "seeded once, then counted")
		r.Settle(context.Background(), 0, 100)
		st := status(t, l, c)
		require.Equal(t, int64(1000), st.SpentMicros)

		// No budget: the scope's spend this month, from the ledger.
		lg.add(s, t0, 50)
		st = status(t, l, Check{Scope: s, Policy: Policy{RPM: 5}})
		require.Equal(t, int64(950), st.SpentMicros)
		require.Nil(t, st.RemainingMicros)

		// A ledger that does not answer: a budget not yet counted cannot be checked.
		lg.fail.Store(true)
		other := Check{Scope: keyScope("k2"), Policy: Policy{Budget: budget(1000, PeriodMonth)}}
		_, err := l.Reserve(context.Background(), ask(0, 1, other))
		require.ErrorIs(t, err, ErrUnavailable)
		// Rates alone do not need the ledger.
		admit(t, l, ask(0, 1, Check{Scope: keyScope("k2"), Policy: Policy{RPM: 5}})).Settle(context.Background(), 0, 1)
	})
}

func TestConcurrentAsksAdmitExactlyWhatFits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.limiter(t, Options{Now: newClock(t0).Now}) // no refill while it runs
		key := Check{Scope: keyScope("k1"), Policy: Policy{Budget: budget(10_000, PeriodMonth)}}
		proj := Check{Scope: projectScope("p1"), Policy: Policy{RPM: 1000}}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 200 {
			wg.Go(func() {
				<-start
				d, err := l.Reserve(context.Background(), ask(0, 1000, key, proj))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Refused == nil {
					admitted.Add(1) // held to the end: every admitted request is in flight at once
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(10), admitted.Load())
		require.Equal(t, int64(10_000), status(t, l, key).ReservedMicros)
		require.Equal(t, int64(990), status(t, l, proj).Requests.Remaining)
	})
}

func TestEmptyAskIsAdmitted(t *testing.T) {
	l := New(NewMemory(), Options{})
	d, err := l.Reserve(context.Background(), Ask{ID: "x"})
	require.NoError(t, err)
	require.Nil(t, d.Refused)
	require.Nil(t, d.Requests)
	d.Reservation.Settle(context.Background(), 1, 1)
}
