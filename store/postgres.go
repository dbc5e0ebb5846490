package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-gw/switchyard/auth"
)

// Advisory lock ids (pg_advisory_xact_lock's one-bigint form). They are database-wide,
// so they are chosen to be unlikely to collide with another application's: the ASCII
// of "swyd" followed by a small number.
const (
	pgMigrateLock int64 = 0x73777964_00000001 // held while migrating
	pgWriteLock   int64 = 0x73777964_00000002 // held by every key write, see write
)

// Pool sizing for a gateway: the cache's poll every 250 ms and the last-used flush
// every few seconds need one connection; admin requests and a burst at startup a few
// more. Several gateways share one server, so each stays small.
const (
	pgMaxConns = 8
	pgMinConns = 1
)

// errBadDSN is a connection string that does not parse: a mistake, not an outage.
var errBadDSN = errors.New("cannot parse the connection string (want a postgres:// URL or key=value pairs)")

type pgBackend struct {
	pool *pgxpool.Pool
}

func openPostgres(ctx context.Context, dsn string) (*pgBackend, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, fmt.Errorf("%w: it is empty", errBadDSN)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors can quote the connection string, password included.
		return nil, errBadDSN
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = pgMaxConns
	}
	if !strings.Contains(dsn, "pool_min_conns") {
		cfg.MinConns = pgMinConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "switchyard"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return &pgBackend{pool: pool}, nil
}

func (b *pgBackend) close() error {
	b.pool.Close()
	return nil
}

func (b *pgBackend) migrate(ctx context.Context, ms []migration) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// Gateways starting together against one database take turns here; the lock
		// is released by the commit, after which the next one finds the work done.
		// It comes before CREATE TABLE IF NOT EXISTS, which is not safe to run
		// concurrently.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgMigrateLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		applied := map[int]bool{}
		for _, v := range versions {
			applied[int(v)] = true
		}
		for _, m := range pending(ms, applied) {
			// Without arguments pgx sends the file with the simple protocol, so one
			// migration may hold several statements.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`,
				m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}

// write runs fn holding pgWriteLock until the commit. A sequence alone hands out
// numbers in call order, not commit order: a transaction holding 11 could commit after
// one holding 12, and a gateway that had already read 12 would ask for changes after
// 12 and never see 11 — a revocation lost. With writers taking turns, a number is
// taken only after every smaller one is committed and visible (PostgreSQL releases
// locks after a commit becomes visible). Key writes are rare admin actions, so the
// queue is short; last-used touches do not take the lock.
func (b *pgBackend) write(ctx context.Context, fn func(writer) error) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgWriteLock); err != nil {
			return err
		}
		return fn(pgWriter{tx})
	})
}

const pgKeyColumns = `id, name, prefix, hash, models, created_at, last_used_at, expires_at, revoked_at, replaced_by, seq, project_id, limits, owner_id`

func (b *pgBackend) getKey(ctx context.Context, id string) (*auth.Key, error) {
	return scanPGKey(b.pool.QueryRow(ctx, `SELECT `+pgKeyColumns+` FROM api_keys WHERE id = $1`, id))
}

func (b *pgBackend) listKeys(ctx context.Context) ([]*auth.Key, error) {
	return b.queryKeys(ctx, `SELECT `+pgKeyColumns+` FROM api_keys ORDER BY created_at DESC, id DESC`)
}

func (b *pgBackend) changedSince(ctx context.Context, seq int64) ([]*auth.Key, error) {
	return b.queryKeys(ctx, `SELECT `+pgKeyColumns+` FROM api_keys WHERE seq > $1 ORDER BY seq`, seq)
}

func (b *pgBackend) queryKeys(ctx context.Context, query string, args ...any) ([]*auth.Key, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.Key, error) { return scanPGKey(r) })
}

