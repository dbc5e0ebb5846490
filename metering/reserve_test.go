package metering

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/routing"
)

// The reservation for a request is never below what the same token counts are metered
// at, whatever mix of cached, cache-write, visible and reasoning tokens they turn out to be.
func TestWorstCaseCostBoundsEveryMeteredMix(t *testing.T) {
	prices := []routing.Prices{
		{Input: 1_250_000, CachedInput: 125_000, Output: 10_000_000, Reasoning: 10_000_000},
		{Input: 3_000_000, CacheWrite: 3_750_000, CachedInput: 300_000, Output: 15_000_000},
		{Input: 1_000_000, Output: 2_000_000, Reasoning: 8_000_000},
		{},
	}
	for _, p := range prices {
		const in, out = 12_345, 6_789
		worst := WorstCaseCost(p, in, out)
		for _, u := range []Usage{
			{Input: in, Output: out},
			{Input: in, CacheWrite: in, Output: out, Reasoning: out},
			{Input: in, CachedInput: in / 2, CacheWrite: in / 2, Output: out, Reasoning: out / 3},
		} {
			assert.LessOrEqual(t, Cost(p, u), worst, "prices %+v usage %+v", p, u)
		}
	}
	// Reasoning dearer than output: the reservation prices all output at it.
	assert.Equal(t, Cost(prices[2], Usage{Input: 1000, Output: 1000, Reasoning: 1000}), WorstCaseCost(prices[2], 1000, 1000))
	// Five characters of text and seven of JSON around them, at four a token.
	assert.Equal(t, int64(3), EstimateInputTokens([]byte(`{"":"abcde"}`)))
}

// A cap a client may claim (10^17 tokens, the largest an int64 holds) makes a worst case
// above any budget, never a product that wraps into a negative or small cost.
func TestWorstCaseCostNeverWrapsForHugeCaps(t *testing.T) {
	p := routing.Prices{Input: 1_250_000, Output: 10_000_000, Reasoning: 10_000_000}
	for _, output := range []int64{100_000_000_000_000_000, 922_337_203_685_477_580, math.MaxInt64} {
		assert.Equal(t, int64(math.MaxInt64), WorstCaseCost(p, 10, output), "output cap %d", output)
	}
	assert.Equal(t, int64(math.MaxInt64), WorstCaseCost(p, math.MaxInt64/2, 10))
	// Free tokens stay free, whatever their count.
	assert.Equal(t, int64(0), WorstCaseCost(routing.Prices{}, 10, math.MaxInt64))
	// Below the edge the figure is exact.
	assert.Equal(t, Cost(p, Usage{Input: 10, Output: 1_000_000_000}), WorstCaseCost(p, 10, 1_000_000_000))
}
