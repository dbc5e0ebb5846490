package auth

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// Projects, limits and the audit trail, as operators change them (the admin API, the
// console, the CLI).

// ProjectRequest describes a new project.
type ProjectRequest struct {
	// ID is the project's slug (ValidateProjectID); Name defaults to it.
	ID, Name string
	Limits   *limits.Policy
}

// The audit trail is listed in pages of DefaultAuditPage entries, at most MaxAuditPage.
const (
	DefaultAuditPage = 50
	MaxAuditPage     = 1000
)

// errNoProjects is the answer of every call about projects on a store without them.
var errNoProjects = &InvalidError{Reason: "this store keeps no projects (configure a key store: SQLite or PostgreSQL)"}

// NewAuditEntry makes the audit entry of a change made with ctx (its actor, now).
func (m *Manager) NewAuditEntry(ctx context.Context, action, target, detail string) *AuditEntry {
	return &AuditEntry{At: m.now(), Actor: ActorOf(ctx), Action: action, Target: target, Detail: detail}
}

// appendAudit records e on its own, when there is an audit trail.
func (m *Manager) appendAudit(ctx context.Context, e *AuditEntry) error {
	if m.Projects == nil {
		return nil
	}
	return m.Projects.AppendAudit(ctx, e)
}

// RecordChange records in the audit trail a change made with ctx to something the key
// store does not keep itself (a candidate's live health, say). With no audit trail it
// records nothing and succeeds. A change whose record fails should not be made.
func (m *Manager) RecordChange(ctx context.Context, action, target, detail string) error {
	if m == nil {
		return nil
	}
	return m.appendAudit(ctx, m.NewAuditEntry(ctx, action, target, detail))
}

// checkLimits validates a policy an operator gave: its figures, and that every
// per-model variant names a model of this gateway.
func (m *Manager) checkLimits(p *limits.Policy) error {
	if p == nil {
		return nil
	}
	if err := p.Validate(); err != nil {
		return invalid("limits: %v", err)
	}
	for model := range p.Models {
		if m.ModelExists != nil && !m.ModelExists(model) {
			return invalid("limits: per-model limit for %q: not a model of this gateway (see GET /v1/models)", model)
		}
	}
	return nil
}

// checkProjectExists refuses, as invalid, a project id that is malformed or not stored.
func (m *Manager) checkProjectExists(ctx context.Context, call, id string) error {
	if m.Projects == nil {
		return errNoProjects
	}
	if err := ValidateProjectID(id); err != nil {
		return invalid("%v", err)
	}
	if _, err := m.Projects.GetProject(ctx, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return invalid("project %q does not exist; create it first (caddy switchyard projects create %s)", id, id)
		}
		return m.report(call+": reading project "+id, err)
	}
	return nil
}

// changeableKey reads a key that an operator is about to change: one of the store's,
// not revoked.
func (m *Manager) changeableKey(ctx context.Context, call, id string) (*Key, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	if strings.HasPrefix(id, "static:") {
		return nil, invalid("key %s comes from the configuration; change its limits and project there", loggableID(id))
	}
	k, err := m.Store.GetKey(ctx, id)
	if err != nil {
		return nil, m.report(call+" "+loggableID(id), err)
	}
	if !k.RevokedAt.IsZero() {
		return nil, invalid("key %s is revoked; a revoked key cannot change", id)
	}
	return k, nil
}

// afterChange brings the cache up to date and reads the key back.
func (m *Manager) afterKeyChange(ctx context.Context, call, id string) (*Key, error) {
	if err := m.Cache.Refresh(ctx); err != nil {
		return nil, m.report(call+" "+loggableID(id)+": reading it back", err)
	}
	k, err := m.Store.GetKey(ctx, id)
	return k, m.report(call+" "+loggableID(id)+": reading it back", err)
}

// SetKeyLimits replaces a key's own limits; nil (or a policy that limits nothing)
// clears them.
func (m *Manager) SetKeyLimits(ctx context.Context, keyID string, p *limits.Policy) (*Key, error) {
	if _, err := m.changeableKey(ctx, "set limits of key", keyID); err != nil {
		return nil, err
	}
	if err := m.checkLimits(p); err != nil {
		return nil, err
	}
	p = NormalizeLimits(p)
	if err := m.Projects.SetKeyLimits(ctx, keyID, p, m.NewAuditEntry(ctx, ActionKeyLimits, keyID, DescribeLimits(p))); err != nil {
		return nil, m.report("set limits of key "+loggableID(keyID), err)
	}
	return m.afterKeyChange(ctx, "set limits of key", keyID)
}

