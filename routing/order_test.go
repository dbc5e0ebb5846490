package routing

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// live is a candidate with its own fresh health.
func live(name string, priority, weight int) LiveCandidate {
	return LiveCandidate{
		Candidate: &Candidate{Name: name, Priority: priority, Weight: weight},
		Health:    NewHealth(testPolicy),
	}
}

// trip opens o's circuit at now with a plain cooldown.
func trip(o LiveCandidate, now time.Time) {
	for range testPolicy.FailureThreshold {
		o.Health.RecordFailure(Admitted, ReasonStatus, 0, now)
	}
}

// firstShares orders opts n times and returns how often each position came first.
func firstShares(opts []LiveCandidate, preferred int, now time.Time, n int) []float64 {
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
	opts := []LiveCandidate{live("a", 0, 1), live("b", 1, 2), live("c", 0, 3), live("d", 2, 0), live("e", 1, 1)}
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
	opts := []LiveCandidate{live("backup", 5, 10), live("primary", 1, 1), live("middle", 3, 1)}
	opts[1].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	opts[1].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	require.Equal(t, Closed, opts[1].Health.State(t0))
	require.Less(t, opts[1].Health.Snapshot(t0).SuccessRate, 0.7)
	for range 100 {
		assert.Equal(t, []int{1, 2, 0}, Order(opts, -1, t0))
	}
}

func TestOrderLeavesOutOpenCandidates(t *testing.T) {
	opts := []LiveCandidate{live("a", 0, 1), live("b", 1, 1), live("c", 2, 1)}
	trip(opts[0], t0)
	assert.Equal(t, []int{1, 2}, Order(opts, -1, t0))

	trip(opts[1], t0)
	trip(opts[2], t0)
	assert.Empty(t, Order(opts, -1, t0), "nothing to try while every circuit is open")

	// A Retry-After pause leaves a candidate out just the same.
	opts = []LiveCandidate{live("a", 0, 1), live("b", 1, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonRateLimit, 15*time.Second, t0)
	assert.Equal(t, []int{1}, Order(opts, -1, t0.Add(10*time.Second)))
	assert.Equal(t, []int{0, 1}, Order(opts, -1, t0.Add(15*time.Second)), "back once the pause is over")
}

func TestOrderHalfOpenCandidates(t *testing.T) {
	p := testPolicy
	p.HalfOpenProbes = 1
	opts := []LiveCandidate{live("recovering", 0, 1), live("healthy", 0, 1), live("backup", 1, 1)}
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
	opts := []LiveCandidate{live("a", 0, 1), live("b", 1, 1), live("c", 2, 1)}

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
	opts := []LiveCandidate{live("heavy", 0, 1000), live("light", 0, 1)}
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
			opts := make([]LiveCandidate, len(c.weights))
			for i, w := range c.weights {
				opts[i] = live(fmt.Sprint("w", i), 0, w)
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
	opts := []LiveCandidate{live("heavy", 1, 1000), live("light", 0, 1)}
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 1000))

	// Nor over a better health band.
	opts = []LiveCandidate{live("heavy", 0, 1000), live("light", 0, 1)}
	opts[0].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 1000))
}

func TestOrderDemotesAfterAFailureThenSpreadsAgain(t *testing.T) {
	opts := []LiveCandidate{live("flaky", 0, 1), live("steady", 0, 1)}
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
func measured(o LiveCandidate, ttfb time.Duration) LiveCandidate {
	o.Health.RecordSuccess(Admitted, ttfb, t0)
	return o
}

// orderShares orders opts n times and returns how often each whole order came out.
func orderShares(opts []LiveCandidate, n int) map[string]float64 {
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
	opts := []LiveCandidate{measured(live("slow", 0, 1), 400*time.Millisecond), measured(live("fast", 0, 1), 50*time.Millisecond)}
	got := firstShares(opts, -1, t0, latencyDraws)
	assert.GreaterOrEqual(t, got[1], 0.95, "shares %v", got)

	// Slow ones among themselves go fastest first.
	opts = append(opts, measured(live("slower", 0, 1), 900*time.Millisecond))
	shares := orderShares(opts, latencyDraws)
	assert.GreaterOrEqual(t, shares["[1 0 2]"], 0.93, "orders %v", shares)
}

func TestOrderExplorationTriesTheSlowFirstSometimes(t *testing.T) {
	// The slow one carries three quarters of the weight. Latency overrides that, except
	// in the exploring orders, where it keeps its weight's share: 1/20 × 3/4 = 3.75%.
	// That share is what lets it be measured again and earn its place back.
	opts := []LiveCandidate{measured(live("slow", 0, 3), 400*time.Millisecond), measured(live("fast", 0, 1), 50*time.Millisecond)}
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
			opts := []LiveCandidate{measured(live("heavy", 0, 3), c.heavy), measured(live("light", 0, 1), c.low)}
			got := firstShares(opts, -1, t0, latencyDraws)
			assert.InDelta(t, 0.75, got[0], 0.025, "shares %v", got)
		})
	}
}

