package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

var _ metering.LatencyReader = (*Store)(nil)

// latencyBucketSQL is the index in metering.LatencyBoundsMs of column's bucket, or -1
// for a value of 0 or less (no first byte was sent); the same CASE on both databases,
// so both count every record in the same bucket.
func latencyBucketSQL(column string) string {
	var sb strings.Builder
	sb.WriteString("CASE WHEN " + column + " <= 0 THEN -1")
	for i, b := range metering.LatencyBoundsMs[:len(metering.LatencyBoundsMs)-1] {
		fmt.Fprintf(&sb, " WHEN %s <= %d THEN %d", column, b, i)
	}
	fmt.Fprintf(&sb, " ELSE %d END", len(metering.LatencyBoundsMs)-1)
	return sb.String()
}

// latencySQL counts a period's records per model, candidate and pair of buckets. The
// range on ts is the one index it needs (usage_records_by_ts); the groups are at most
// models × candidates × buckets², so the answer stays small however many rows match.
// The percentiles are computed from these counts in Go, the same way for both stores.
func latencySQL(param func(int) string) string {
	return `SELECT model, candidate, ` + latencyBucketSQL("ttfb_ms") + `, ` + latencyBucketSQL("latency_ms") +
		`, count(*), count(*) FILTER (WHERE status >= 400)` +
		` FROM usage_records WHERE ts >= ` + param(1) + ` AND ts < ` + param(2) +
		// Served answers only, as before the request log: its refused and failed rows
		// reached no candidate's answer.
		` AND outcome = 'served'` +
		` GROUP BY 1, 2, 3, 4`
}

var (
	sqliteLatencySQL = latencySQL(numberedParam("?"))
	pgLatencySQL     = latencySQL(numberedParam("$"))
)

// latencyCell is one group of latencySQL.
type latencyCell struct {
	model, candidate    string
	firstByte, duration int64
	requests, errors    int64
}

// QueryLatency implements metering.LatencyReader.
func (s *Store) QueryLatency(ctx context.Context, from, to time.Time) ([]metering.LatencyRow, error) {
	var query string
	var args []any
	switch s.driver {
	case DriverPostgres:
		query, args = pgLatencySQL, []any{ceilMicro(from), ceilMicro(to)}
	default:
		query, args = sqliteLatencySQL, []any{ceilMicro(from).UnixMicro(), ceilMicro(to).UnixMicro()}
	}
	cells, err := call(ctx, s, kindRead, func(b backend) ([]latencyCell, error) { return b.queryLatency(ctx, query, args...) })
	if err != nil {
		return nil, fmt.Errorf("store: query latency: %w", err)
	}
	return foldLatency(cells), nil
}

// foldLatency sums the cells into a row per model and candidate, in byte order.
func foldLatency(cells []latencyCell) []metering.LatencyRow {
	n := len(metering.LatencyBoundsMs)
	byPair := map[[2]string]*metering.LatencyRow{}
	for _, c := range cells {
		k := [2]string{c.model, c.candidate}
		row := byPair[k]
		if row == nil {
			row = &metering.LatencyRow{Model: c.model, Candidate: c.candidate, FirstByte: make([]int64, n), Duration: make([]int64, n)}
			byPair[k] = row
		}
		row.Requests += c.requests
		row.Errors += c.errors
		if c.firstByte >= 0 && c.firstByte < int64(n) {
			row.FirstByte[c.firstByte] += c.requests
		}
		row.Duration[min(max(c.duration, 0), int64(n-1))] += c.requests
	}
	out := make([]metering.LatencyRow, 0, len(byPair))
	for _, r := range byPair {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b metering.LatencyRow) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return strings.Compare(a.Candidate, b.Candidate)
	})
	return out
}

func scanLatencyCell(r resultRows) (latencyCell, error) {
	var c latencyCell
	err := r.Scan(&c.model, &c.candidate, &c.firstByte, &c.duration, &c.requests, &c.errors)
	return c, err
}

func (b *sqliteBackend) queryLatency(ctx context.Context, query string, args ...any) ([]latencyCell, error) {
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, scanLatencyCell)
}

func (b *pgBackend) queryLatency(ctx context.Context, query string, args ...any) ([]latencyCell, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, scanLatencyCell)
}
