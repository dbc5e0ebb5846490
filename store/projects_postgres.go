package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/switchyard-gw/switchyard/auth"
)

const pgProjectColumns = `id, name, limits, created_at, seq, member_rules`

func (b *pgBackend) getProject(ctx context.Context, id string) (*auth.Project, error) {
	return scanPGProject(b.pool.QueryRow(ctx, `SELECT `+pgProjectColumns+` FROM projects WHERE id = $1`, id), id)
}

func (b *pgBackend) listProjects(ctx context.Context) ([]*auth.Project, error) {
	// COLLATE "C": by id byte by byte, as on SQLite.
	return b.queryProjects(ctx, `SELECT `+pgProjectColumns+` FROM projects ORDER BY id COLLATE "C"`)
}

func (b *pgBackend) projectsChangedSince(ctx context.Context, seq int64) ([]*auth.Project, error) {
	return b.queryProjects(ctx, `SELECT `+pgProjectColumns+` FROM projects WHERE seq > $1 ORDER BY seq`, seq)
}

func (b *pgBackend) queryProjects(ctx context.Context, query string, args ...any) ([]*auth.Project, error) {
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.Project, error) { return scanPGProject(r, "") })
}

func (b *pgBackend) listAudit(ctx context.Context, limit int, beforeID int64) ([]*auth.AuditEntry, error) {
	query, args := `SELECT id, at, actor, action, target, detail FROM audit_log ORDER BY id DESC LIMIT $1`, []any{limit}
	if beforeID > 0 {
		query, args = `SELECT id, at, actor, action, target, detail FROM audit_log WHERE id < $1 ORDER BY id DESC LIMIT $2`, []any{beforeID, limit}
	}
	rows, err := b.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collect(rows, func(r resultRows) (*auth.AuditEntry, error) {
		var e auth.AuditEntry
		if err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Target, &e.Detail); err != nil {
			return nil, err
		}
		e.At = e.At.UTC()
		return &e, nil
	})
}

func (b *pgBackend) queryInt(ctx context.Context, query string, args ...any) (int64, error) {
	var v int64
	err := b.pool.QueryRow(ctx, query, args...).Scan(&v)
	return v, err
}

func (w pgWriter) getProject(ctx context.Context, id string) (*auth.Project, error) {
	return scanPGProject(w.tx.QueryRow(ctx, `SELECT `+pgProjectColumns+` FROM projects WHERE id = $1`, id), id)
}

func (w pgWriter) insertProject(ctx context.Context, p *auth.Project) error {
	lim, err := encodeLimits(p.Limits)
	if err != nil {
		return err
	}
	members, err := encodeMembers(p.Members)
	if err != nil {
		return err
	}
	_, err = w.tx.Exec(ctx, `INSERT INTO projects (`+pgProjectColumns+`) VALUES ($1, $2, $3::jsonb, $4, $5, $6::jsonb)`,
		p.ID, p.Name, lim, p.CreatedAt, p.Seq, members)
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok && pe.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: project %q already exists", ErrConflict, p.ID)
	}
	return err
}

func (w pgWriter) updateProject(ctx context.Context, p *auth.Project) error {
	lim, err := encodeLimits(p.Limits)
	if err != nil {
		return err
	}
	members, err := encodeMembers(p.Members)
	if err != nil {
		return err
	}
	_, err = w.tx.Exec(ctx, `UPDATE projects SET name = $1, limits = $2::jsonb, member_rules = $3::jsonb, seq = $4 WHERE id = $5`,
		p.Name, lim, members, p.Seq, p.ID)
	return err
}

func (w pgWriter) appendAudit(ctx context.Context, e *auth.AuditEntry) (int64, error) {
	var id int64
	err := w.tx.QueryRow(ctx, `INSERT INTO audit_log (at, actor, action, target, detail) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		e.At, e.Actor, e.Action, e.Target, e.Detail).Scan(&id)
	return id, err
}

// scanPGProject reads one project; id names it in the error when there is none.
func scanPGProject(row pgx.Row, id string) (*auth.Project, error) {
	var (
		p       auth.Project
		lim     []byte
		members []byte
		created pgtype.Timestamptz
	)
	err := row.Scan(&p.ID, &p.Name, &lim, &created, &p.Seq, &members)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &auth.NotFoundError{What: "project", ID: id}
	}
	if err != nil {
		return nil, err
	}
	p.CreatedAt = fromPGTime(created)
	if p.Limits, err = decodeLimits("project "+p.ID, lim); err != nil {
		return nil, err
	}
	if p.Members, err = decodeMembers(p.ID, members); err != nil {
		return nil, err
	}
	return &p, nil
}
