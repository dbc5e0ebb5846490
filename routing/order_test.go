package routing

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// option is a candidate with its own fresh health.
func option(name string, priority, weight int) Option {
	return Option{
		Candidate: &Candidate{Name: name, Priority: priority, Weight: weight},
		Health:    NewHealth(testPolicy),
	}
}

// trip opens o's circuit at now with a plain cooldown.
func trip(o Option, now time.Time) {
	for range testPolicy.FailureThreshold {
		o.Health.RecordFailure(Admitted, ReasonStatus, 0, now)
	}
}

// firstShares orders opts n times and returns how often each position came first.
func firstShares(opts []Option, preferred int, now time.Time, n int) []float64 {
	counts := make([]int, len(opts))
	for range n {
		if order := Order(opts, preferred, now); len(order) > 0 {
			counts[order[0]]++
		}
	}
	shares := make([]float64, len(opts))
	for i, c := range counts {
		shares[i] = float64(c) / float64(n)
	}
	return shares
}

func TestOrderIsAPermutationOfTheAvailable(t *testing.T) {
	opts := []Option{option("a", 0, 1), option("b", 1, 2), option("c", 0, 3), option("d", 2, 0), option("e", 1, 1)}
	trip(opts[3], t0)
	for range 200 {
		order := Order(opts, -1, t0)
		assert.ElementsMatch(t, []int{0, 1, 2, 4}, order)
	}
	assert.Empty(t, Order(nil, -1, t0))
	assert.Empty(t, Order(nil, 0, t0))
}

func TestOrderLowerPriorityFirstRegardlessOfHealth(t *testing.T) {
	// The primary has just failed (worse health band) and the backup is spotless: the
	// primary still goes first while its circuit is closed.
	opts := []Option{option("backup", 5, 10), option("primary", 1, 1), option("middle", 3, 1)}
	opts[1].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	opts[1].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	require.Equal(t, Closed, opts[1].Health.State(t0))
	require.Less(t, opts[1].Health.Snapshot(t0).SuccessRate, 0.7)
	for range 100 {
		assert.Equal(t, []int{1, 2, 0}, Order(opts, -1, t0))
	}
}

