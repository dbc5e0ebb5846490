package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The people's tables (users, sessions, API tokens) are read and written with one text
// of SQL per statement for both databases: what differs (placeholders, JSON casts, how a
// time is bound and scanned, the larger of two values) is in a sqlDialect, and both
// drivers' connections and transactions run statements through a runner. The keys' and
// the ledger's code predates this and keeps its own per-driver statements, tuned for
// their hot paths.

// runner runs statements: a backend on its pools (reads on the read pool), a writer in
// its transaction.
type runner interface {
	// queryRows runs a query and calls scan on each row.
	queryRows(ctx context.Context, query string, args []any, scan func(resultRows) error) error
	// exec runs a statement and returns the number of rows it matched.
	exec(ctx context.Context, query string, args ...any) (int64, error)
}

// sqlDialect is what differs between the databases in the people's statements. The
// statements are written in PostgreSQL's form ($1, ::jsonb, GREATEST); sql turns them
// into the database's.
type sqlDialect struct {
	// sql turns a statement written for PostgreSQL into this database's.
	sql func(string) string
	// time binds a time (NULL when zero).
	time func(time.Time) any
	// timeCell is a scan destination for a time column and how to read it after
	// the scan (the zero time for NULL).
	timeCell func() (dest any, get func() time.Time)
	// orderText follows a text column in ORDER BY so that it sorts byte by byte.
	orderText string
}

var sqliteDialect = &sqlDialect{
	sql: func(q string) string {
		// ?N is SQLite's numbered placeholder; JSON is TEXT, checked by the table.
		q = strings.ReplaceAll(q, "::jsonb", "")
		q = strings.ReplaceAll(q, "GREATEST(", "max(")
		return strings.ReplaceAll(q, "$", "?")
	},
	time: sqliteTime,
	timeCell: func() (any, func() time.Time) {
		var v sql.NullInt64
		return &v, func() time.Time { return fromSQLiteTime(v) }
	},
	orderText: "", // SQLite's default collation compares bytes
}

var pgDialect = &sqlDialect{
	sql:  func(q string) string { return q },
	time: pgTime,
	timeCell: func() (any, func() time.Time) {
		var v pgtype.Timestamptz
		return &v, func() time.Time { return fromPGTime(v) }
	},
	orderText: ` COLLATE "C"`,
}

// dialect is the store's driver's.
func (s *Store) dialect() *sqlDialect {
	if s.driver == DriverPostgres {
		return pgDialect
	}
	return sqliteDialect
}

// uniqueViolation reports an error of a row that would break a unique index or a
// primary key, on either database.
func uniqueViolation(err error) bool {
	if se, ok := errors.AsType[*sqlite.Error](err); ok {
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	pe, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pe.Code == "23505"
}

func sqlQueryRows(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string, args []any, scan func(resultRows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}

func sqlExec(ctx context.Context, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args []any) (int64, error) {
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (b *sqliteBackend) queryRows(ctx context.Context, query string, args []any, scan func(resultRows) error) error {
	return sqlQueryRows(ctx, b.r, query, args, scan)
}

// exec runs on the write connection, in a transaction of its own: it is for writes
// that order nothing (a session's or a token's last use).
func (b *sqliteBackend) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlExec(ctx, b.w, query, args)
}

func (w sqliteWriter) queryRows(ctx context.Context, query string, args []any, scan func(resultRows) error) error {
	return sqlQueryRows(ctx, w.tx, query, args, scan)
}

func (w sqliteWriter) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlExec(ctx, w.tx, query, args)
}

type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func pgQueryRows(ctx context.Context, q pgQuerier, query string, args []any, scan func(resultRows) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}

func pgExec(ctx context.Context, q pgQuerier, query string, args []any) (int64, error) {
	tag, err := q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (b *pgBackend) queryRows(ctx context.Context, query string, args []any, scan func(resultRows) error) error {
	return pgQueryRows(ctx, b.pool, query, args, scan)
}

// exec runs on the pool, without the writers' lock: it is for writes that order
// nothing (a session's or a token's last use).
func (b *pgBackend) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return pgExec(ctx, b.pool, query, args)
}

func (w pgWriter) queryRows(ctx context.Context, query string, args []any, scan func(resultRows) error) error {
	return pgQueryRows(ctx, w.tx, query, args, scan)
}

func (w pgWriter) exec(ctx context.Context, query string, args ...any) (int64, error) {
	return pgExec(ctx, w.tx, query, args)
}
