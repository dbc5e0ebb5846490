package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// Manager is what operators do with keys and projects: create, rotate, revoke, list,
// set limits. Every change reaches this gateway's cache before the call returns, so a
// revoked key stops working here at once (other gateways sharing the store follow
// within their refresh interval), and is recorded in the audit trail with the actor of
// the call's context (ActorOf).
type Manager struct {
	Store KeyStore
	// Projects keeps projects, limits and the audit trail; nil: this store keeps no
	// projects (the calls about projects and limits are refused as invalid, and
	// nothing is audited).
	Projects ProjectStore
	Cache    *Cache
	// ModelExists checks a model named in an allowlist; nil accepts any.
	ModelExists func(id string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnError is told, once per failed call, of a failure that is not the caller's (the
	// store failing: what the API answers with a 500 and no details). call names the
	// call and the key id, never a secret.
	OnError func(call string, err error)
}

// loggableID is a key id as it may appear in a log line: the id comes from the
// caller's URL, which could hold anything (a secret pasted by mistake, terminal escapes),
// so only something of the form NewKeyID makes is written out.
func loggableID(id string) string {
	rest, ok := strings.CutPrefix(id, "key_")
	if !ok || len(rest) == 0 || len(rest) > 40 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "(an id not of the key_ form)"
	}
	return id
}

// report passes a failure of the store to OnError and returns err.
func (m *Manager) report(call string, err error) error {
	if err != nil && m.OnError != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) && !IsInvalid(err) {
		m.OnError(call, err)
	}
	return err
}

// InvalidError is a request an operator must correct; its text says how.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return e.Reason }

func invalid(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now().UTC()
	}
	return time.Now().UTC()
}

// CreateRequest describes a new key.
type CreateRequest struct {
	Name   string
	Models []string
	// ExpiresAt, when set, must be in the future.
	ExpiresAt time.Time
	// ProjectID, when set, names an existing project the key belongs to.
	ProjectID string
	// Limits are the key's own limits; nil: none.
	Limits *limits.Policy
	// Owner is the key's owner (see Key.Owner); empty: none.
	Owner string
}

// Created is a new key and its secret, which is shown this once and never stored.
type Created struct {
	Key    *Key   `json:"key"`
	Secret string `json:"secret"`
}

func (m *Manager) newKey(req CreateRequest, now time.Time) (*Key, string, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, "", invalid("%v", err)
	}
	models := slices.Compact(slices.Sorted(slices.Values(req.Models)))
	for _, id := range models {
		if id == "" || (m.ModelExists != nil && !m.ModelExists(id)) {
			return nil, "", invalid("models: %q is not a model of this gateway", id)
		}
	}
	if !req.ExpiresAt.IsZero() && !req.ExpiresAt.After(now) {
		return nil, "", invalid("expires_at: must be in the future")
	}
	if err := m.checkLimits(req.Limits); err != nil {
		return nil, "", err
	}
	secret, err := GenerateSecret()
	if err != nil {
		return nil, "", err
	}
	return &Key{
		ID:        NewKeyID(),
		Name:      strings.TrimSpace(req.Name),
		Prefix:    DisplayPrefix(secret),
		Hash:      HashKey(secret),
		Models:    models,
		CreatedAt: now,
		ExpiresAt: req.ExpiresAt.UTC(),
		ProjectID: req.ProjectID,
		Limits:    NormalizeLimits(req.Limits),
		Owner:     req.Owner,
	}, secret, nil
}

// Create makes a new key, in req.ProjectID's project when set (the project must
// exist), with req.Limits as its own limits.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (*Created, error) {
	if req.ProjectID != "" {
		if err := m.checkProjectExists(ctx, "create key", req.ProjectID); err != nil {
			return nil, err
		}
	}
	k, secret, err := m.newKey(req, m.now())
	if err != nil {
		return nil, err
	}
	e := m.NewAuditEntry(ctx, ActionKeyCreate, k.ID, keyCreateDetail(k))
	if as, ok := m.Store.(AuditedKeyStore); ok && m.Projects != nil {
		err = as.CreateKeyAudited(ctx, k, e)
	} else if err = m.Store.CreateKey(ctx, k); err == nil {
		err = m.appendAudit(ctx, e)
	}
	if err != nil {
		if IsProjectNotFound(err) { // the project went away meanwhile
			return nil, invalid("%v; create it first", err)
		}
		return nil, m.report("create key", err)
	}
	return &Created{Key: k, Secret: secret}, m.report("create key "+k.ID+": reading it back", m.Cache.Refresh(ctx))
}