func (b *pgBackend) touchKeys(ctx context.Context, lastUsed map[string]time.Time) error {
	ids := make([]string, 0, len(lastUsed))
	for id := range lastUsed {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	times := make([]time.Time, len(ids))
	for i, id := range ids {
		times[i] = lastUsed[id]
	}
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// Lock the rows in id order first: two gateways flushing overlapping batches
		// at the same moment would otherwise lock them in whatever order each plan
		// visits them, and could deadlock.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM api_keys WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE api_keys AS k SET last_used_at = GREATEST(k.last_used_at, v.at)
			FROM unnest($1::text[], $2::timestamptz[]) AS v(id, at)
			WHERE k.id = v.id`, ids, times)
		return err
	})
}

type pgWriter struct{ tx pgx.Tx }

func (w pgWriter) nextSeq(ctx context.Context) (int64, error) {
	var seq int64
	err := w.tx.QueryRow(ctx, `SELECT nextval('api_keys_seq')`).Scan(&seq)
	return seq, err
}

func (w pgWriter) get(ctx context.Context, id string) (*auth.Key, error) {
	return scanPGKey(w.tx.QueryRow(ctx, `SELECT `+pgKeyColumns+` FROM api_keys WHERE id = $1`, id))
}

func (w pgWriter) insert(ctx context.Context, k *auth.Key) error {
	var models []string
	if len(k.Models) > 0 {
		models = k.Models
	}
	lim, err := encodeLimits(k.Limits)
	if err != nil {
		return err
	}
	_, err = w.tx.Exec(ctx, `INSERT INTO api_keys (`+pgKeyColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::jsonb, $14)`,
		k.ID, k.Name, k.Prefix, k.Hash[:], models, k.CreatedAt,
		pgTime(k.LastUsedAt), pgTime(k.ExpiresAt), pgTime(k.RevokedAt), nullString(k.ReplacedBy), k.Seq,
		nullString(k.ProjectID), lim, nullString(k.Owner))
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: key %q: id or hash already stored", ErrConflict, k.ID)
	}
	return err
}

func (w pgWriter) update(ctx context.Context, k *auth.Key) error {
	lim, err := encodeLimits(k.Limits)
	if err != nil {
		return err
	}
	_, err = w.tx.Exec(ctx,
		`UPDATE api_keys SET expires_at = $1, revoked_at = $2, replaced_by = $3, project_id = $4, limits = $5::jsonb, seq = $6 WHERE id = $7`,
		pgTime(k.ExpiresAt), pgTime(k.RevokedAt), nullString(k.ReplacedBy), nullString(k.ProjectID), lim, k.Seq, k.ID)
	return err
}

// pgTime is a time as stored: NULL when unset.
func pgTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func fromPGTime(v pgtype.Timestamptz) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return v.Time.UTC()
}

func scanPGKey(row pgx.Row) (*auth.Key, error) {
	var (
		k                                   auth.Key
		hash                                []byte
		replacedBy, projectID, owner        pgtype.Text
		lim                                 []byte
		created, lastUsed, expires, revoked pgtype.Timestamptz
	)
	err := row.Scan(&k.ID, &k.Name, &k.Prefix, &hash, &k.Models, &created, &lastUsed, &expires, &revoked, &replacedBy, &k.Seq,
		&projectID, &lim, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, auth.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	if len(hash) != len(k.Hash) {
		return nil, fmt.Errorf("key %q: stored hash has %d bytes", k.ID, len(hash))
	}
	copy(k.Hash[:], hash)
	if len(k.Models) == 0 {
		k.Models = nil
	}
	k.CreatedAt = fromPGTime(created)
	k.LastUsedAt = fromPGTime(lastUsed)
	k.ExpiresAt = fromPGTime(expires)
	k.RevokedAt = fromPGTime(revoked)
	k.ReplacedBy = replacedBy.String
	k.ProjectID = projectID.String
	k.Owner = owner.String
	if k.Limits, err = decodeLimits("key "+k.ID, lim); err != nil {
		return nil, err
	}
	return &k, nil
}