func TestOrderLeavesOutOpenCandidates(t *testing.T) {
	opts := []Option{option("a", 0, 1), option("b", 1, 1), option("c", 2, 1)}
	trip(opts[0], t0)
	assert.Equal(t, []int{1, 2}, Order(opts, -1, t0))

	trip(opts[1], t0)
	trip(opts[2], t0)
	assert.Empty(t, Order(opts, -1, t0), "nothing to try while every circuit is open")

	// A Retry-After pause leaves a candidate out just the same.
	opts = []Option{option("a", 0, 1), option("b", 1, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonRateLimit, time.Minute, t0)
	assert.Equal(t, []int{1}, Order(opts, -1, t0.Add(30*time.Second)))
	assert.Equal(t, []int{0, 1}, Order(opts, -1, t0.Add(time.Minute)), "back once the pause is over")
}

func TestOrderHalfOpenCandidates(t *testing.T) {
	p := testPolicy
	p.HalfOpenProbes = 1
	opts := []Option{option("recovering", 0, 1), option("healthy", 0, 1), option("backup", 1, 1)}
	opts[0].Health.SetPolicy(p)
	trip(opts[0], t0)
	now := t0.Add(testPolicy.Cooldown)
	require.Equal(t, HalfOpen, opts[0].Health.State(now))

	// A probe goes after the healthy candidate of its priority, but before a worse priority.
	for range 100 {
		assert.Equal(t, []int{1, 0, 2}, Order(opts, -1, now))
	}
	// With its only probe slot taken, it is left out.
	probe := opts[0].Health.Admit(now)
	require.Equal(t, Probe, probe)
	assert.Equal(t, []int{1, 2}, Order(opts, -1, now))
	opts[0].Health.Release(probe)
	assert.Equal(t, []int{1, 0, 2}, Order(opts, -1, now))
}

func TestOrderPreferredFirstWhileAvailable(t *testing.T) {
	opts := []Option{option("a", 0, 1), option("b", 1, 1), option("c", 2, 1)}

	// The conversation was last served by the worst-priority candidate: it goes first,
	// and the rest keep their order.
	for range 100 {
		assert.Equal(t, []int{2, 0, 1}, Order(opts, 2, t0))
	}
	// Even with a worse health band than the others.
	opts[2].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.Equal(t, []int{2, 0, 1}, Order(opts, 2, t0))

	// Once its circuit is open it is ignored, not an error.
	trip(opts[2], t0)
	assert.Equal(t, []int{0, 1}, Order(opts, 2, t0))

	// No preference, or one that is not among the options, changes nothing.
	assert.Equal(t, []int{0, 1}, Order(opts, -1, t0))
	assert.Equal(t, []int{0, 1}, Order(opts, 7, t0))
}

func TestOrderPreferredBeatsWeight(t *testing.T) {
	opts := []Option{option("heavy", 0, 1000), option("light", 0, 1)}
	for range 500 {
		require.Equal(t, 1, Order(opts, 1, t0)[0])
	}
}

func TestOrderWeightsSpreadFirstChoice(t *testing.T) {
	const n = 10_000
	const tol = 0.025 // about five standard deviations at n = 10,000

	cases := []struct {
		weights []int
		want    []float64
	}{
		{[]int{3, 1}, []float64{0.75, 0.25}},
		{[]int{1, 3}, []float64{0.25, 0.75}},
		{[]int{1, 1}, []float64{0.5, 0.5}},
		{[]int{0, 1}, []float64{0.5, 0.5}},   // weight 0 counts as 1
		{[]int{0, 3}, []float64{0.25, 0.75}}, // weight 0 counts as 1
		{[]int{2, 1, 1}, []float64{0.5, 0.25, 0.25}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.weights), func(t *testing.T) {
			opts := make([]Option, len(c.weights))
			for i, w := range c.weights {
				opts[i] = option(fmt.Sprint("w", i), 0, w)
			}
			got := firstShares(opts, -1, t0, n)
			for i := range c.want {
				assert.InDelta(t, c.want[i], got[i], tol, "position %d: shares %v", i, got)
			}
		})
	}
}

func TestOrderWeightsApplyOnlyWithinPriorityAndBand(t *testing.T) {
	// A heavy weight does not lift a candidate over a better priority.
	opts := []Option{option("heavy", 1, 1000), option("light", 0, 1)}
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 1000))

	// Nor over a better health band.
	opts = []Option{option("heavy", 0, 1000), option("light", 0, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 1000))
}

func TestOrderDemotesAfterAFailureThenSpreadsAgain(t *testing.T) {
	opts := []Option{option("flaky", 0, 1), option("steady", 0, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonTimeout, 0, t0)
	require.Equal(t, Closed, opts[0].Health.State(t0))

	// Right after the failure, and for a while, the healthy one of equal priority goes
	// first every time; the flaky one is still tried, second.
	for _, now := range []time.Time{t0, t0.Add(time.Second), t0.Add(testPolicy.Window / 6)} {
		for range 200 {
			require.Equal(t, []int{1, 0}, Order(opts, -1, now), "%v after the failure", now.Sub(t0))
		}
	}

	// A window without failures later it is back in the same band, and the load spreads
	// by weight again.
	later := t0.Add(testPolicy.Window)
	assert.InDelta(t, 0.5, firstShares(opts, -1, later, 4000)[0], 0.05)
	// Long after, too (the fade must not leave it one band short for good).
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0.Add(20*testPolicy.Window), 4000)[0], 0.05)

	// Earning successes meanwhile does not hurt.
	opts[0].Health.RecordSuccess(Admitted, time.Second, later)
	assert.InDelta(t, 0.5, firstShares(opts, -1, later, 4000)[0], 0.05)
}

// measured gives o a recent time to first byte (the first success sets it exactly).
func measured(o Option, ttfb time.Duration) Option {
	o.Health.RecordSuccess(Admitted, ttfb, t0)
	return o
}

