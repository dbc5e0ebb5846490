package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
	"github.com/switchyard-gw/switchyard/limits"
)

// Projects, the keys' limits and projects, the audit trail and spend: the tables of
// migration 0003_projects. Every change and its audit entry commit in one transaction,
// and every change to a key or a project takes the next number of the keys' sequence,
// so every gateway's cache picks it up by ChangedSince or ProjectsChangedSince.

var (
	_ auth.ProjectStore    = (*Store)(nil)
	_ auth.AuditedKeyStore = (*Store)(nil)
)

// Bounds on what the audit trail stores: entries are written by the Manager, whose
// details are short sentences; a longer one is a mistake, refused rather than cut.
const (
	maxAuditField  = 200
	maxAuditDetail = 2000
	// maxAuditActor is longer: a person is named by e-mail (up to 320 bytes), the
	// provider's subject (up to 255) and the address they came from.
	maxAuditActor = 1000
)

// CreateProject implements auth.ProjectStore. It stores p's ID, Name, Limits, Members
// and CreatedAt (now when zero); on success p.Seq is set, and p.CreatedAt when it was zero.
// An id already stored gives ErrConflict.
func (s *Store) CreateProject(ctx context.Context, p *auth.Project, e *auth.AuditEntry) error {
	if p == nil {
		return errors.New("store: nil project")
	}
	if err := auth.ValidateProjectID(p.ID); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := auth.ValidateName(p.Name); err != nil {
		return fmt.Errorf("store: project %q: %w", p.ID, err)
	}
	if err := p.Limits.Validate(); err != nil {
		return fmt.Errorf("store: project %q: limits: %w", p.ID, err)
	}
	members, err := memberRulesRow(p.ID, p.Members)
	if err != nil {
		return err
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	row := &auth.Project{ID: p.ID, Name: p.Name, Limits: auth.NormalizeLimits(p.Limits), Members: members,
		CreatedAt: storedTime(orNow(p.CreatedAt))}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			seq, err := w.nextSeq(ctx)
			if err != nil {
				return err
			}
			row.Seq = seq
			if err := w.insertProject(ctx, row); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err != nil {
		return err
	}
	p.Seq = row.Seq
	if p.CreatedAt.IsZero() {
		p.CreatedAt = row.CreatedAt
	}
	auditDone(e, entry)
	return nil
}

// GetProject implements auth.ProjectStore.
func (s *Store) GetProject(ctx context.Context, id string) (*auth.Project, error) {
	return call(ctx, s, kindRead, func(b backend) (*auth.Project, error) { return b.getProject(ctx, id) })
}

// ListProjects implements auth.ProjectStore: every project, by id.
func (s *Store) ListProjects(ctx context.Context) ([]*auth.Project, error) {
	return call(ctx, s, kindRead, func(b backend) ([]*auth.Project, error) { return b.listProjects(ctx) })
}

// ProjectsChangedSince implements auth.ProjectStore.
func (s *Store) ProjectsChangedSince(ctx context.Context, seq int64) ([]*auth.Project, error) {
	return call(ctx, s, kindRead, func(b backend) ([]*auth.Project, error) { return b.projectsChangedSince(ctx, seq) })
}

// SetProjectLimits implements auth.ProjectStore. A policy that limits nothing is
// stored as none. An unknown id gives a *auth.NotFoundError.
func (s *Store) SetProjectLimits(ctx context.Context, id string, p *limits.Policy, e *auth.AuditEntry) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("store: project %q: limits: %w", id, err)
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			pr, err := w.getProject(ctx, id)
			if err != nil {
				return err
			}
			if pr.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			pr.Limits = auth.NormalizeLimits(p)
			if err := w.updateProject(ctx, pr); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err == nil {
		auditDone(e, entry)
	}
	return err
}

