package limits

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/internal/redistest"
)

// Two gateways sharing one Redis (a server, a Cluster, a Sentinel set-up): 50 concurrent
// asks against a limit that fits 10 admit exactly 10, whichever gateway answers; and the
// ask's other scope (the project) counts only the admitted ones, in a Cluster too, where
// each scope decides alone and a refused ask gives back what its other scope took.
func TestTwoGatewaysAdmitExactlyWhatFitsOnEveryRedis(t *testing.T) {
	eachRedis(t, func(t *testing.T, b *backend) {
		for _, tc := range []struct {
			name   string
			policy Policy
		}{
			{"budget", Policy{Budget: budget(10_000, PeriodMonth)}},
			{"rate", Policy{RPM: 10}},
			{"concurrency", Policy{Concurrency: 10}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				clk := newClock(t0) // no refill while it runs
				gw := []*Limiter{b.limiter(t, Options{Now: clk.Now}), b.limiter(t, Options{Now: clk.Now})}
				key := Check{Scope: keyScope("k-" + tc.name), Policy: tc.policy}
				proj := Check{Scope: projectScope("p-" + tc.name), Policy: Policy{RPM: 1_000_000}}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range 50 {
					wg.Go(func() {
						<-start
						d, err := gw[i%2].Reserve(context.Background(), ask(0, 1000, proj, key))
						if err != nil {
							t.Error(err)
							return
						}
						if d.Refused == nil {
							admitted.Add(1) // held to the end: every admitted request is in flight at once
						} else {
							require.Equal(t, key.Scope, d.Refused.Scope)
						}
					})
				}
				close(start)
				wg.Wait()
				require.Equal(t, int64(10), admitted.Load(), "a limit that fits 10, across two gateways")
				if b.lease {
					// A scope without a concurrency limit: each gateway counts its own
					// requests in flight. Leases keep what refused requests took until
					// they give it back: closed, they keep only what the admitted hold.
					inFlight := int64(0)
					for _, l := range gw {
						inFlight += status(t, l, proj).InFlight
						require.NoError(t, l.Close())
					}
					require.Equal(t, int64(10), inFlight, "the refused requests hold no slot of the project")
					st := status(t, b.limiter(t, Options{Now: clk.Now}), proj)
					require.Equal(t, int64(1_000_000-10), st.Requests.Remaining, "the project counts only the admitted requests")
					return
				}
				for _, l := range gw {
					st := status(t, l, proj)
					require.Equal(t, int64(1_000_000-10), st.Requests.Remaining, "the project counts only the admitted requests")
					require.Equal(t, int64(10), st.InFlight, "the refused requests hold no slot of the project")
				}
			})
		}
	})
}

// maxBurst bounds a burst's requests: a failover runs in a second or two, some tens of
// thousands of requests here, and one that never ends is a failure, not a reason to
// go on.
const maxBurst = 500_000

// burstResult is what burst saw.
type burstResult struct {
	admitted       int64 // admissions in all
	admittedBefore int64 // admissions before duringBurst began
	admittedDuring int64 // admissions while it ran
	maxInFlight    int64 // the most requests seen in flight at once
	errs           int64
	firstErr       error
}

// burst runs asks against two gateways from 8 workers, and duringBurst once 20 have
// been admitted; it stops once 20 more have been admitted after duringBurst returned.
// Each admitted request holds its slot a moment, is recorded in the ledger, and
// settles at its reserved cost, 1000.
func burst(t *testing.T, gw []*Limiter, lg *ledger, clk *clock, checks []Check, duringBurst func()) burstResult {
	var res burstResult
	var admitted, inFlight, maxInFlight, errs, doneAt atomic.Int64
	var overran atomic.Bool
	doneAt.Store(-1)
	var errOnce sync.Once
	duringDone := make(chan struct{})
	var trigger sync.Once
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			l := gw[w%2]
			for {
				if at := doneAt.Load(); at >= 0 && admitted.Load() >= at+20 {
					return
				}
				if admitted.Load()+errs.Load() > maxBurst {
					// Something keeps the burst from ending: fail, rather than grow the
					// ledger until the machine runs out of memory.
					overran.Store(true)
					return
				}
				d, err := l.Reserve(context.Background(), ask(0, 1000, checks...))
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { res.firstErr = err })
					continue
				}
				if d.Refused != nil {
					continue
				}
				if n := admitted.Add(1); n == 20 {
					trigger.Do(func() {
						res.admittedBefore = n
						go func() {
							defer close(duringDone)
							// Also when duringBurst fails the test: the workers stop.
							defer func() { doneAt.Store(admitted.Load()) }()
							duringBurst()
						}()
					})
				}
				in := inFlight.Add(1)
				for m := maxInFlight.Load(); in > m && !maxInFlight.CompareAndSwap(m, in); m = maxInFlight.Load() {
				}
				// The request runs a moment: through leases admission is in memory, and
				// eight workers that never wait would take both cores from Redis.
				time.Sleep(100 * time.Microsecond)
				inFlight.Add(-1)
				for _, c := range checks {
					if c.Policy.Budget != nil {
						lg.add(c.Scope, clk.Now(), 1000)
					}
				}
				d.Reservation.Settle(context.Background(), 0, 1000)
			}
		})
	}
	wg.Wait()
	trigger.Do(func() { close(duringDone) }) // never begun: nothing to wait for
	<-duringDone
	require.False(t, overran.Load(), "the burst never ended: %d admitted, %d errors (first: %v)", admitted.Load(), errs.Load(), res.firstErr)
	res.admitted, res.maxInFlight, res.errs = admitted.Load(), maxInFlight.Load(), errs.Load()
	res.admittedDuring = doneAt.Load() - res.admittedBefore
	return res
}

