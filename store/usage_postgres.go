package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/switchyard-gw/switchyard/metering"
)

// pgWriteUsage stores a batch and the journal's position in one statement, so in one
// transaction and one round trip to the server: the records arrive as one array per
// column and unnest turns them back into rows. A statement in WITH that changes data
// runs to completion whether or not the rest reads it. The arrays are typed, so the
// statement has the same text for every batch and pgx prepares it once per connection.
const pgWriteUsage = `WITH stored AS (
	INSERT INTO usage_records (` + usageColumns + `)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
		$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[],
		$13::boolean[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], $18::timestamptz[], $19::text[], $20::text[],
		$21::text[], $22::text[], $23::text[], $24::text[])
	ON CONFLICT (request_id) DO NOTHING
)
INSERT INTO ledger_journals (journal_id, position, updated_at) VALUES ($25, $26, $27)
ON CONFLICT (journal_id) DO UPDATE
	SET position = GREATEST(ledger_journals.position, EXCLUDED.position), updated_at = EXCLUDED.updated_at`

func (b *pgBackend) writeUsage(ctx context.Context, journalID string, upTo int64, records []metering.Record, now time.Time) error {
	// Rows go in request id order: two transactions inserting some of the same ids
	// (two writers of one journal) then wait for each other in the same order rather
	// than deadlock. The sort is stable, so of two records with one id the first is
	// kept, as on SQLite.
	order := make([]int, len(records))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(records[a].RequestID, records[b].RequestID) })

	n := len(records)
	var (
		requestIDs, keyIDs, projectIDs         = make([]pgtype.Text, n), make([]pgtype.Text, n), make([]pgtype.Text, n)
		models, candidates, protocols, ops     = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		channels, outcomes                     = make([]string, n), make([]string, n)
		refusedBy, tries, toolUses             = make([]pgtype.Text, n), make([]pgtype.Text, n), make([]pgtype.Text, n)
		status, input, cached, cacheWrite      = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		output, reasoning, cost, latency, ttfb = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		attempts                               = make([]int64, n)
		estimated                              = make([]bool, n)
		times                                  = make([]pgtype.Timestamptz, n)
	)
	for i, j := range order {
		r := &records[j]
		// An empty request id or a zero time goes in as NULL, which the NOT NULL
		// columns refuse (see Store.WriteUsage).
		requestIDs[i] = pgtype.Text{String: r.RequestID, Valid: r.RequestID != ""}
		keyIDs[i] = pgtype.Text{String: r.KeyID, Valid: r.KeyID != ""}
		projectIDs[i] = pgtype.Text{String: r.ProjectID, Valid: r.ProjectID != ""}
		models[i], candidates[i], protocols[i], ops[i] = r.Model, r.Candidate, r.Protocol, r.Operation
		channels[i], outcomes[i] = channelOf(r), outcomeOf(r)
		refusedBy[i] = pgtype.Text{String: r.RefusedBy, Valid: r.RefusedBy != ""}
		tries[i].String, tries[i].Valid = triesOf(r)
		toolUses[i].String, toolUses[i].Valid = toolUsesOf(r)
		status[i], attempts[i] = int64(r.Status), int64(r.Attempts)
		input[i], cached[i], cacheWrite[i] = r.Input, r.CachedInput, r.CacheWrite
		output[i], reasoning[i], estimated[i] = r.Output, r.Reasoning, r.Estimated
		cost[i], latency[i], ttfb[i] = r.CostMicros, r.LatencyMs, r.TTFBMs
		times[i] = pgtype.Timestamptz{Time: r.Time, Valid: !r.Time.IsZero()}
	}
	_, err := b.pool.Exec(ctx, pgWriteUsage,
		requestIDs, keyIDs, models, candidates, protocols, ops,
		status, input, cached, cacheWrite, output, reasoning,
		estimated, cost, latency, ttfb, attempts, times, projectIDs, channels,
		outcomes, refusedBy, tries, toolUses,
		journalID, upTo, now)
	return err
}

func (b *pgBackend) journalPosition(ctx context.Context, journalID string) (int64, error) {
	var pos int64
	err := b.pool.QueryRow(ctx, `SELECT position FROM ledger_journals WHERE journal_id = $1`, journalID).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return pos, err
}

// pgDay is the UTC calendar day of ts, whatever the session's TimeZone.
const pgDay = `(ts AT TIME ZONE 'UTC')::date`

var pgUsageDialect = &usageDialect{
	param:    numberedParam("$"),
	time:     func(t time.Time) any { return t },
	dayGroup: pgDay,
	// to_char, not a cast to text, whose format follows the session's DateStyle; of a
	// timestamp, which has no time zone, rather than the timestamptz a date would be
	// converted to, which is midnight in the session's time zone.
	daySelect: `to_char(` + pgDay + `::timestamp, 'YYYY-MM-DD')`,
	// COLLATE "C" orders bytewise, as SQLite does, whatever the database's collation.
	key:       `coalesce(key_id, '') COLLATE "C"`,
	model:     `model COLLATE "C"`,
	candidate: `candidate COLLATE "C"`,
	channel:   `channel COLLATE "C"`,
	owner:     `coalesce(owner_key.owner_id, '') COLLATE "C"`,
	// The owner's key ids as an array computed once, so that the records are found by
	// an index scan of (key_id, ts) per key; as a join, the planner scans the ledger
	// whenever the owner's keys' records are spread over most of its pages.
	ownerKeys: `key_id = ANY(ARRAY(SELECT id FROM api_keys WHERE owner_id = %s))`,
}

func (b *pgBackend) usageDialect() *usageDialect { return pgUsageDialect }

func (b *pgBackend) queryUsage(ctx context.Context, uq usageQuery) ([]metering.Row, error) {
	rows, err := b.pool.Query(ctx, uq.sql, uq.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (metering.Row, error) { return scanUsageRow(r.Scan, uq.dims) })
}

func (b *pgBackend) listRequests(ctx context.Context, query string, args []any) ([]metering.RequestRow, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (metering.RequestRow, error) { return scanRequestRow(r.Scan) })
}
