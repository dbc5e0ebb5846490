package store

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

var latencyBenchRows = flag.Int("latency.rows", 1_000_000, "BenchmarkLatencyQuery: records in the hour asked about")

// latencyPlan is the plan of the latency query over [from, to) as the database would run it.
func latencyPlan(t testing.TB, f *fixture, from, to time.Time) string {
	t.Helper()
	var lines []string
	switch f.driver {
	case DriverSQLite:
		for _, r := range f.rows(t, `EXPLAIN QUERY PLAN `+sqliteLatencySQL, from.UnixMicro(), to.UnixMicro()) {
			lines = append(lines, fmt.Sprint(r[len(r)-1]))
		}
	case DriverPostgres:
		f.rows(t, `ANALYZE usage_records`)
		for _, r := range f.rows(t, `EXPLAIN `+pgLatencySQL, from, to) {
			lines = append(lines, fmt.Sprint(r...))
		}
	}
	return strings.Join(lines, "\n")
}

// The last hour of a month of usage is a range search on the time index, not a scan of
// the month.
func TestLatencyQueryUsesTheTimeIndex(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		s := f.open(t)
		start := utc(2026, 3, 1, 0, 0, 0, 0)
		require.NoError(t, s.WriteUsage(context.Background(), "gen", 1, generateUsage(start, 30, 50, 10)))
		from := start.AddDate(0, 0, 20)
		plan := latencyPlan(t, f, from, from.Add(time.Hour))
		t.Log(plan)
		assert.Contains(t, plan, "usage_records_by_ts")
		assert.NotRegexp(t, `(?i)seq scan|SCAN usage_records\b`, plan, "no scan of the whole table")
	})
}

// BenchmarkLatencyQuery times the Models view's question, the last hour per model and
// candidate with percentiles, when that hour holds -latency.rows records (1,000,000 by
// default) spread over five models and two candidates each:
//
//	go test -run '^$' -bench 'LatencyQuery/sqlite' -benchtime 5x ./store/
func BenchmarkLatencyQuery(b *testing.B) {
	for _, d := range drivers {
		b.Run(d, func(b *testing.B) {
			ctx := context.Background()
			f := newFixture(b, d)
			s := f.open(b)
			end := utc(2026, 11, 25, 12, 0, 0, 0)
			n := *latencyBenchRows
			step := time.Hour / time.Duration(n)
			loadStart := time.Now()
			batch := make([]metering.Record, 0, 5000)
			for i := range n {
				batch = append(batch, metering.Record{
					RequestID: fmt.Sprintf("lat_%012d", i), KeyID: benchKeyID(i % 1000), Model: benchModels[i%len(benchModels)],
					Candidate: fmt.Sprintf("upstream-%d", i/7%2), Protocol: "openai", Operation: "chat", Status: 200 + i%23/22*300,
					LatencyMs: int64(200 + i*7919%20000), TTFBMs: int64(50 + i*104729%3000), Attempts: 1,
					Time: end.Add(-time.Hour + time.Duration(i)*step),
				})
				if len(batch) == cap(batch) || i == n-1 {
					if err := s.WriteUsage(ctx, "gen", int64(i), batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			b.Logf("%s: loaded %d records in %s", d, n, time.Since(loadStart).Round(time.Millisecond))
			b.Logf("plan:\n%s", latencyPlan(b, f, end.Add(-time.Hour), end))
			b.ResetTimer()
			for range b.N {
				rows, err := s.QueryLatency(ctx, end.Add(-time.Hour), end)
				if err != nil {
					b.Fatal(err)
				}
				if len(rows) != 10 {
					b.Fatalf("%d rows, want 10", len(rows))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/query")
		})
	}
}