// A graceful failover of the master holding a key's counters (CLUSTER FAILOVER: the
// replica catches up first) in the middle of a burst through two gateways loses
// nothing: every request is answered, the concurrency limit never admits more than it
// fits, and the budget admits exactly what it holds.
func TestClusterFailoverMidBurstKeepsTheLimitsExact(t *testing.T) {
	inBothModes(t, testClusterFailoverMidBurstKeepsTheLimitsExact)
}

func testClusterFailoverMidBurstKeepsTheLimitsExact(t *testing.T, lease bool) {
	c := redistest.StartCluster(t) // its own: failovers leave a shared one changing for a while
	b := &backend{name: "cluster", client: func(t testing.TB) redis.UniversalClient { return newClusterClient(t, c) }, prefix: modePrefix("failover:", lease), lease: lease}
	clk := newClock(t0)
	lg := &ledger{}
	opts := Options{Now: clk.Now, Seeder: lg.Seeder}
	gw := []*Limiter{b.limiter(t, opts), b.limiter(t, opts)}
	key := Check{Scope: keyScope("k-failover"), Policy: Policy{Concurrency: 4, Budget: budget(1_000_000_000, PeriodMonth)}}
	proj := Check{Scope: projectScope("p-failover"), Policy: Policy{RPM: 1_000_000}}

	master := c.MasterOf(t, "{"+key.Scope.String()+"}")
	var promoted *redistest.Server
	res := burst(t, gw, lg, clk, []Check{proj, key}, func() { promoted = c.Failover(t, master) })
	require.NotEqual(t, master, promoted)
	t.Logf("%d admitted, %d while the failover ran", res.admitted, res.admittedDuring)
	require.Zero(t, res.errs, "every request answered through the failover: %v", res.firstErr)
	require.LessOrEqual(t, res.maxInFlight, int64(4), "the concurrency limit held")
	for _, l := range gw {
		l.Flush()
		require.False(t, l.down.Load(), "the counters never stopped answering")
	}
	if lease {
		// What the leases hold unused shows as reserved elsewhere: given back, nothing is.
		for _, l := range gw {
			require.NoError(t, l.Close())
		}
		gw = []*Limiter{b.limiter(t, opts), b.limiter(t, opts)}
	}
	st := status(t, gw[1], key)
	require.Equal(t, res.admitted*1000, st.SpentMicros, "every admitted request's spend counted once, none lost")
	require.Equal(t, int64(0), st.ReservedMicros)
	require.Equal(t, int64(0), st.InFlight)
	// And the budget still admits exactly what it holds.
	left := key.Policy.Budget.Micros - st.SpentMicros
	refuse(t, gw[0], ask(0, left+1, proj, key))
	admit(t, gw[1], ask(0, left, proj, key))
}

// A master killed (kill -9) mid-burst: until its replica is promoted (after the node
// timeout), the gateways keep answering, rates counted in each gateway meanwhile and a
// budget in the lost slots refused (when_unreachable refuse); once promoted, they share
// the counters again. What the master had not yet sent its replica is lost
// (asynchronous replication): the docs state it.
func TestClusterMasterKilledGatewaysKeepAnswering(t *testing.T) {
	inBothModes(t, func(t *testing.T, lease bool) {
		c := redistest.StartCluster(t) // its own: failovers leave a shared one changing for a while
		b := &backend{name: "cluster", client: func(t testing.TB) redis.UniversalClient { return newClusterClient(t, c) }, prefix: modePrefix("killed:", lease), lease: lease}
		var replica *redistest.Server
		testMasterKilledGatewaysKeepAnswering(t, b, keyScope("k-killed"), masterCrash{
			inSync: func() { c.WaitHealthy(t) },
			kill: func(scope Scope) {
				master := c.MasterOf(t, "{"+scope.String()+"}")
				replica = c.Kill(t, master)
				t.Cleanup(func() {
					// Leave the Cluster whole: the node comes back as the new master's replica.
					master.Start(t)
					c.WaitHealthy(t)
				})
			},
			promote: func() { c.WaitPromoted(t, replica) },
		})
	})
}