// orderShares orders opts n times and returns how often each whole order came out.
func orderShares(opts []Option, n int) map[string]float64 {
	shares := map[string]float64{}
	for range n {
		shares[fmt.Sprint(Order(opts, -1, t0))] += 1 / float64(n)
	}
	return shares
}

// With n = 10,000 a share's standard deviation is at most 0.005; the bounds below are
// several times wider so the tests cannot flake, and still far from the shares a
// latency-blind order would give.
const latencyDraws = 10_000

func TestOrderFasterFirstAmongEquals(t *testing.T) {
	// Same priority, same health, same weight: without latency each would go first half
	// the time. Only exploration (one order in exploreOneIn, then a fair draw) puts the
	// slow one first: 1/20 × 1/2 = 2.5%.
	opts := []Option{measured(option("slow", 0, 1), 400*time.Millisecond), measured(option("fast", 0, 1), 50*time.Millisecond)}
	got := firstShares(opts, -1, t0, latencyDraws)
	assert.GreaterOrEqual(t, got[1], 0.95, "shares %v", got)

	// Slow ones among themselves go fastest first.
	opts = append(opts, measured(option("slower", 0, 1), 900*time.Millisecond))
	shares := orderShares(opts, latencyDraws)
	assert.GreaterOrEqual(t, shares["[1 0 2]"], 0.93, "orders %v", shares)
}

func TestOrderExplorationTriesTheSlowFirstSometimes(t *testing.T) {
	// The slow one carries three quarters of the weight. Latency overrides that, except
	// in the exploring orders, where it keeps its weight's share: 1/20 × 3/4 = 3.75%.
	// That share is what lets it be measured again and earn its place back.
	opts := []Option{measured(option("slow", 0, 3), 400*time.Millisecond), measured(option("fast", 0, 1), 50*time.Millisecond)}
	got := firstShares(opts, -1, t0, latencyDraws)
	want := 0.75 / exploreOneIn
	assert.InDelta(t, want, got[0], 0.015, "shares %v", got)

	// Once it is as fast again (the moving average has come down), weights rule again.
	for range 10 {
		opts[0].Health.RecordSuccess(Admitted, 50*time.Millisecond, t0)
	}
	require.Less(t, opts[0].Health.recentTTFB(), 100*time.Millisecond)
	got = firstShares(opts, -1, t0, latencyDraws)
	assert.InDelta(t, 0.75, got[0], 0.025, "shares %v", got)
}

func TestOrderCloseLatenciesShareByWeight(t *testing.T) {
	cases := []struct {
		name       string
		heavy, low time.Duration
	}{
		{"close", 120 * time.Millisecond, 100 * time.Millisecond},
		// More than 1.5 times as slow, but by less than 100 ms: jitter among fast ones.
		{"within the margin", 140 * time.Millisecond, 50 * time.Millisecond},
		// More than 100 ms slower, but less than 1.5 times: noise among slow models.
		{"within the ratio", 1400 * time.Millisecond, time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []Option{measured(option("heavy", 0, 3), c.heavy), measured(option("light", 0, 1), c.low)}
			got := firstShares(opts, -1, t0, latencyDraws)
			assert.InDelta(t, 0.75, got[0], 0.025, "shares %v", got)
		})
	}
}

func TestOrderUnmeasuredIsNotDemoted(t *testing.T) {
	// A candidate that has not served yet gets its weight's share next to a fast one...
	opts := []Option{option("new", 0, 1), measured(option("fast", 0, 1), 50*time.Millisecond)}
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)

	// ...and does not count as the fastest: a slow measured one next to it is not demoted
	// for lack of a real comparison.
	opts = []Option{option("new", 0, 1), measured(option("slow", 0, 1), 400*time.Millisecond)}
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)
}