// SetProjectMembers implements auth.ProjectStore: it replaces a project's rules for its
// members' keys (nil: members may not make keys there) and gives the project the next
// Seq, so that every gateway's cache holds the new rules. An unknown id gives a
// *auth.NotFoundError.
func (s *Store) SetProjectMembers(ctx context.Context, id string, rules *auth.MemberRules, e *auth.AuditEntry) error {
	members, err := memberRulesRow(id, rules)
	if err != nil {
		return err
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			pr, err := w.getProject(ctx, id)
			if err != nil {
				return err
			}
			if pr.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			pr.Members = members
			if err := w.updateProject(ctx, pr); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err == nil {
		auditDone(e, entry)
	}
	return err
}

// Bounds on a project's rules for members' keys: a list of models an admin types, not
// a catalogue.
const (
	maxMemberModels   = 256
	maxModelNameBytes = 200
)

// memberRulesRow checks rules about to be stored and returns the copy to store (nil
// for none): limits that limit nothing are stored as none.
func memberRulesRow(projectID string, rules *auth.MemberRules) (*auth.MemberRules, error) {
	if rules == nil {
		return nil, nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("store: project %q: member rules: "+format, append([]any{projectID}, args...)...)
	}
	if len(rules.Models) > maxMemberModels {
		return nil, bad("more than %d models", maxMemberModels)
	}
	for _, m := range rules.Models {
		if strings.TrimSpace(m) == "" || len(m) > maxModelNameBytes {
			return nil, bad("a model name must be 1 to %d bytes", maxModelNameBytes)
		}
	}
	if rules.MaxExpiry < 0 || rules.RevokeAfter < 0 {
		return nil, bad("negative duration")
	}
	switch rules.Departed {
	case "", "keep", "revoke":
	default:
		return nil, bad("departed %s: want keep or revoke", strconv.QuoteToGraphic(rules.Departed))
	}
	for what, p := range map[string]*limits.Policy{"key limits": rules.KeyLimits, "limits": rules.Limits} {
		if err := p.Validate(); err != nil {
			return nil, bad("%s: %w", what, err)
		}
	}
	row := *rules
	row.Models = slices.Clone(rules.Models)
	row.KeyLimits, row.Limits = auth.NormalizeLimits(rules.KeyLimits), auth.NormalizeLimits(rules.Limits)
	return &row, nil
}

// encodeMembers is a project's member rules as stored: JSON text, or NULL (nil) for
// none.
func encodeMembers(rules *auth.MemberRules) (any, error) {
	if rules == nil {
		return nil, nil
	}
	b, err := json.Marshal(rules)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// decodeMembers reads stored member rules; empty (NULL) is none.
func decodeMembers(projectID string, b []byte) (*auth.MemberRules, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var rules auth.MemberRules
	if err := json.Unmarshal(b, &rules); err != nil {
		return nil, fmt.Errorf("project %s: member rules: %w", projectID, err)
	}
	rules.KeyLimits, rules.Limits = auth.NormalizeLimits(rules.KeyLimits), auth.NormalizeLimits(rules.Limits)
	return &rules, nil
}

// SetKeyLimits implements auth.ProjectStore. A policy that limits nothing is stored
// as none. An unknown key gives auth.ErrNotFound.
func (s *Store) SetKeyLimits(ctx context.Context, keyID string, p *limits.Policy, e *auth.AuditEntry) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("store: key %q: limits: %w", keyID, err)
	}
	return s.changeKey(ctx, keyID, e, func(ctx context.Context, w writer, k *auth.Key) error {
		k.Limits = auth.NormalizeLimits(p)
		return nil
	})
}

// SetKeyProject implements auth.ProjectStore: projectID "" takes the key out of any
// project. An unknown key gives auth.ErrNotFound, an unknown project a
// *auth.NotFoundError naming it (both errors.Is auth.ErrNotFound).
func (s *Store) SetKeyProject(ctx context.Context, keyID, projectID string, e *auth.AuditEntry) error {
	return s.changeKey(ctx, keyID, e, func(ctx context.Context, w writer, k *auth.Key) error {
		if err := checkProject(ctx, w, projectID); err != nil {
			return err
		}
		k.ProjectID = projectID
		return nil
	})
}

// changeKey reads a key, changes it with edit, gives it the next Seq and writes it with
// e, in one transaction.
func (s *Store) changeKey(ctx context.Context, keyID string, e *auth.AuditEntry, edit func(context.Context, writer, *auth.Key) error) error {
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error {
			k, err := w.get(ctx, keyID)
			if err != nil {
				return err
			}
			if err := edit(ctx, w, k); err != nil {
				return err
			}
			if k.Seq, err = w.nextSeq(ctx); err != nil {
				return err
			}
			if err := w.update(ctx, k); err != nil {
				return err
			}
			return appendAuditIn(ctx, w, entry)
		})
	})
	if err == nil {
		auditDone(e, entry)
	}
	return err
}

// AppendAudit implements auth.ProjectStore. On success e.ID is set, and e.At when it
// was zero.
func (s *Store) AppendAudit(ctx context.Context, e *auth.AuditEntry) error {
	if e == nil {
		return errors.New("store: nil audit entry")
	}
	entry, err := newAuditRow(e)
	if err != nil {
		return err
	}
	err = call0(ctx, s, kindWrite, func(b backend) error {
		return b.write(ctx, func(w writer) error { return appendAuditIn(ctx, w, entry) })
	})
	if err == nil {
		auditDone(e, entry)
	}
	return err
}

// ListAudit implements auth.ProjectStore: at most limit entries (at least 1), newest
// first, with ids below beforeID (0: from the latest).
func (s *Store) ListAudit(ctx context.Context, limit int, beforeID int64) ([]*auth.AuditEntry, error) {
	limit = max(limit, 1)
	return call(ctx, s, kindRead, func(b backend) ([]*auth.AuditEntry, error) { return b.listAudit(ctx, limit, beforeID) })
}