// The same with Sentinel: the master killed, the Sentinels held back from promoting the
// replica until the test has seen the outage, then let go.
func TestSentinelMasterKilledGatewaysKeepAnswering(t *testing.T) {
	inBothModes(t, func(t *testing.T, lease bool) {
		s := redistest.StartSentinel(t)
		b := &backend{name: "sentinel", client: func(t testing.TB) redis.UniversalClient { return newSentinelClient(t, s) }, prefix: modePrefix("skilled:", lease), lease: lease}
		testMasterKilledGatewaysKeepAnswering(t, b, keyScope("k-skilled"), masterCrash{
			inSync:  func() { s.WaitInSync(t) },
			kill:    func(Scope) { s.Kill(t) },
			promote: func() { s.WaitPromoted(t) },
		})
	})
}

// masterCrash is how a test crashes the master holding a scope's counters: inSync waits
// until its replica has what it took, kill stops it at once, promote lets the replica
// take its place and returns once it has.
type masterCrash struct {
	inSync  func()
	kill    func(Scope)
	promote func()
}

func testMasterKilledGatewaysKeepAnswering(t *testing.T, b *backend, scope Scope, crash masterCrash) {
	lease := b.lease
	clk := newClock(t0)
	lg := &ledger{}
	opts := Options{Now: clk.Now, Seeder: lg.Seeder, Timeout: 200 * time.Millisecond, RetryEvery: 20 * time.Millisecond}
	gw := []*Limiter{b.limiter(t, opts), b.limiter(t, opts)}
	rates := Check{Scope: scope, Policy: Policy{RPM: 1_000_000}}
	spend := Check{Scope: scope, Policy: Policy{RPM: 1_000_000, Budget: budget(1_000_000, PeriodMonth)}}
	for _, l := range gw {
		admit(t, l, ask(0, 1, spend)).Settle(context.Background(), 0, 1)
		lg.add(spend.Scope, clk.Now(), 1)
		l.Flush()
	}
	// Counted, and copied to the replica: only then is it safe from the crash.
	crash.inSync()
	crash.kill(rates.Scope)
	// Until the replica is promoted, every request is answered at once: rates counted
	// locally, a budget refused as unavailable.
	for _, l := range gw {
		for range 20 {
			admit(t, l, ask(0, 0, rates)).Settle(context.Background(), 0, 0)
		}
		// Through leases, what a lease holds is spent first (an eighth of what remained
		// at most), then the budget is refused as unavailable.
		var err error
		for n := 0; err == nil; n++ {
			require.Less(t, n, 1_000_000/8+1, "spent past the lease")
			var d Decision
			d, err = l.Reserve(context.Background(), ask(0, 1, spend))
			if err == nil {
				require.Nil(t, d.Refused)
				require.True(t, lease, "exact mode asks Redis")
				d.Reservation.Settle(context.Background(), 0, 1)
				lg.add(spend.Scope, clk.Now(), 1)
			}
		}
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, l.down.Load())
	}
	crash.promote()
	// Promoted: the gateways share the counters again, the spend counted before the
	// crash (replicated) still there.
	for _, l := range gw {
		require.Eventually(t, func() bool {
			d, err := l.Reserve(context.Background(), ask(0, 0, rates))
			if err == nil {
				d.Reservation.Settle(context.Background(), 0, 0)
			}
			return err == nil && !l.down.Load()
		}, 15*time.Second, 20*time.Millisecond)
	}
	if lease {
		// Given back, the leases hold nothing; what was spent from them is counted.
		for _, l := range gw {
			require.NoError(t, l.Close())
		}
		gw = []*Limiter{b.limiter(t, opts), b.limiter(t, opts)}
	}
	spent, err := lg.Seeder(context.Background(), spend.Scope, time.Time{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := gw[0].Status(context.Background(), spend)
		return err == nil && st.SpentMicros == spent && !gw[0].down.Load()
	}, 5*time.Second, 20*time.Millisecond)
	refuse(t, gw[1], ask(0, 1_000_000-spent+1, spend))
	admit(t, gw[1], ask(0, 1_000_000-spent, spend))
}

