package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/alerts"
)

// The alerts' outbox (migration 0006_alerts): one statement per operation, written once
// with '?' placeholders and numbered for PostgreSQL. Times are unix microseconds on
// both databases.

var _ alerts.Outbox = (*Store)(nil)

// alertDB is what the outbox needs of a backend.
type alertDB interface {
	// alertExec runs a write and answers the rows it touched.
	alertExec(ctx context.Context, query string, args ...any) (int64, error)
	// alertQuery runs a query (on the write connection when write is set) and scans
	// each row with scan.
	alertQuery(ctx context.Context, write bool, query string, scan func(resultRows) error, args ...any) error
	// isPostgres says which dialect to write.
	isPostgres() bool
}

// pgNumbered turns '?' placeholders into PostgreSQL's $1, $2, ... (the outbox's
// statements hold no '?' in a literal).
func pgNumbered(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func dialect(db alertDB, q string) string {
	if db.isPostgres() {
		return pgNumbered(q)
	}
	return q
}

func usOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func timeOfUS(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// Enqueue implements alerts.Outbox: a row already stored for the same webhook and
// event (another gateway noticed it first) is left as it is.
func (s *Store) Enqueue(ctx context.Context, ds []alerts.NewDelivery) error {
	const q = `INSERT INTO alert_outbox (webhook, dedupe, kind, event, created_at, next_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (webhook, dedupe) DO NOTHING`
	err := call0(ctx, s, kindWrite, func(b backend) error {
		db := alertDB(b)
		for _, d := range ds {
			at := usOf(orNow(d.At))
			if _, err := db.alertExec(ctx, dialect(db, q), d.Webhook, d.Dedupe, string(d.Kind), string(d.Event), at, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: enqueue alerts: %w", err)
	}
	return nil
}

const alertColumns = `id, webhook, kind, dedupe, event, state, attempts, created_at, next_at, sent_at, last_error`

func scanDelivery(r resultRows) (alerts.Delivery, error) {
	var (
		d             alerts.Delivery
		kind, event   string
		created, next int64
		sent          sql.NullInt64
		attempts      int64
	)
	if err := r.Scan(&d.ID, &d.Webhook, &kind, &d.Dedupe, &event, &d.State, &attempts, &created, &next, &sent, &d.LastError); err != nil {
		return d, err
	}
	d.Kind, d.Event, d.Attempts = alerts.Kind(kind), []byte(event), int(attempts)
	d.CreatedAt, d.NextAt, d.SentAt = timeOfUS(created), timeOfUS(next), timeOfUS(sent.Int64)
	return d, nil
}

// Claim implements alerts.Outbox. The lease's condition is in the outer WHERE as well
// as in the search, so that on PostgreSQL a second gateway blocked on the same row sees
// the first one's lease when it gets the row, and skips it.
func (s *Store) Claim(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]alerts.Delivery, error) {
	nowUS, until := usOf(now), usOf(now.Add(lease))
	var out []alerts.Delivery
	err := call0(ctx, s, kindWrite, func(b backend) error {
		db := alertDB(b)
		lock := ""
		if db.isPostgres() {
			lock = " FOR UPDATE SKIP LOCKED"
		}
		q := `UPDATE alert_outbox SET claimed_by = ?, claimed_until = ?
			WHERE claimed_until < ? AND state = 'pending' AND id IN (
				SELECT id FROM alert_outbox
				WHERE state = 'pending' AND next_at <= ? AND claimed_until < ?
				ORDER BY id LIMIT ?` + lock + `)
			RETURNING ` + alertColumns
		out = out[:0]
		return db.alertQuery(ctx, true, dialect(db, q), func(r resultRows) error {
			d, err := scanDelivery(r)
			out = append(out, d)
			return err
		}, owner, until, nowUS, nowUS, nowUS, limit)
	})
	if err != nil {
		return nil, fmt.Errorf("store: claim alerts: %w", err)
	}
	slices.SortFunc(out, func(a, b alerts.Delivery) int { return int(a.ID - b.ID) })
	return out, nil
}

// Finish implements alerts.Outbox.
func (s *Store) Finish(ctx context.Context, id int64, owner, state string, attempts int, next time.Time, lastError string) error {
	const q = `UPDATE alert_outbox SET state = ?, attempts = ?, next_at = ?, last_error = ?,
		sent_at = CASE WHEN ? THEN ? ELSE sent_at END, claimed_by = NULL, claimed_until = 0
		WHERE id = ? AND claimed_by = ?`
	now := usOf(time.Now())
	nextUS := usOf(next)
	if nextUS == 0 {
		nextUS = now
	}
	if len(lastError) > 500 {
		lastError = strings.ToValidUTF8(lastError[:500], "")
	}
	err := call0(ctx, s, kindWrite, func(b backend) error {
		db := alertDB(b)
		_, err := db.alertExec(ctx, dialect(db, q), state, attempts, nextUS, lastError, state == alerts.StateSent, now, id, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: finish alert %d: %w", id, err)
	}
	return nil
}

// Release implements alerts.Outbox.
func (s *Store) Release(ctx context.Context, owner string) error {
	const q = `UPDATE alert_outbox SET claimed_by = NULL, claimed_until = 0 WHERE claimed_by = ? AND state = 'pending'`
	return call0(ctx, s, kindWrite, func(b backend) error {
		db := alertDB(b)
		_, err := db.alertExec(ctx, dialect(db, q), owner)
		return err
	})
}

// Recent implements alerts.Outbox.
func (s *Store) Recent(ctx context.Context, limit int) ([]alerts.Delivery, error) {
	q := `SELECT ` + alertColumns + ` FROM alert_outbox ORDER BY id DESC LIMIT ?`
	var out []alerts.Delivery
	err := call0(ctx, s, kindRead, func(b backend) error {
		db := alertDB(b)
		out = out[:0]
		return db.alertQuery(ctx, false, dialect(db, q), func(r resultRows) error {
			d, err := scanDelivery(r)
			out = append(out, d)
			return err
		}, limit)
	})
	if err != nil {
		return nil, fmt.Errorf("store: recent alerts: %w", err)
	}
	return out, nil
}

func (b *sqliteBackend) isPostgres() bool { return false }

func (b *sqliteBackend) alertExec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := b.w.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (b *sqliteBackend) alertQuery(ctx context.Context, write bool, query string, scan func(resultRows) error, args ...any) error {
	db := b.r
	if write {
		db = b.w
	}
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}

func (b *pgBackend) isPostgres() bool { return true }

func (b *pgBackend) alertExec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := b.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (b *pgBackend) alertQuery(ctx context.Context, _ bool, query string, scan func(resultRows) error, args ...any) error {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return each(rows, scan)
}