func TestOrderPriorityAndBandBeatLatency(t *testing.T) {
	// A faster candidate does not jump a better priority, even when exploring.
	opts := []Option{measured(option("fast backup", 1, 1), 50*time.Millisecond), measured(option("slow primary", 0, 1), 400*time.Millisecond)}
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 2000))

	// Nor a better health band.
	opts = []Option{measured(option("fast flaky", 0, 1), 50*time.Millisecond), measured(option("slow steady", 0, 1), 400*time.Millisecond)}
	opts[0].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 2000))

	// A slow candidate goes after its faster equals, but still before any worse priority
	// or band: it is demoted within its group, not out of it.
	opts = []Option{
		measured(option("slow", 0, 1), 400*time.Millisecond),
		measured(option("fast", 0, 1), 50*time.Millisecond),
		measured(option("backup", 1, 1), 60*time.Millisecond),
		measured(option("flaky", 0, 1), 60*time.Millisecond),
	}
	opts[3].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	for range 2000 {
		order := Order(opts, -1, t0)
		require.Equal(t, []int{3, 2}, order[2:], "order %v", order)
	}

	// And the fastest of another priority does not make the equals of this one slow:
	// 400 and 420 ms are close, so they share by weight.
	opts = []Option{
		measured(option("a", 0, 1), 400*time.Millisecond),
		measured(option("b", 0, 1), 420*time.Millisecond),
		measured(option("fast backup", 1, 1), 50*time.Millisecond),
	}
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)
	// Likewise across bands.
	opts[2].Candidate.Priority = 0
	opts[2].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)
}

func TestOrderPreferredFirstEvenWhenSlow(t *testing.T) {
	// The conversation's candidate keeps it, however slow: its caches and signatures are
	// worth more than the latency.
	opts := []Option{measured(option("fast", 0, 1), 50*time.Millisecond), measured(option("slow", 0, 1), 400*time.Millisecond)}
	for range 1000 {
		require.Equal(t, []int{1, 0}, Order(opts, 1, t0))
	}
}

