package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/switchyard-gw/switchyard/auth"
)

const sqliteProjectColumns = `id, name, limits, created_at, seq, member_rules`

func (b *sqliteBackend) getProject(ctx context.Context, id string) (*auth.Project, error) {
	return scanSQLiteProject(b.r.QueryRowContext(ctx, `SELECT `+sqliteProjectColumns+` FROM projects WHERE id = ?`, id), id)
}

func (b *sqliteBackend) listProjects(ctx context.Context) ([]*auth.Project, error) {
	return b.queryProjects(ctx, `SELECT `+sqliteProjectColumns+` FROM projects ORDER BY id`)
}

func (b *sqliteBackend) projectsChangedSince(ctx context.Context, seq int64) ([]*auth.Project, error) {
	return b.queryProjects(ctx, `SELECT `+sqliteProjectColumns+` FROM projects WHERE seq > ? ORDER BY seq`, seq)
}

func (b *sqliteBackend) queryProjects(ctx context.Context, query string, args ...any) ([]*auth.Project, error) {
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.Project, error) { return scanSQLiteProject(r, "") })
}

func (b *sqliteBackend) listAudit(ctx context.Context, limit int, beforeID int64) ([]*auth.AuditEntry, error) {
	query, args := `SELECT id, at, actor, action, target, detail FROM audit_log ORDER BY id DESC LIMIT ?`, []any{limit}
	if beforeID > 0 {
		query, args = `SELECT id, at, actor, action, target, detail FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?`, []any{beforeID, limit}
	}
	rows, err := b.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.AuditEntry, error) {
		var (
			e  auth.AuditEntry
			at int64
		)
		if err := r.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.Target, &e.Detail); err != nil {
			return nil, err
		}
		e.At = time.UnixMicro(at).UTC()
		return &e, nil
	})
}

func (b *sqliteBackend) queryInt(ctx context.Context, query string, args ...any) (int64, error) {
	var v int64
	err := b.r.QueryRowContext(ctx, query, args...).Scan(&v)
	return v, err
}

func (w sqliteWriter) getProject(ctx context.Context, id string) (*auth.Project, error) {
	return scanSQLiteProject(w.tx.QueryRowContext(ctx, `SELECT `+sqliteProjectColumns+` FROM projects WHERE id = ?`, id), id)
}

func (w sqliteWriter) insertProject(ctx context.Context, p *auth.Project) error {
	lim, err := encodeLimits(p.Limits)
	if err != nil {
		return err
	}
	members, err := encodeMembers(p.Members)
	if err != nil {
		return err
	}
	_, err = w.tx.ExecContext(ctx, `INSERT INTO projects (`+sqliteProjectColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		p.ID, p.Name, lim, p.CreatedAt.UnixMicro(), p.Seq, members)
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("%w: project %q already exists", ErrConflict, p.ID)
	}
	return err
}

func (w sqliteWriter) updateProject(ctx context.Context, p *auth.Project) error {
	lim, err := encodeLimits(p.Limits)
	if err != nil {
		return err
	}
	members, err := encodeMembers(p.Members)
	if err != nil {
		return err
	}
	_, err = w.tx.ExecContext(ctx, `UPDATE projects SET name = ?, limits = ?, member_rules = ?, seq = ? WHERE id = ?`,
		p.Name, lim, members, p.Seq, p.ID)
	return err
}

func (w sqliteWriter) appendAudit(ctx context.Context, e *auth.AuditEntry) (int64, error) {
	var id int64
	err := w.tx.QueryRowContext(ctx, `INSERT INTO audit_log (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?) RETURNING id`,
		e.At.UnixMicro(), e.Actor, e.Action, e.Target, e.Detail).Scan(&id)
	return id, err
}

// scanSQLiteProject reads one project; id names it in the error when there is none.
func scanSQLiteProject(row interface{ Scan(...any) error }, id string) (*auth.Project, error) {
	var (
		p       auth.Project
		lim     sql.NullString
		members sql.NullString
		created int64
	)
	err := row.Scan(&p.ID, &p.Name, &lim, &created, &p.Seq, &members)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &auth.NotFoundError{What: "project", ID: id}
	}
	if err != nil {
		return nil, err
	}
	p.CreatedAt = time.UnixMicro(created).UTC()
	if p.Limits, err = decodeLimits("project "+p.ID, []byte(lim.String)); err != nil {
		return nil, err
	}
	if p.Members, err = decodeMembers(p.ID, []byte(members.String)); err != nil {
		return nil, err
	}
	return &p, nil
}