func TestOrderUnmeasuredIsNotDemoted(t *testing.T) {
	// A candidate that has not served yet gets its weight's share next to a fast one...
	opts := []LiveCandidate{live("new", 0, 1), measured(live("fast", 0, 1), 50*time.Millisecond)}
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)

	// ...and does not count as the fastest: a slow measured one next to it is not demoted
	// for lack of a real comparison.
	opts = []LiveCandidate{live("new", 0, 1), measured(live("slow", 0, 1), 400*time.Millisecond)}
	assert.InDelta(t, 0.5, firstShares(opts, -1, t0, latencyDraws)[0], 0.025)
}

func TestOrderPriorityAndBandBeatLatency(t *testing.T) {
	// A faster candidate does not jump a better priority, even when exploring.
	opts := []LiveCandidate{measured(live("fast backup", 1, 1), 50*time.Millisecond), measured(live("slow primary", 0, 1), 400*time.Millisecond)}
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 2000))

	// Nor a better health band.
	opts = []LiveCandidate{measured(live("fast flaky", 0, 1), 50*time.Millisecond), measured(live("slow steady", 0, 1), 400*time.Millisecond)}
	opts[0].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	assert.Equal(t, []float64{0, 1}, firstShares(opts, -1, t0, 2000))

	// A slow candidate goes after its faster equals, but still before any worse priority
	// or band: it is demoted within its group, not out of it.
	opts = []LiveCandidate{
		measured(live("slow", 0, 1), 400*time.Millisecond),
		measured(live("fast", 0, 1), 50*time.Millisecond),
		measured(live("backup", 1, 1), 60*time.Millisecond),
		measured(live("flaky", 0, 1), 60*time.Millisecond),
	}
	opts[3].Health.RecordFailure(Admitted, ReasonStatus, 0, t0)
	for range 2000 {
		order := Order(opts, -1, t0)
		require.Equal(t, []int{3, 2}, order[2:], "order %v", order)
	}

	// And the fastest of another priority does not make the equals of this one slow:
	// 400 and 420 ms are close, so they share by weight.
	opts = []LiveCandidate{
		measured(live("a", 0, 1), 400*time.Millisecond),
		measured(live("b", 0, 1), 420*time.Millisecond),
		measured(live("fast backup", 1, 1), 50*time.Millisecond),
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
	opts := []LiveCandidate{measured(live("fast", 0, 1), 50*time.Millisecond), measured(live("slow", 0, 1), 400*time.Millisecond)}
	for range 1000 {
		require.Equal(t, []int{1, 0}, Order(opts, 1, t0))
	}
}

func TestSoonestReady(t *testing.T) {
	assert.Equal(t, t0, SoonestReady(nil, t0), "no options: now")

	opts := []LiveCandidate{live("a", 0, 1), live("b", 0, 1), live("c", 0, 1)}
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
	opts = append(opts, live("d", 9, 1))
	assert.Equal(t, t0.Add(time.Second), SoonestReady(opts, t0.Add(time.Second)))
}

// BenchmarkOrder orders a model's candidates the way every request does: two priorities,
// mixed weights, some with a measured time to first byte.
func BenchmarkOrder(b *testing.B) {
	opts := []LiveCandidate{live("a", 0, 3), live("b", 0, 1), live("c", 0, 1), live("d", 1, 1)}
	opts[0].Health.RecordSuccess(Admitted, 80*time.Millisecond, t0)
	opts[1].Health.RecordSuccess(Admitted, 400*time.Millisecond, t0)
	b.ReportAllocs()
	for b.Loop() {
		Order(opts, -1, t0)
	}
}