func TestSoonestReady(t *testing.T) {
	assert.Equal(t, t0, SoonestReady(nil, t0), "no options: now")

	opts := []Option{option("a", 0, 1), option("b", 0, 1), option("c", 0, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonRateLimit, 30*time.Second, t0)
	opts[1].Health.RecordFailure(Admitted, ReasonRateLimit, 10*time.Second, t0)
	opts[2].Health.RecordFailure(Admitted, ReasonRateLimit, 20*time.Second, t0)
	now := t0.Add(time.Second)
	assert.Equal(t, t0.Add(10*time.Second), SoonestReady(opts, now))
	for _, o := range opts {
		assert.False(t, o.Health.Available(now))
		assert.False(t, SoonestReady(opts, now).After(o.Health.ReadyAt(now)))
	}

	// When the earliest pause ends, the answer is now.
	now = t0.Add(15 * time.Second)
	assert.Equal(t, now, SoonestReady(opts, now))

	// Any closed candidate makes it now.
	opts = append(opts, option("d", 9, 1))
	assert.Equal(t, t0.Add(time.Second), SoonestReady(opts, t0.Add(time.Second)))
}

func TestAffinityGetAfterSet(t *testing.T) {
	a := NewAffinity(10, time.Hour)
	_, ok := a.Get("conv-1", t0)
	assert.False(t, ok)

	a.Set("conv-1", "east", t0)
	got, ok := a.Get("conv-1", t0.Add(time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "east", got)

	a.Set("conv-1", "west", t0.Add(2*time.Minute))
	got, ok = a.Get("conv-1", t0.Add(3*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "west", got, "the last candidate to serve wins")
	assert.Equal(t, 1, a.Len())

	_, ok = a.Get("conv-2", t0)
	assert.False(t, ok)
}

func TestAffinityExpiresAfterTTL(t *testing.T) {
	const ttl = 10 * time.Minute
	a := NewAffinity(10, ttl)
	a.Set("conv", "east", t0)

	got, ok := a.Get("conv", t0.Add(ttl))
	assert.True(t, ok, "still remembered at exactly the TTL")
	assert.Equal(t, "east", got)

	a = NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	_, ok = a.Get("conv", t0.Add(ttl+time.Nanosecond))
	assert.False(t, ok)
	assert.Zero(t, a.Len(), "an expired entry found by Get is dropped")

	// A Set sweeps expired entries from the old end.
	a = NewAffinity(10, ttl)
	a.Set("old-1", "east", t0)
	a.Set("old-2", "east", t0.Add(time.Minute))
	a.Set("new", "west", t0.Add(time.Minute+ttl+time.Second))
	assert.Equal(t, 1, a.Len())

	// Setting again keeps a conversation alive.
	a = NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	a.Set("conv", "east", t0.Add(ttl))
	_, ok = a.Get("conv", t0.Add(ttl+ttl/2))
	assert.True(t, ok)
}

func TestAffinityReadKeepsConversationAlive(t *testing.T) {
	// The TTL counts from a conversation's last request: a read is a use.
	const ttl = 10 * time.Minute
	a := NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	_, ok := a.Get("conv", t0.Add(8*time.Minute))
	require.True(t, ok)
	got, ok := a.Get("conv", t0.Add(16*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "east", got)
}

func TestAffinityEvictsLeastRecentlyUsed(t *testing.T) {
	a := NewAffinity(3, time.Hour)
	a.Set("a", "1", t0)
	a.Set("b", "2", t0.Add(time.Second))
	a.Set("c", "3", t0.Add(2*time.Second))
	require.Equal(t, 3, a.Len())

	// "a" is the oldest entry, but it was just read: "b" is the least recently used.
	_, ok := a.Get("a", t0.Add(3*time.Second))
	require.True(t, ok)
	a.Set("d", "4", t0.Add(4*time.Second))
	assert.Equal(t, 3, a.Len())
	_, ok = a.Get("b", t0.Add(5*time.Second))
	assert.False(t, ok, "the least recently used entry goes")
	for _, k := range []string{"a", "c", "d"} {
		_, ok := a.Get(k, t0.Add(5*time.Second))
		assert.True(t, ok, k)
	}

	// Updating an entry counts as use too.
	a = NewAffinity(2, time.Hour)
	a.Set("x", "1", t0)
	a.Set("y", "2", t0.Add(time.Second))
	a.Set("x", "3", t0.Add(2*time.Second))
	a.Set("z", "4", t0.Add(3*time.Second))
	_, ok = a.Get("y", t0.Add(4*time.Second))
	assert.False(t, ok)
	got, ok := a.Get("x", t0.Add(4*time.Second))
	assert.True(t, ok)
	assert.Equal(t, "3", got)
}

func TestAffinityLenIsBounded(t *testing.T) {
	const limit = 50
	a := NewAffinity(limit, time.Hour)
	for i := range 1000 {
		a.Set(fmt.Sprint("conv-", i), "east", t0.Add(time.Duration(i)*time.Millisecond))
		require.LessOrEqual(t, a.Len(), limit)
	}
	assert.Equal(t, limit, a.Len())
	// The newest survive.
	_, ok := a.Get("conv-999", t0.Add(time.Second))
	assert.True(t, ok)
	_, ok = a.Get("conv-0", t0.Add(time.Second))
	assert.False(t, ok)
}

func TestAffinityConcurrentUse(t *testing.T) {
	const limit = 64
	a := NewAffinity(limit, time.Minute)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				key := fmt.Sprint("conv-", (w*7919+i)%200)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				if i%3 == 0 {
					a.Set(key, fmt.Sprint("cand-", w), now)
				} else {
					a.Get(key, now)
				}
				if n := a.Len(); n > limit {
					t.Errorf("Len %d is over the limit %d", n, limit)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, a.Len(), limit)
}

// BenchmarkOrder orders a model's candidates the way every request does: two priorities,
// mixed weights, some with a measured time to first byte.
func BenchmarkOrder(b *testing.B) {
	opts := []Option{option("a", 0, 3), option("b", 0, 1), option("c", 0, 1), option("d", 1, 1)}
	opts[0].Health.RecordSuccess(Admitted, 80*time.Millisecond, t0)
	opts[1].Health.RecordSuccess(Admitted, 400*time.Millisecond, t0)
	b.ReportAllocs()
	for b.Loop() {
		Order(opts, -1, t0)
	}
}
