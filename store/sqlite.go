package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/switchyard-gw/switchyard/auth"
)

// sqliteBusyTimeout is how long a write waits for another process's write to finish
// before failing with "database is locked". Writes are short (a few rows), so a wait
// this long means something is wrong.
const sqliteBusyTimeout = 10 * time.Second

// sqliteReaders is the size of the read pool: WAL lets them all read while one
// connection writes.
const sqliteReaders = 4

// sqliteBackend keeps two pools on one file: a single write connection, so that this
// process's writes queue in Go rather than spin on the file lock, and a few read-only
// connections. Between processes, BEGIN IMMEDIATE and the busy timeout order writers.
type sqliteBackend struct {
	w *sql.DB
	r *sql.DB

	stmtMu sync.Mutex
	stmts  *sqliteStatements // prepared on first use
}

func openSQLite(ctx context.Context, file string) (*sqliteBackend, error) {
	switch {
	case file == "":
		return nil, errors.New("empty database path")
	case file == ":memory:" || strings.HasPrefix(file, "file:"):
		return nil, fmt.Errorf("%q: want the path of a database file", file)
	case strings.ContainsAny(file, "?#"):
		// The driver reads parameters after '?'; a path holding one would be cut.
		return nil, fmt.Errorf("%q: '?' and '#' are not supported in the path", file)
	}
	file, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
		return nil, err
	}
	// Create the file ourselves so that it is private to its owner; SQLite gives the
	// -wal and -shm files the same permissions. An empty file is a new database.
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	_ = f.Close()

	params := url.Values{}
	params.Set("_busy_timeout", fmt.Sprint(sqliteBusyTimeout.Milliseconds()))
	params.Set("_foreign_keys", "on")
	params.Set("_synchronous", "FULL") // a committed revocation survives a power cut
	writeParams := url.Values{}
	for k, v := range params {
		writeParams[k] = v
	}
	writeParams.Set("_journal_mode", "WAL")
	// BEGIN IMMEDIATE: a write transaction takes the file's write lock when it starts.
	// A deferred one that reads first and writes later can fail with SQLITE_BUSY
	// however long the busy timeout, if another process wrote in between.
	writeParams.Set("_txlock", "immediate")
	params.Set("_query_only", "on")

	b := &sqliteBackend{}
	if b.w, err = sql.Open("sqlite", file+"?"+writeParams.Encode()); err != nil {
		return nil, err
	}
	b.w.SetMaxOpenConns(1)
	b.w.SetMaxIdleConns(1)
	b.w.SetConnMaxIdleTime(0)
	// The write connection is opened first: it turns on WAL, which the file keeps, so
	// the read connections opened after it find the file in WAL mode.
	if err := pingWhileBusy(ctx, b.w); err != nil {
		_ = b.w.Close()
		return nil, err
	}
	if b.r, err = sql.Open("sqlite", file+"?"+params.Encode()); err != nil {
		_ = b.w.Close()
		return nil, err
	}
	b.r.SetMaxOpenConns(sqliteReaders)
	b.r.SetMaxIdleConns(sqliteReaders)
	b.r.SetConnMaxIdleTime(0)
	var mode string
	if err := b.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = b.close()
		return nil, err
	}
	if !strings.EqualFold(mode, "wal") {
		_ = b.close()
		return nil, fmt.Errorf("%s: journal mode is %q, not WAL", file, mode)
	}
	return b, nil
}

func (b *sqliteBackend) close() error {
	b.stmtMu.Lock()
	if b.stmts != nil {
		b.stmts.close()
		b.stmts = nil
	}
	b.stmtMu.Unlock()
	return errors.Join(b.r.Close(), b.w.Close())
}

func (b *sqliteBackend) migrate(ctx context.Context, ms []migration) error {
	// BEGIN IMMEDIATE: a second process opening the same file at the same time waits
	// here, then finds the migrations recorded.
	tx, err := b.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return err
	}
	todo := pending(ms, applied)
	if len(todo) == 0 {
		return nil // the deferred rollback ends the empty transaction
	}
	for _, m := range todo {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UnixMicro()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

func (b *sqliteBackend) write(ctx context.Context, fn func(writer) error) error {
	tx, err := b.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE: this process's and others' writers wait their turn
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(sqliteWriter{tx}); err != nil {
		return err
	}
	return tx.Commit()
}

const sqliteKeyColumns = `id, name, prefix, hash, models, created_at, last_used_at, expires_at, revoked_at, replaced_by, seq, project_id, limits, owner_id`

func (b *sqliteBackend) getKey(ctx context.Context, id string) (*auth.Key, error) {
	return scanSQLiteKey(b.r.QueryRowContext(ctx, `SELECT `+sqliteKeyColumns+` FROM api_keys WHERE id = ?`, id))
}

func (b *sqliteBackend) listKeys(ctx context.Context) ([]*auth.Key, error) {
	return b.queryKeys(ctx, `SELECT `+sqliteKeyColumns+` FROM api_keys ORDER BY created_at DESC, id DESC`)
}

func (b *sqliteBackend) changedSince(ctx context.Context, seq int64) ([]*auth.Key, error) {
	return b.queryKeys(ctx, `SELECT `+sqliteKeyColumns+` FROM api_keys WHERE seq > ? ORDER BY seq`, seq)
}

func (b *sqliteBackend) queryKeys(ctx context.Context, query string, args ...any) ([]*auth.Key, error) {
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.Key, error) { return scanSQLiteKey(r) })
}

