package metering

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The rank is exact however many requests: the 95th percentile of 20 million is the
// 19 millionth value, of one more it is the next one.
func TestPercentileRankIsExactAtAnyCount(t *testing.T) {
	counts := make([]int64, len(LatencyBoundsMs))
	counts[3], counts[4] = 19_000_000, 1_000_000
	got, ok := Percentile(counts, 95)
	assert.True(t, ok)
	assert.Equal(t, LatencyBoundsMs[3], got)
	counts[4]++
	got, _ = Percentile(counts, 95)
	assert.Equal(t, LatencyBoundsMs[4], got)

	_, ok = Percentile(make([]int64, len(LatencyBoundsMs)), 50)
	assert.False(t, ok, "no requests, no percentile")
}