// A Sentinel failover (SENTINEL FAILOVER) mid-burst: every request is answered while
// the gateways follow the master to its new place; then the two gateways share the new
// master and its limits admit exactly what fits. Unlike CLUSTER FAILOVER, a Sentinel's
// failover does not stop the old master taking writes: those it took after the
// replica's promotion, until the clients heard of the switch (about a second), are
// lost with it. The test logs how many; docs/store-and-scale-out.md states the bound.
func TestSentinelFailoverMidBurstGatewaysFollowTheMaster(t *testing.T) {
	inBothModes(t, testSentinelFailoverMidBurstGatewaysFollowTheMaster)
}

func testSentinelFailoverMidBurstGatewaysFollowTheMaster(t *testing.T, lease bool) {
	s := redistest.StartSentinel(t) // its own: a failover leaves a shared one changing for a while
	b := &backend{name: "sentinel", client: func(t testing.TB) redis.UniversalClient { return newSentinelClient(t, s) }, prefix: modePrefix("sfailover:", lease), lease: lease}
	clk := newClock(t0)
	lg := &ledger{}
	opts := Options{Now: clk.Now, Seeder: lg.Seeder, RetryEvery: 20 * time.Millisecond, BudgetWhenUnreachable: "local"}
	gw := []*Limiter{b.limiter(t, opts), b.limiter(t, opts)}
	key := Check{Scope: keyScope("k-sfailover"), Policy: Policy{Budget: budget(1_000_000_000, PeriodMonth)}}

	res := burst(t, gw, lg, clk, []Check{key}, func() { s.Failover(t) })
	require.Zero(t, res.errs, "every request answered (counted locally while the master moved): %v", res.firstErr)
	st := status(t, gw[0], key)
	// Writes the old master took after the replica's promotion, before the clients
	// moved, are lost with it (the docs say so): logged, not asserted.
	t.Logf("%d admitted, %d while the failover ran; the new master counts %d of their spend, %d reserved, %d in flight",
		res.admitted, res.admittedDuring, st.SpentMicros/1000, st.ReservedMicros/1000, st.InFlight)

	// On the new master: exact again across both gateways.
	for _, l := range gw {
		l.Flush()
		require.Eventually(t, func() bool {
			_, _ = l.Reserve(context.Background(), ask(0, 0, Check{Scope: keyScope("probe"), Policy: Policy{RPM: 1000}}))
			return !l.down.Load()
		}, 10*time.Second, 10*time.Millisecond)
	}
	after := Check{Scope: keyScope("k-after"), Policy: Policy{Budget: budget(10_000, PeriodMonth)}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			d, err := gw[i%2].Reserve(context.Background(), ask(0, 1000, after))
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
				return
			}
			if d.Refused == nil {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(10), admitted.Load())
}

// A Cluster as managed services offer one (ElastiCache, Memorystore, Azure Cache): TLS
// only, an ACL user with a password, the default user off. rediss://user:password@ URLs of
// two nodes reach all six, and two gateways hold a limit exactly through it.
func TestClusterOverTLSWithAnACLUserHoldsALimit(t *testing.T) {
	c := redistest.StartSecureCluster(t)
	client := func(t testing.TB) redis.UniversalClient {
		o, err := ParseRedisClusterURLs(c.URLs()[:2])
		require.NoError(t, err)
		require.NotNil(t, o.TLSConfig, "rediss:// is TLS")
		o.TLSConfig.RootCAs = c.RootCAs // the test's own CA; a managed service's is trusted already
		cl := redis.NewClusterClient(o)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	b := &backend{name: "secure cluster", client: client, prefix: "tls:"}
	clk := newClock(t0)
	gw := []*Limiter{b.limiter(t, Options{Now: clk.Now}), b.limiter(t, Options{Now: clk.Now})}
	key := Check{Scope: keyScope("k-tls"), Policy: Policy{Concurrency: 10}}
	proj := Check{Scope: projectScope("p-tls"), Policy: Policy{RPM: 1000}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			d, err := gw[i%2].Reserve(context.Background(), ask(0, 0, proj, key))
			if err != nil {
				t.Error(err)
				return
			}
			if d.Refused == nil {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(10), admitted.Load())
	require.Equal(t, int64(990), status(t, gw[1], proj).Requests.Remaining)
}

// inBothModes runs f in exact mode and through leases.
func inBothModes(t *testing.T, f func(t *testing.T, lease bool)) {
	t.Run("exact", func(t *testing.T) { f(t, false) })
	t.Run("lease", func(t *testing.T) { f(t, true) })
}

// modePrefix keeps each mode's counters apart in a Redis the tests share.
func modePrefix(prefix string, lease bool) string {
	if lease {
		return "lease-" + prefix
	}
	return prefix
}