func (b *sqliteBackend) touchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	tx, err := b.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// One prepared statement run per key inside one transaction: a single commit (and
	// fsync) per batch, and no limit on the number of bound variables.
	stmt, err := tx.PrepareContext(ctx,
		`UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, ?2), ?2) WHERE id = ?1`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for id, t := range lastUsed {
		if _, err := stmt.ExecContext(ctx, id, t.UnixMicro()); err != nil {
			return err
		}
	}
	return tx.Commit()
}

type sqliteWriter struct{ tx *sql.Tx }

func (w sqliteWriter) nextSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := w.tx.QueryRowContext(ctx,
		`UPDATE sequences SET value = value + 1 WHERE name = 'api_keys' RETURNING value`).Scan(&seq)
	return seq, err
}

func (w sqliteWriter) get(ctx context.Context, id string) (*auth.Key, error) {
	return scanSQLiteKey(w.tx.QueryRowContext(ctx, `SELECT `+sqliteKeyColumns+` FROM api_keys WHERE id = ?`, id))
}

func (w sqliteWriter) insert(ctx context.Context, k *auth.Key) error {
	var models any
	if len(k.Models) > 0 {
		b, err := json.Marshal(k.Models)
		if err != nil {
			return err
		}
		models = string(b)
	}
	lim, err := encodeLimits(k.Limits)
	if err != nil {
		return err
	}
	_, err = w.tx.ExecContext(ctx, `INSERT INTO api_keys (`+sqliteKeyColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Prefix, k.Hash[:], models, k.CreatedAt.UnixMicro(),
		sqliteTime(k.LastUsedAt), sqliteTime(k.ExpiresAt), sqliteTime(k.RevokedAt), nullString(k.ReplacedBy), k.Seq,
		nullString(k.ProjectID), lim, nullString(k.Owner))
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("%w: key %q: id or hash already stored", ErrConflict, k.ID)
	}
	return err
}

func (w sqliteWriter) update(ctx context.Context, k *auth.Key) error {
	lim, err := encodeLimits(k.Limits)
	if err != nil {
		return err
	}
	_, err = w.tx.ExecContext(ctx,
		`UPDATE api_keys SET expires_at = ?, revoked_at = ?, replaced_by = ?, project_id = ?, limits = ?, seq = ? WHERE id = ?`,
		sqliteTime(k.ExpiresAt), sqliteTime(k.RevokedAt), nullString(k.ReplacedBy), nullString(k.ProjectID), lim, k.Seq, k.ID)
	return err
}

// sqliteTime is a time as stored: Unix microseconds, NULL when unset.
func sqliteTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func fromSQLiteTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

func scanSQLiteKey(row interface{ Scan(...any) error }) (*auth.Key, error) {
	var (
		k                          auth.Key
		hash                       []byte
		models, replacedBy         sql.NullString
		projectID, lim, owner      sql.NullString
		created                    int64
		lastUsed, expires, revoked sql.NullInt64
	)
	err := row.Scan(&k.ID, &k.Name, &k.Prefix, &hash, &models, &created, &lastUsed, &expires, &revoked, &replacedBy, &k.Seq,
		&projectID, &lim, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, auth.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if len(hash) != len(k.Hash) {
		return nil, fmt.Errorf("key %q: stored hash has %d bytes", k.ID, len(hash))
	}
	copy(k.Hash[:], hash)
	if models.Valid {
		if err := json.Unmarshal([]byte(models.String), &k.Models); err != nil {
			return nil, fmt.Errorf("key %q: models: %w", k.ID, err)
		}
		if len(k.Models) == 0 {
			k.Models = nil
		}
	}
	k.CreatedAt = time.UnixMicro(created).UTC()
	k.LastUsedAt = fromSQLiteTime(lastUsed)
	k.ExpiresAt = fromSQLiteTime(expires)
	k.RevokedAt = fromSQLiteTime(revoked)
	k.ReplacedBy = replacedBy.String
	k.ProjectID = projectID.String
	k.Owner = owner.String
	if k.Limits, err = decodeLimits("key "+k.ID, []byte(lim.String)); err != nil {
		return nil, err
	}
	return &k, nil
}

// pingWhileBusy opens db's first connection. Turning a new file to WAL needs the file to
// itself, and when another process (or Open) does the same at that moment SQLite answers
// SQLITE_BUSY at once, without waiting in its busy handler: the wait could deadlock. So
// the open is tried again, for as long as the busy timeout would have waited.
func pingWhileBusy(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(sqliteBusyTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil || !sqliteBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// sqliteBusy reports an error of a database locked by another connection.
func sqliteBusy(err error) bool {
	se, ok := errors.AsType[*sqlite.Error](err)
	if !ok {
		return false
	}
	code := se.Code() & 0xff
	return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
}
