package signin

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-gw/switchyard/access"
	"github.com/switchyard-gw/switchyard/auth"
)

// memStore is an access.Store in memory, for these tests only; it keeps what the real
// store keeps and counts the writes the tests bound.
type memStore struct {
	mu       sync.Mutex
	users    map[string]*access.User
	sessions map[string]*access.Session
	tokens   map[string]*access.Token
	audit    []auth.AuditEntry

	sessionTouches, tokenTouches int
}

func newMemStore() *memStore {
	return &memStore{users: map[string]*access.User{}, sessions: map[string]*access.Session{}, tokens: map[string]*access.Token{}}
}

func cloneUser(u *access.User) *access.User {
	c := *u
	c.Groups = slices.Clone(u.Groups)
	c.Grants = slices.Clone(u.Grants)
	return &c
}

func cloneSession(s *access.Session) *access.Session {
	c := *s
	c.Grants = slices.Clone(s.Grants)
	c.Refresh = slices.Clone(s.Refresh)
	return &c
}

func (m *memStore) record(e *auth.AuditEntry) {
	if e != nil {
		e.ID = int64(len(m.audit) + 1)
		m.audit = append(m.audit, *e)
	}
}

func (m *memStore) auditOf(action string) []auth.AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []auth.AuditEntry
	for _, e := range m.audit {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

func (m *memStore) SaveUser(_ context.Context, u *access.User) (*access.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, have := range m.users {
		if have.Issuer == u.Issuer && have.Subject == u.Subject {
			have.Email, have.Name, have.LastSignIn = u.Email, u.Name, u.LastSignIn
			have.Groups, have.Grants = slices.Clone(u.Groups), slices.Clone(u.Grants)
			return cloneUser(have), nil
		}
	}
	n := cloneUser(u)
	n.ID = access.NewID("usr_")
	n.CreatedAt = u.LastSignIn
	m.users[n.ID] = n
	return cloneUser(n), nil
}

func (m *memStore) GetUser(_ context.Context, id string) (*access.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[id]; ok {
		return cloneUser(u), nil
	}
	return nil, access.ErrNotFound
}

func (m *memStore) ListUsers(context.Context) ([]*access.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*access.User
	for _, u := range m.users {
		out = append(out, cloneUser(u))
	}
	return out, nil
}

func (m *memStore) DisableUser(_ context.Context, id, why string, at time.Time, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[id]
	if !ok {
		return access.ErrNotFound
	}
	if !u.DisabledAt.IsZero() {
		return nil
	}
	u.DisabledAt, u.DisabledWhy = at, why
	for _, s := range m.sessions {
		if s.UserID == id && s.RevokedAt.IsZero() {
			s.RevokedAt = at
		}
	}
	m.record(e)
	return nil
}

func (m *memStore) EnableUser(_ context.Context, id string, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[id]
	if !ok {
		return access.ErrNotFound
	}
	u.DisabledAt, u.DisabledWhy = time.Time{}, ""
	m.record(e)
	return nil
}

func (m *memStore) CreateSession(_ context.Context, s *access.Session, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessions[s.ID] = cloneSession(s)
	m.record(e)
	return nil
}

func (m *memStore) SessionByHash(_ context.Context, h access.Secret) (*access.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		if s.Hash == h {
			return cloneSession(s), nil
		}
	}
	return nil, access.ErrNotFound
}

func (m *memStore) TouchSession(_ context.Context, id string, at, checked time.Time, refresh []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return access.ErrNotFound
	}
	m.sessionTouches++
	s.LastSeenAt = at
	if !checked.IsZero() {
		s.CheckedAt = checked
		s.Refresh = slices.Clone(refresh)
	}
	return nil
}

func (m *memStore) RevokeSession(_ context.Context, id string, at time.Time, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return access.ErrNotFound
	}
	if s.RevokedAt.IsZero() {
		s.RevokedAt = at
	}
	m.record(e)
	return nil
}

func (m *memStore) ListSessions(_ context.Context, expiresAfter time.Time) ([]*access.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*access.Session
	for _, s := range m.sessions {
		if s.RevokedAt.IsZero() && s.ExpiresAt.After(expiresAfter) {
			out = append(out, cloneSession(s))
		}
	}
	return out, nil
}

func (m *memStore) CreateToken(_ context.Context, t *access.Token, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *t
	m.tokens[t.ID] = &c
	m.record(e)
	return nil
}

func (m *memStore) TokenByHash(_ context.Context, h access.Secret) (*access.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range m.tokens {
		if t.Hash == h {
			c := *t
			return &c, nil
		}
	}
	return nil, access.ErrNotFound
}

func (m *memStore) TouchToken(_ context.Context, id string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[id]
	if !ok {
		return access.ErrNotFound
	}
	m.tokenTouches++
	t.LastUsed = at
	return nil
}

func (m *memStore) ListTokens(context.Context) ([]*access.Token, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*access.Token
	for _, t := range m.tokens {
		c := *t
		out = append(out, &c)
	}
	return out, nil
}

func (m *memStore) RevokeToken(_ context.Context, id string, at time.Time, e *auth.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tokens[id]
	if !ok {
		return access.ErrNotFound
	}
	if t.RevokedAt.IsZero() {
		t.RevokedAt = at
	}
	m.record(e)
	return nil
}

var _ access.Store = (*memStore)(nil)