// keyCreateDetail says what a new key is: its name, and its project and limits when set.
func keyCreateDetail(k *Key) string {
	parts := []string{"name " + strconv.QuoteToGraphic(k.Name)}
	if k.ProjectID != "" {
		parts = append(parts, "project "+k.ProjectID)
	}
	if len(k.Models) > 0 {
		parts = append(parts, "models "+strings.Join(k.Models, ", "))
	}
	if k.Limits != nil {
		parts = append(parts, DescribeLimits(k.Limits))
	}
	return strings.Join(parts, "; ")
}

// Rotated is the result of a rotation: the replacement with its secret, and the old key
// as it now is (revoked, or expiring at the end of the grace period).
type Rotated struct {
	Created
	Replaced *Key `json:"replaced"`
}

// Rotate replaces a key with a new one of the same name, models, project and limits.
// The old key stops working at once, or after grace.
func (m *Manager) Rotate(ctx context.Context, id string, grace time.Duration) (*Rotated, error) {
	if grace < 0 {
		return nil, invalid("grace: must not be negative")
	}
	old, err := m.Store.GetKey(ctx, id)
	if err != nil {
		return nil, m.report("rotate key "+loggableID(id), err)
	}
	now := m.now()
	if !old.Active(now) {
		return nil, invalid("key %s is %s; only an active key can be rotated", id, old.Status(now))
	}
	if old.ReplacedBy != "" {
		return nil, invalid("key %s was already replaced by %s; rotate that one instead", id, old.ReplacedBy)
	}
	k, secret, err := m.newKey(CreateRequest{Name: old.Name, Models: old.Models, ExpiresAt: old.ExpiresAt}, now)
	if err != nil {
		return nil, err
	}
	// The replacement carries the project and limits as stored, not re-checked: a
	// rotation must not fail because a model named in a limit was removed since.
	k.ProjectID, k.Limits, k.Owner = old.ProjectID, old.Limits, old.Owner
	detail := "replaced by " + k.ID + "; the old key "
	if grace == 0 {
		detail += "is revoked now"
	} else {
		detail += "keeps working for " + grace.String()
	}
	e := m.NewAuditEntry(ctx, ActionKeyRotate, id, detail)
	var replaced *Key
	if as, ok := m.Store.(AuditedKeyStore); ok && m.Projects != nil {
		replaced, err = as.RotateKeyAudited(ctx, id, k, now, grace, e)
	} else if replaced, err = m.Store.RotateKey(ctx, id, k, now, grace); err == nil {
		err = m.appendAudit(ctx, e)
	}
	if err != nil {
		return nil, m.report("rotate key "+loggableID(id), err)
	}
	return &Rotated{Created: Created{Key: k, Secret: secret}, Replaced: replaced},
		m.report("rotate key "+loggableID(id)+": reading it back", m.Cache.Refresh(ctx))
}

// Revoke ends a key now. Revoking a revoked key changes (and records) nothing.
func (m *Manager) Revoke(ctx context.Context, id string) (*Key, error) {
	var err error
	if as, ok := m.Store.(AuditedKeyStore); ok && m.Projects != nil {
		_, err = as.RevokeKeyAudited(ctx, id, m.now(), m.NewAuditEntry(ctx, ActionKeyRevoke, id, "revoked"))
	} else {
		var before *Key
		if m.Projects != nil {
			before, _ = m.Store.GetKey(ctx, id)
		}
		if err = m.Store.RevokeKey(ctx, id, m.now()); err == nil && before != nil && before.RevokedAt.IsZero() {
			err = m.appendAudit(ctx, m.NewAuditEntry(ctx, ActionKeyRevoke, id, "revoked"))
		}
	}
	if err != nil {
		return nil, m.report("revoke key "+loggableID(id), err)
	}
	if err := m.Cache.Refresh(ctx); err != nil {
		return nil, m.report("revoke key "+loggableID(id)+": reading it back", err)
	}
	k, err := m.Store.GetKey(ctx, id)
	return k, m.report("revoke key "+loggableID(id)+": reading it back", err)
}

// Get returns one key.
func (m *Manager) Get(ctx context.Context, id string) (*Key, error) {
	k, err := m.Store.GetKey(ctx, id)
	return k, m.report("get key "+loggableID(id), err)
}

// List returns every key, newest first.
func (m *Manager) List(ctx context.Context) ([]*Key, error) {
	keys, err := m.Store.ListKeys(ctx)
	return keys, m.report("list keys", err)
}

// IsInvalid reports an error the operator must correct (400), as opposed to a missing
// key (404) or a failure of the store (500).
func IsInvalid(err error) bool {
	var inv *InvalidError
	return errors.As(err, &inv)
}
