package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

// latencySummary is what the console shows of a model's candidate.
type latencySummary struct {
	Model, Candidate         string
	Requests, Errors         int64
	FirstByte50, FirstByte95 int64 // 0 when no request had a first byte
	Duration50, Duration95   int64
}

// referenceBound is the smallest bucket bound at or above ms, found without the
// package's helpers.
func referenceBound(ms int64) int64 {
	bound := metering.LatencyBoundsMs[len(metering.LatencyBoundsMs)-1]
	for i := len(metering.LatencyBoundsMs) - 1; i >= 0; i-- {
		if metering.LatencyBoundsMs[i] >= ms {
			bound = metering.LatencyBoundsMs[i]
		}
	}
	return bound
}

// referencePercentile sorts the values and takes the one of rank ceil(p×n) (integer
// arithmetic, p in percent), reported as its bucket's bound; 0 for no values.
func referencePercentile(values []int64, percent int) int64 {
	if len(values) == 0 {
		return 0
	}
	v := slices.Clone(values)
	slices.Sort(v)
	rank := (len(v)*percent + 99) / 100
	return referenceBound(v[max(rank, 1)-1])
}

// expectedLatency answers a latency query from the records in Go.
func expectedLatency(records []metering.Record, from, to time.Time) []latencySummary {
	type acc struct {
		requests, errors    int64
		firstByte, duration []int64
	}
	groups := map[[2]string]*acc{}
	for _, r := range records {
		at := storedTime(r.Time)
		if at.Before(from) || !at.Before(to) {
			continue
		}
		k := [2]string{r.Model, r.Candidate}
		if groups[k] == nil {
			groups[k] = &acc{}
		}
		g := groups[k]
		g.requests++
		if r.Status >= 400 {
			g.errors++
		}
		if r.TTFBMs > 0 {
			g.firstByte = append(g.firstByte, r.TTFBMs)
		}
		g.duration = append(g.duration, r.LatencyMs)
	}
	var out []latencySummary
	for k, g := range groups {
		out = append(out, latencySummary{Model: k[0], Candidate: k[1], Requests: g.requests, Errors: g.errors,
			FirstByte50: referencePercentile(g.firstByte, 50), FirstByte95: referencePercentile(g.firstByte, 95),
			Duration50: referencePercentile(g.duration, 50), Duration95: referencePercentile(g.duration, 95)})
	}
	slices.SortFunc(out, func(a, b latencySummary) int {
		return cmpPair(a.Model, a.Candidate, b.Model, b.Candidate)
	})
	return out
}

func cmpPair(a1, a2, b1, b2 string) int {
	if a1 != b1 {
		if a1 < b1 {
			return -1
		}
		return 1
	}
	if a2 < b2 {
		return -1
	} else if a2 > b2 {
		return 1
	}
	return 0
}

func summarise(rows []metering.LatencyRow) []latencySummary {
	var out []latencySummary
	for _, r := range rows {
		s := latencySummary{Model: r.Model, Candidate: r.Candidate, Requests: r.Requests, Errors: r.Errors}
		s.FirstByte50, _ = metering.Percentile(r.FirstByte, 50)
		s.FirstByte95, _ = metering.Percentile(r.FirstByte, 95)
		s.Duration50, _ = metering.Percentile(r.Duration, 50)
		s.Duration95, _ = metering.Percentile(r.Duration, 95)
		out = append(out, s)
	}
	return out
}

// latencyRecords are requests over two hours on two models, with latencies that fall
// on, just over and between the bucket bounds, some with no first byte and some failed.
func latencyRecords(start time.Time) []metering.Record {
	rng := rand.New(rand.NewPCG(29, 3))
	pick := func() int64 {
		b := metering.LatencyBoundsMs[rng.IntN(len(metering.LatencyBoundsMs))]
		switch rng.IntN(4) {
		case 0:
			return b // exactly on a bound: counted in that bucket
		case 1:
			return b + 1 // just over: the next one
		default:
			return rng.Int64N(b) + 1
		}
	}
	pairs := [][2]string{{"m-b", "z-cand"}, {"m-b", "a-cand"}, {"m-a", "only"}, {"m-Z", "x"}}
	var out []metering.Record
	for i := range 3000 {
		p := pairs[rng.IntN(len(pairs))]
		r := metering.Record{
			RequestID: fmt.Sprintf("lat_%05d", i), Model: p[0], Candidate: p[1], Protocol: "openai", Operation: "chat",
			Status: 200, LatencyMs: pick(), TTFBMs: pick(), Attempts: 1,
			Time: start.Add(time.Duration(rng.Int64N(int64(2 * time.Hour)))),
		}
		switch rng.IntN(10) {
		case 0:
			r.Status = 429 + rng.IntN(2)*73 // 429 or 502
		case 1:
			r.TTFBMs = 0 // the client left before the first byte
		}
		out = append(out, r)
	}
	// The period's bounds: one record on each, with nanoseconds the store drops.
	out[0].Time = start.Add(30 * time.Minute)
	out[1].Time = start.Add(90 * time.Minute)
	out[2].Time = start.Add(30*time.Minute - 500*time.Nanosecond) // stored as the bound's microsecond
	return out
}

func TestLatencyQueryMatchesAGoReference(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		start := utc(2026, 11, 25, 9, 0, 0, 0)
		rs := latencyRecords(start)
		require.NoError(t, s.WriteUsage(ctx, "lat", 1, rs))
		for _, w := range []struct{ from, to time.Time }{
			{start.Add(30 * time.Minute), start.Add(90 * time.Minute)},
			{start, start.Add(2 * time.Hour)},
			{start.Add(-time.Hour), start},
		} {
			rows, err := s.QueryLatency(ctx, w.from, w.to)
			require.NoError(t, err)
			want := expectedLatency(rs, w.from, w.to)
			assert.Equal(t, want, summarise(rows), "%s – %s", w.from, w.to)
		}
		rows, err := s.QueryLatency(ctx, start, start.Add(2*time.Hour))
		require.NoError(t, err)
		require.Len(t, rows, 4)
		assert.Equal(t, "m-Z", rows[0].Model, "byte order: capitals first")
	})
}