// Spend is the metered spend, in micro-units, of scope since a time: the sum of
// cost_micros of the usage records with key_id (limits.ScopeKey) or project_id
// (limits.ScopeProject) equal to scope.ID, or of a person's keys in a project
// (limits.ScopeMember), of model scope.Model when set, at or after
// since (a zero since: all of them). The project of a record is its key's when it was
// metered. It is the limits' seeding from the ledger (the ledger's truth, not the
// counters').
func (s *Store) Spend(ctx context.Context, scope limits.Scope, since time.Time) (int64, error) {
	if scope.ID == "" {
		return 0, errors.New("store: spend: empty scope id")
	}
	d := sqliteUsageDialect
	if s.driver == DriverPostgres {
		d = pgUsageDialect
	}
	var args []any
	var where []string
	switch scope.Kind {
	case limits.ScopeKey:
		args, where = []any{scope.ID}, []string{"key_id = " + d.param(1)}
	case limits.ScopeProject:
		args, where = []any{scope.ID}, []string{"project_id = " + d.param(1)}
	case limits.ScopeMember:
		// A member's spend in a project: the records metered in that project for any
		// key the person owns.
		project, owner, ok := strings.Cut(scope.ID, "/")
		if !ok || project == "" || owner == "" {
			return 0, fmt.Errorf("store: spend: member scope %q is not <project>/<owner>", scope.ID)
		}
		args = []any{project, owner}
		where = []string{"project_id = " + d.param(1), "key_id IN (SELECT id FROM api_keys WHERE owner_id = " + d.param(2) + ")"}
	default:
		return 0, fmt.Errorf("store: spend: unknown scope kind %q", scope.Kind)
	}
	if !since.IsZero() {
		args = append(args, d.time(ceilMicro(since)))
		where = append(where, "ts >= "+d.param(len(args)))
	}
	if scope.Model != "" {
		args = append(args, scope.Model)
		where = append(where, "model = "+d.param(len(args)))
	}
	query := `SELECT CAST(coalesce(sum(cost_micros), 0) AS BIGINT) FROM usage_records WHERE ` + strings.Join(where, " AND ")
	v, err := call(ctx, s, kindRead, func(b backend) (int64, error) { return b.queryInt(ctx, query, args...) })
	if err != nil {
		return 0, fmt.Errorf("store: spend of %s: %w", scope, err)
	}
	return v, nil
}

// checkProject returns a *auth.NotFoundError when projectID is set and not stored.
func checkProject(ctx context.Context, w writer, projectID string) error {
	if projectID == "" {
		return nil
	}
	_, err := w.getProject(ctx, projectID)
	return err
}

// newAuditRow checks an entry about to be stored and returns the copy to store (nil
// for none).
func newAuditRow(e *auth.AuditEntry) (*auth.AuditEntry, error) {
	if e == nil {
		return nil, nil
	}
	switch {
	case e.Actor == "" || e.Action == "" || e.Target == "":
		return nil, errors.New("store: an audit entry needs an actor, an action and a target")
	case len(e.Actor) > maxAuditActor:
		return nil, fmt.Errorf("store: audit entry: actor longer than %d bytes", maxAuditActor)
	case len(e.Action) > maxAuditField || len(e.Target) > maxAuditField:
		return nil, fmt.Errorf("store: audit entry: action and target are at most %d bytes each", maxAuditField)
	case len(e.Detail) > maxAuditDetail:
		return nil, fmt.Errorf("store: audit entry: detail longer than %d bytes", maxAuditDetail)
	}
	return &auth.AuditEntry{At: storedTime(orNow(e.At)), Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail}, nil
}

// appendAuditIn stores entry (when not nil) in w's transaction and sets its ID.
func appendAuditIn(ctx context.Context, w writer, entry *auth.AuditEntry) error {
	if entry == nil {
		return nil
	}
	id, err := w.appendAudit(ctx, entry)
	entry.ID = id
	return err
}

// auditDone tells the caller's entry the id and time it was stored with.
func auditDone(e, stored *auth.AuditEntry) {
	if e != nil && stored != nil {
		e.ID, e.At = stored.ID, stored.At
	}
}

// encodeLimits is a policy as stored: JSON text, or NULL (nil) when it limits nothing.
func encodeLimits(p *limits.Policy) (any, error) {
	if p.IsZero() {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// decodeLimits reads a stored policy; empty (NULL) is none.
func decodeLimits(what string, b []byte) (*limits.Policy, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p limits.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: limits: %w", what, err)
	}
	return auth.NormalizeLimits(&p), nil
}
