package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

// The request log at scale. TestRequestLogAtScale fills usage_records with
// SWITCHYARD_REQUESTLOG_ROWS generated rows (say 1000000 or 10000000; unset: skipped,
// as in CI) on each database, then times the console's questions: the first page, a
// page deep in the log, and the first page filtered by key, model and status. Run:
//
//	SWITCHYARD_REQUESTLOG_ROWS=1000000 go test -count=1 -run TestRequestLogAtScale -v -timeout 1h ./store/
//
// The rows are made by the database itself (a recursive CTE on SQLite, generate_series
// on PostgreSQL) with the log's indexes dropped, which are then built once.

// The generated data: 30 days, keys, models and candidates in a round robin, one request
// in a hundred refused (429), one in two hundred failed (502).
const (
	scaleKeys       = 1000
	scaleModels     = 8
	scaleDays       = 30
	scaleRefusedMod = 100
)

// requestLogIndexes are migration 0005's indexes, in the order its SQL makes them.
var requestLogIndexes = []struct{ name, cols string }{
	{"usage_records_by_ts", "ts, request_id"},
	{"usage_records_by_key_ts", "key_id, ts, request_id"},
	{"usage_records_by_project_ts", "project_id, ts, request_id"},
	{"usage_records_by_model_ts", "model, ts, request_id"},
	{"usage_records_by_candidate_ts", "candidate, ts, request_id"},
	{"usage_records_by_status_ts", "status, ts, request_id"},
}

func TestRequestLogAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SWITCHYARD_REQUESTLOG_ROWS"))
	if n <= 0 {
		t.Skip("set SWITCHYARD_REQUESTLOG_ROWS to the number of rows to measure with")
	}
	forEachDriver(t, func(t *testing.T, f *fixture) {
		s := f.open(t)
		start := utc(2026, 3, 1, 0, 0, 0, 0)
		load := time.Now()
		fillRequestLog(t, f, n, start)
		t.Logf("%s: %d rows generated and indexed in %v; %s", f.driver, n, time.Since(load).Round(time.Second), usageSize(t, f))

		ctx := context.Background()
		mid, err := s.ListRequests(ctx, metering.RequestQuery{Until: start.AddDate(0, 0, scaleDays/2), Limit: 1})
		require.NoError(t, err)
		for _, c := range []struct {
			name string
			q    metering.RequestQuery
		}{
			{"first page", metering.RequestQuery{}},
			{"a page mid-way (cursor)", metering.RequestQuery{After: mid.Next}},
			{"by key", metering.RequestQuery{KeyID: benchKeyID(417)}},
			{"by model", metering.RequestQuery{Model: "model-3"}},
			{"by status 429", metering.RequestQuery{Status: 429}},
			{"by model and status 502", metering.RequestQuery{Model: "model-1", Status: 502}},
			// The worst case: two filters no index combines, that no row matches together
			// (model-3 never failed), read through the whole of the model's index.
			{"by model and status, matching nothing", metering.RequestQuery{Model: "model-3", Status: 502}},
			{"by key, a day", metering.RequestQuery{KeyID: benchKeyID(9), Since: start.AddDate(0, 0, 10), Until: start.AddDate(0, 0, 11)}},
		} {
			var times []time.Duration
			var page metering.RequestPage
			for range 7 {
				began := time.Now()
				page, err = s.ListRequests(ctx, c.q)
				times = append(times, time.Since(began))
				require.NoError(t, err)
			}
			slices.Sort(times)
			if !strings.Contains(c.name, "nothing") {
				require.NotEmpty(t, page.Requests, c.name)
			}
			plan := explainRequests(t, f, c.q)
			t.Logf("%s %s: median %v, slowest %v (%d rows)\n%s", f.driver, c.name, times[len(times)/2].Round(10*time.Microsecond),
				times[len(times)-1].Round(10*time.Microsecond), len(page.Requests), plan)
			assert.NotRegexp(t, `(?im)seq scan on usage_records|^SCAN u$|USE TEMP B-TREE FOR ORDER BY`, plan, "%s: no scan of the whole table, no sort", c.name)
		}
	})
}

// The log's queries read an index of the log, never the whole table; on SQLite, whose
// planner does not weigh how many rows match, always in the index's order (no sort).
// PostgreSQL may sort the few rows a selective filter leaves: TestRequestLogAtScale
// shows its plans at millions of rows.
func TestRequestLogQueriesUseTheIndexes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		f.open(t)
		fillRequestLog(t, f, 20000, utc(2026, 3, 1, 0, 0, 0, 0))
		for _, q := range []metering.RequestQuery{
			{}, {KeyID: benchKeyID(5)}, {Model: "model-1"}, {Status: 429}, {ProjectID: "project-2"}, {Candidate: "cand-1-0"},
			{After: encodeCursor(utc(2026, 3, 10, 0, 0, 0, 0), "req_x")},
		} {
			plan := explainRequests(t, f, q)
			assert.NotRegexp(t, `(?im)seq scan on usage_records|^SCAN u$|temp b-tree`, plan, "%+v", q)
			assert.Regexp(t, `usage_records_by_(\w+_)?ts`, plan, "%+v", q)
		}
	})
}

