package metering

import (
	"context"
	"time"
)

// LatencyBoundsMs are the upper bounds, in milliseconds, of the buckets the ledger's
// latencies are counted in: about 1.5× apart, so a percentile read from them is at most
// that far above the true one, and the same on every store. A latency over the last
// bound counts in the last bucket.
var LatencyBoundsMs = []int64{
	5, 10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 750,
	1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 7_500, 10_000, 15_000, 20_000, 30_000,
	45_000, 60_000, 90_000, 120_000, 180_000, 300_000, 600_000, 3_600_000,
}

// LatencyRow is one model's candidate's requests over a period, with their latencies
// counted per bucket of LatencyBoundsMs.
type LatencyRow struct {
	Model, Candidate string
	Requests         int64
	// Errors are the requests answered with a status of 400 or more.
	Errors int64
	// FirstByte counts the requests whose first byte reached the client (a stream's
	// first event) by the time it took; a request whose client left before it has none.
	FirstByte []int64
	// Duration counts every request by the time to the end of its answer.
	Duration []int64
}

// LatencyReader answers latency queries; the stores implement it.
type LatencyReader interface {
	// QueryLatency returns a row per model and candidate with requests that ended in
	// [from, to), ordered by model then candidate, byte by byte.
	QueryLatency(ctx context.Context, from, to time.Time) ([]LatencyRow, error)
}

// Percentile is the upper bound (ms) of the bucket that holds the percent-th
// percentile (1 to 100) of the values counted in counts (per LatencyBoundsMs), and
// false when nothing was counted: the value of rank ceil(percent×n/100) in ascending
// order is at most that. Integer arithmetic, so the rank is exact at any n.
func Percentile(counts []int64, percent int) (int64, bool) {
	var n int64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	rank := max((n*int64(percent)+99)/100, 1)
	var seen int64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return LatencyBoundsMs[min(i, len(LatencyBoundsMs)-1)], true
		}
	}
	return LatencyBoundsMs[len(LatencyBoundsMs)-1], true
}
