package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/metering"
)

// sqliteUsageChunk is how many records one INSERT carries: 256 rows of 23 columns bind
// 5,888 values, well under SQLite's limit of 32,766, and a batch of 1,000 records
// (the ledger's default) takes four statements instead of a thousand.
const sqliteUsageChunk = 256

// sqliteInsertUsage is the INSERT statement's text for rows records; each size is
// prepared once for the life of the store (see insertStatements).
func sqliteInsertUsage(rows int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", usageColumnCount), ", ") + ")"
	// ON CONFLICT names request_id: a duplicate request is skipped, while a NULL in a
	// NOT NULL column or a failed CHECK still fails the statement (INSERT OR IGNORE
	// would silently skip those rows too).
	return "INSERT INTO usage_records (" + usageColumns + ") VALUES " +
		strings.TrimSuffix(strings.Repeat(row+", ", rows), ", ") +
		" ON CONFLICT (request_id) DO NOTHING"
}

const sqliteUpsertJournal = `INSERT INTO ledger_journals (journal_id, position, updated_at) VALUES (?1, ?2, ?3)
	ON CONFLICT (journal_id) DO UPDATE SET position = max(position, excluded.position), updated_at = excluded.updated_at`

func (b *sqliteBackend) writeUsage(ctx context.Context, journalID string, upTo int64, records []metering.Record, now time.Time) error {
	// A batch goes in as statements of 256, 128, …, 1 rows, each prepared once for the
	// life of the store: preparing a statement of n rows is parsing n × 19 placeholders,
	// which cost the ledger more than the inserts themselves. They are prepared before
	// the transaction takes the one writer connection.
	stmts, err := b.insertStatements(ctx)
	if err != nil {
		return err
	}
	tx, err := b.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE, like every write
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	args := make([]any, 0, usageColumnCount*min(len(records), sqliteUsageChunk))
	for start := 0; start < len(records); {
		rows := sqliteUsageChunk
		for rows > len(records)-start {
			rows /= 2
		}
		args = args[:0]
		for i := range records[start : start+rows] {
			args = appendSQLiteUsage(args, &records[start+i])
		}
		if _, err := tx.StmtContext(ctx, stmts.insert[rows]).ExecContext(ctx, args...); err != nil {
			return err
		}
		start += rows
	}
	if _, err := tx.StmtContext(ctx, stmts.journal).ExecContext(ctx, journalID, upTo, now.UnixMicro()); err != nil {
		return err
	}
	return tx.Commit()
}

// sqliteStatements are the ledger's prepared statements: INSERTs of 1, 2, 4, …, 256 rows,
// and the journal position's upsert.
type sqliteStatements struct {
	insert  map[int]*sql.Stmt
	journal *sql.Stmt
}

func (b *sqliteBackend) insertStatements(ctx context.Context) (*sqliteStatements, error) {
	b.stmtMu.Lock()
	defer b.stmtMu.Unlock()
	if b.stmts != nil {
		return b.stmts, nil
	}
	st := &sqliteStatements{insert: map[int]*sql.Stmt{}}
	var err error
	for rows := 1; rows <= sqliteUsageChunk && err == nil; rows *= 2 {
		st.insert[rows], err = b.w.PrepareContext(ctx, sqliteInsertUsage(rows))
	}
	if err == nil {
		st.journal, err = b.w.PrepareContext(ctx, sqliteUpsertJournal)
	}
	if err != nil {
		st.close()
		return nil, err
	}
	b.stmts = st
	return st, nil
}

func (st *sqliteStatements) close() {
	for _, s := range st.insert {
		if s != nil {
			_ = s.Close()
		}
	}
	if st.journal != nil {
		_ = st.journal.Close()
	}
}

// appendSQLiteUsage appends r's values in usageColumns' order.
func appendSQLiteUsage(args []any, r *metering.Record) []any {
	estimated := 0
	if r.Estimated {
		estimated = 1
	}
	return append(args,
		nullString(r.RequestID), nullString(r.KeyID), r.Model, r.Candidate, r.Protocol, r.Operation, r.Status,
		r.Input, r.CachedInput, r.CacheWrite, r.Output, r.Reasoning, estimated,
		r.CostMicros, r.LatencyMs, r.TTFBMs, r.Attempts, sqliteTime(r.Time), nullString(r.ProjectID), channelOf(r),
		outcomeOf(r), nullString(r.RefusedBy), sqliteTries(r), sqliteToolUses(r))
}

func sqliteToolUses(r *metering.Record) any {
	if u, ok := toolUsesOf(r); ok {
		return u
	}
	return nil
}

func sqliteTries(r *metering.Record) any {
	if t, ok := triesOf(r); ok {
		return t
	}
	return nil
}

func (b *sqliteBackend) journalPosition(ctx context.Context, journalID string) (int64, error) {
	var pos int64
	err := b.r.QueryRowContext(ctx, `SELECT position FROM ledger_journals WHERE journal_id = ?`, journalID).Scan(&pos)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return pos, err
}

// sqliteDay is the number of the UTC day of ts (Unix microseconds), rounded down also
// before 1970. Grouping by this integer is much cheaper than by a formatted date, which
// is made once per group from it.
const sqliteDay = `(ts / 86400000000 - (ts % 86400000000 < 0))`

var sqliteUsageDialect = &usageDialect{
	param:     numberedParam("?"),
	time:      func(t time.Time) any { return t.UnixMicro() },
	dayGroup:  sqliteDay,
	daySelect: `strftime('%Y-%m-%d', ` + sqliteDay + ` * 86400, 'unixepoch')`,
	key:       `coalesce(key_id, '')`, // SQLite's default collation compares bytes
	model:     `model`,
	candidate: `candidate`,
	channel:   `channel`,
	owner:     `coalesce(owner_key.owner_id, '')`,
	ownerKeys: `key_id IN (SELECT id FROM api_keys WHERE owner_id = %s)`,
}

func (b *sqliteBackend) usageDialect() *usageDialect { return sqliteUsageDialect }

func (b *sqliteBackend) queryUsage(ctx context.Context, uq usageQuery) ([]metering.Row, error) {
	rows, err := b.r.QueryContext(ctx, uq.sql, uq.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (metering.Row, error) { return scanUsageRow(r.Scan, uq.dims) })
}

func (b *sqliteBackend) listRequests(ctx context.Context, query string, args []any) ([]metering.RequestRow, error) {
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (metering.RequestRow, error) { return scanRequestRow(r.Scan) })
}