// explainRequests returns the plan of ListRequests' query for q.
func explainRequests(t testing.TB, f *fixture, q metering.RequestQuery) string {
	query, args, _, err := buildRequestQuery(f.driver, q)
	require.NoError(t, err)
	var lines []string
	switch f.driver {
	case DriverSQLite:
		for _, r := range f.rows(t, `EXPLAIN QUERY PLAN `+query, args...) {
			lines = append(lines, fmt.Sprint(r[len(r)-1]))
		}
	case DriverPostgres:
		for _, r := range f.rows(t, `EXPLAIN `+query, args...) {
			lines = append(lines, fmt.Sprint(r...))
		}
	}
	return strings.Join(lines, "\n")
}

// fillRequestLog adds n generated rows over scaleDays from start, the log's indexes
// dropped meanwhile and built again after. Each index must be there to be dropped: the
// migrations made them.
func fillRequestLog(t testing.TB, f *fixture, n int, start time.Time) {
	t.Helper()
	stepMicros := int64(scaleDays) * 86400e6 / int64(n)
	var stmts []string
	for _, ix := range requestLogIndexes {
		stmts = append(stmts, "DROP INDEX "+ix.name)
	}
	// Columns from i: key i%1000, model i%8, candidate one of three per model, project
	// one of ten, status 429 (refused) for one in 100, 502 (failed) for one in 200.
	cols := `request_id, key_id, project_id, model, candidate, protocol, operation, status, input, cached_input,
		cache_write, output, reasoning, estimated, cost_micros, latency_ms, ttfb_ms, attempts, ts, channel, outcome, refused_by, tries`
	switch f.driver {
	case DriverSQLite:
		stmts = append(stmts, `INSERT INTO usage_records (`+cols+`)
			WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < `+strconv.Itoa(n)+`)
			SELECT printf('req_%010d', i), printf('key_%016d', i % 1000), 'project-' || (i % 10), 'model-' || (i % 8),
				'cand-' || (i % 8) || '-' || (i / 8 % 3), 'family_a', 'chat_completions',
				CASE WHEN i % 100 = 0 THEN 429 WHEN i % 200 = 1 THEN 502 ELSE 200 END,
				CASE WHEN i % 100 = 0 THEN 0 ELSE 1000 + i % 977 END, 0, 0, CASE WHEN i % 100 = 0 THEN 0 ELSE 200 + i % 311 END, 0, 0,
				CASE WHEN i % 100 = 0 THEN 0 ELSE 1500 + i % 1000 END, 800 + i % 5000, 150 + i % 900, 1,
				`+strconv.FormatInt(start.UnixMicro(), 10)+` + i * `+strconv.FormatInt(stepMicros, 10)+`, 'api',
				CASE WHEN i % 100 = 0 THEN 'refused' WHEN i % 200 = 1 THEN 'failed' ELSE 'served' END,
				CASE WHEN i % 100 = 0 THEN 'key_requests' END,
				CASE WHEN i % 200 = 1 THEN '[{"candidate":"c","reason":"status","status":502,"duration_ms":3}]' END
			FROM c`)
	case DriverPostgres:
		stmts = append(stmts, `INSERT INTO usage_records (`+cols+`)
			SELECT format('req_%s', lpad(i::text, 10, '0')), format('key_%s', lpad((i % 1000)::text, 16, '0')), 'project-' || (i % 10),
				'model-' || (i % 8), 'cand-' || (i % 8) || '-' || (i / 8 % 3), 'family_a', 'chat_completions',
				CASE WHEN i % 100 = 0 THEN 429 WHEN i % 200 = 1 THEN 502 ELSE 200 END,
				CASE WHEN i % 100 = 0 THEN 0 ELSE 1000 + i % 977 END, 0, 0, CASE WHEN i % 100 = 0 THEN 0 ELSE 200 + i % 311 END, 0, false,
				CASE WHEN i % 100 = 0 THEN 0 ELSE 1500 + i % 1000 END, 800 + i % 5000, 150 + i % 900, 1,
				to_timestamp(`+strconv.FormatInt(start.Unix(), 10)+`) + make_interval(secs => i * `+strconv.FormatInt(stepMicros, 10)+` / 1e6), 'api',
				CASE WHEN i % 100 = 0 THEN 'refused' WHEN i % 200 = 1 THEN 'failed' ELSE 'served' END,
				CASE WHEN i % 100 = 0 THEN 'key_requests' END,
				CASE WHEN i % 200 = 1 THEN '[{"candidate":"c","reason":"status","status":502,"duration_ms":3}]' END
			FROM generate_series(0::bigint, `+strconv.Itoa(n-1)+`) AS i`)
	}
	for _, ix := range requestLogIndexes {
		stmts = append(stmts, "CREATE INDEX "+ix.name+" ON usage_records ("+ix.cols+")")
	}
	stmts = append(stmts, "ANALYZE usage_records")
	execAll(t, f, stmts)
}

// execAll runs statements on a connection of the test's own, one transaction each.
func execAll(t testing.TB, f *fixture, stmts []string) {
	t.Helper()
	ctx := context.Background()
	switch f.driver {
	case DriverSQLite:
		db, err := sql.Open("sqlite", f.dsn+"?_busy_timeout=10000")
		require.NoError(t, err)
		defer db.Close()
		for _, s := range stmts {
			_, err := db.ExecContext(ctx, s)
			require.NoError(t, err, s)
		}
	case DriverPostgres:
		conn, err := pgx.Connect(ctx, f.dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for _, s := range stmts {
			_, err := conn.Exec(ctx, s)
			require.NoError(t, err, s)
		}
	}
}