// SetKeyProject puts a key in a project; "" takes it out of any. The project must
// exist.
func (m *Manager) SetKeyProject(ctx context.Context, keyID, projectID string) (*Key, error) {
	k, err := m.changeableKey(ctx, "set project of key", keyID)
	if err != nil {
		return nil, err
	}
	if projectID != "" {
		if err := m.checkProjectExists(ctx, "set project of key "+loggableID(keyID), projectID); err != nil {
			return nil, err
		}
	}
	if k.ProjectID == projectID {
		return k, nil // nothing changes, nothing to record
	}
	detail := "project " + orNone(k.ProjectID) + " → " + orNone(projectID)
	err = m.Projects.SetKeyProject(ctx, keyID, projectID, m.NewAuditEntry(ctx, ActionKeyProject, keyID, detail))
	if IsProjectNotFound(err) {
		return nil, invalid("%v; create it first", err)
	}
	if err != nil {
		return nil, m.report("set project of key "+loggableID(keyID), err)
	}
	return m.afterKeyChange(ctx, "set project of key", keyID)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// CreateProject makes a new project. Its id is taken once: a second project with the
// same id is ErrConflict.
func (m *Manager) CreateProject(ctx context.Context, req ProjectRequest) (*Project, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	if err := ValidateProjectID(req.ID); err != nil {
		return nil, invalid("%v", err)
	}
	name := req.Name
	if strings.TrimSpace(name) == "" {
		name = req.ID
	}
	name, err := CheckKeyName(name)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if err := m.checkLimits(req.Limits); err != nil {
		return nil, err
	}
	p := &Project{ID: req.ID, Name: name, Limits: NormalizeLimits(req.Limits), CreatedAt: m.now()}
	detail := "name " + strconv.QuoteToGraphic(name)
	if p.Limits != nil {
		detail += "; " + DescribeLimits(p.Limits)
	}
	if err := m.Projects.CreateProject(ctx, p, m.NewAuditEntry(ctx, ActionProjectCreate, p.ID, detail)); err != nil {
		return nil, m.report("create project "+p.ID, err)
	}
	return p, m.report("create project "+p.ID+": reading it back", m.Cache.Refresh(ctx))
}

// SetProjectLimits replaces a project's limits; nil (or a policy that limits
// nothing) clears them.
func (m *Manager) SetProjectLimits(ctx context.Context, id string, p *limits.Policy) (*Project, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	if err := ValidateProjectID(id); err != nil {
		return nil, &NotFoundError{What: "project", ID: id}
	}
	if err := m.checkLimits(p); err != nil {
		return nil, err
	}
	p = NormalizeLimits(p)
	if err := m.Projects.SetProjectLimits(ctx, id, p, m.NewAuditEntry(ctx, ActionProjectLimits, id, DescribeLimits(p))); err != nil {
		return nil, m.report("set limits of project "+id, err)
	}
	if err := m.Cache.Refresh(ctx); err != nil {
		return nil, m.report("set limits of project "+id+": reading it back", err)
	}
	return m.GetProject(ctx, id)
}

// The departed settings of MemberRules: what becomes of a disabled person's keys.
const (
	DepartedKeep   = "keep"
	DepartedRevoke = "revoke"
)

// SetProjectMembers replaces a project's rules for its members' keys; nil takes them
// away (members may not make keys there until an admin sets rules again). The models
// must be this gateway's, the limits valid, Departed "", "keep" or "revoke", and
// RevokeAfter is only for "revoke".
func (m *Manager) SetProjectMembers(ctx context.Context, id string, rules *MemberRules) (*Project, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	if err := ValidateProjectID(id); err != nil {
		return nil, &NotFoundError{What: "project", ID: id}
	}
	if err := m.checkMemberRules(rules); err != nil {
		return nil, err
	}
	if rules != nil {
		r := *rules
		r.KeyLimits, r.Limits = NormalizeLimits(r.KeyLimits), NormalizeLimits(r.Limits)
		rules = &r
	}
	if err := m.Projects.SetProjectMembers(ctx, id, rules, m.NewAuditEntry(ctx, ActionProjectMembers, id, DescribeMemberRules(rules))); err != nil {
		return nil, m.report("set member rules of project "+id, err)
	}
	if err := m.Cache.Refresh(ctx); err != nil {
		return nil, m.report("set member rules of project "+id+": reading it back", err)
	}
	return m.GetProject(ctx, id)
}

// Bounds on the models a project's member rules name (the store's own).
const (
	maxMemberModels = 256
	maxModelName    = 200
)

// checkMemberRules validates rules an admin gave.
func (m *Manager) checkMemberRules(r *MemberRules) error {
	if r == nil {
		return nil
	}
	if len(r.Models) > maxMemberModels {
		return invalid("members: models: at most %d", maxMemberModels)
	}
	for _, model := range r.Models {
		if strings.TrimSpace(model) == "" || len(model) > maxModelName {
			return invalid("members: models: a model name is 1 to %d bytes", maxModelName)
		}
		if m.ModelExists != nil && !m.ModelExists(model) {
			return invalid("members: models: %s is not a model of this gateway (see GET /v1/models)", strconv.QuoteToGraphic(truncate(model, 80)))
		}
	}
	if r.MaxExpiry < 0 {
		return invalid("members: max_expiry: must not be negative")
	}
	if err := m.checkLimits(r.KeyLimits); err != nil {
		return invalid("members: key_limits: %v", err)
	}
	if err := m.checkLimits(r.Limits); err != nil {
		return invalid("members: limits: %v", err)
	}
	switch r.Departed {
	case "", DepartedKeep, DepartedRevoke:
	default:
		return invalid("members: departed: %s is not %q or %q", strconv.QuoteToGraphic(truncate(r.Departed, 40)), DepartedKeep, DepartedRevoke)
	}
	if r.RevokeAfter < 0 {
		return invalid("members: revoke_after: must not be negative")
	}
	if r.RevokeAfter != 0 && r.Departed != DepartedRevoke {
		return invalid("members: revoke_after: only with departed %q", DepartedRevoke)
	}
	return nil
}

// DescribeMemberRules says a project's member rules in words, as the audit trail
// records them: "models gpt-5, claude; max expiry 720h0m0s; key limits rpm 60; each
// member's keys together budget 50/month; departed: revoke after 168h0m0s", or "no
// member rules (members may not make keys)".
func DescribeMemberRules(r *MemberRules) string {
	if r == nil {
		return "no member rules (members may not make keys)"
	}
	parts := []string{"models every model"}
	if n := len(r.Models); n > 0 {
		// A long list is named in part: the trail's detail is bounded.
		shown := r.Models[:min(n, 10)]
		parts[0] = "models " + strings.Join(shown, ", ")
		if n > len(shown) {
			parts[0] += " and " + strconv.Itoa(n-len(shown)) + " more"
		}
	}
	if r.MaxExpiry > 0 {
		parts = append(parts, "max expiry "+time.Duration(r.MaxExpiry).String())
	} else {
		parts = append(parts, "no max expiry")
	}
	parts = append(parts, "key limits "+DescribeLimits(r.KeyLimits), "each member's keys together "+DescribeLimits(r.Limits))
	switch {
	case r.Departed == DepartedRevoke && r.RevokeAfter > 0:
		parts = append(parts, "departed: revoke after "+time.Duration(r.RevokeAfter).String())
	case r.Departed == DepartedRevoke:
		parts = append(parts, "departed: revoke at once")
	default:
		parts = append(parts, "departed: keep")
	}
	return strings.Join(parts, "; ")
}

// GetProject returns one project (an error that errors.Is ErrNotFound when there is
// none).
func (m *Manager) GetProject(ctx context.Context, id string) (*Project, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	if ValidateProjectID(id) != nil {
		return nil, &NotFoundError{What: "project", ID: id}
	}
	p, err := m.Projects.GetProject(ctx, id)
	return p, m.report("get project "+id, err)
}

// ListProjects returns every project, by id.
func (m *Manager) ListProjects(ctx context.Context) ([]*Project, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	ps, err := m.Projects.ListProjects(ctx)
	return ps, m.report("list projects", err)
}

// Audit lists the audit trail, newest first: at most limit entries (0:
// DefaultAuditPage; more than MaxAuditPage: MaxAuditPage), before the entry beforeID
// (0: from the latest). The next page is the one before the last entry's id.
func (m *Manager) Audit(ctx context.Context, limit int, beforeID int64) ([]*AuditEntry, error) {
	if m.Projects == nil {
		return nil, errNoProjects
	}
	switch {
	case limit < 0:
		return nil, invalid("limit: must not be negative (0 lists %d entries)", DefaultAuditPage)
	case limit == 0:
		limit = DefaultAuditPage
	case limit > MaxAuditPage:
		limit = MaxAuditPage
	}
	if beforeID < 0 {
		return nil, invalid("before: must be an entry's id, or 0 for the latest")
	}
	es, err := m.Projects.ListAudit(ctx, limit, beforeID)
	return es, m.report("list audit trail", err)
}
