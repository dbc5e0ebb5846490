package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"time"

	"github.com/switchyard-gw/switchyard/auth"
)

// User is a person who has signed in through the OpenID provider.
type User struct {
	// ID is ours ("usr_" and 16 characters), stable for (Issuer, Subject).
	ID      string `json:"id"`
	Issuer  string `json:"issuer"`
	Subject string `json:"subject"`
	Email   string `json:"email,omitempty"`
	Name    string `json:"name,omitempty"`
	// Groups are the provider's groups at the last sign-in (only those the mapping
	// names are kept).
	Groups []string `json:"groups,omitempty"`
	// Grants are what the mapping gave at the last sign-in.
	Grants      []Grant   `json:"grants"`
	CreatedAt   time.Time `json:"created_at"`
	LastSignIn  time.Time `json:"last_sign_in,omitzero"`
	DisabledAt  time.Time `json:"disabled_at,omitzero"`
	DisabledWhy string    `json:"disabled_why,omitempty"`
}

// Session is a signed-in browser: a person through the provider, or the operator through
// the break-glass password. Only the hash of its secret is stored.
type Session struct {
	// ID is public ("ses_…"), for listing and ending sessions; the secret is the cookie.
	ID   string `json:"id"`
	Hash Secret `json:"-"`
	// UserID is the person's (KindUser), empty for break-glass.
	UserID string `json:"user_id,omitempty"`
	Kind   Kind   `json:"kind"`
	// Name is the break-glass user's name (KindBreakGlass).
	Name string `json:"name,omitempty"`
	// Grants are the session's, fixed at sign-in.
	Grants     []Grant   `json:"grants"`
	Addr       string    `json:"addr,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	LastSeenAt time.Time `json:"last_seen_at"`
	// ExpiresAt is the absolute end; the idle end is LastSeenAt plus the idle lifetime.
	ExpiresAt time.Time `json:"expires_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Refresh is the provider's refresh token, sealed (see Sealer); nil without one.
	Refresh []byte `json:"-"`
	// CheckedAt is when the provider last vouched for the person (sign-in or refresh).
	CheckedAt time.Time `json:"checked_at,omitzero"`
}

// Token is an API token for automation: a grant, a name, an expiry. Only the hash of its
// secret is stored; the secret is shown once.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Prefix    string    `json:"prefix"`
	Hash      Secret    `json:"-"`
	Grant     Grant     `json:"grant"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	LastUsed  time.Time `json:"last_used_at,omitzero"`
}

// Active reports whether t may be used at now.
func (t *Token) Active(now time.Time) bool {
	return t.RevokedAt.IsZero() && now.Before(t.ExpiresAt)
}

// Secret is the SHA-256 of a session's or a token's secret.
type Secret [sha256.Size]byte

// HashSecret hashes a secret as it is stored and looked up.
func HashSecret(s string) Secret { return sha256.Sum256([]byte(s)) }

// ErrNotFound is a user, session or token the store does not have.
var ErrNotFound = errors.New("not found")

// Store keeps people, sessions and tokens, shared by every gateway on one database.
// *store.Store implements it. A method that takes an audit entry commits the entry with
// the change, in one transaction (nil: none; the store sets its ID and, when zero, At).
type Store interface {
	// SaveUser stores a sign-in: it finds the user by (Issuer, Subject), or creates one
	// with a new ID, and updates Email, Name, Groups, Grants and LastSignIn. It returns
	// the user as stored (DisabledAt set when the person was disabled).
	SaveUser(ctx context.Context, u *User) (*User, error)
	// GetUser returns one user by ID, or ErrNotFound.
	GetUser(ctx context.Context, id string) (*User, error)
	// ListUsers returns every user, by e-mail.
	ListUsers(ctx context.Context) ([]*User, error)
	// DisableUser marks a user disabled (why says so) and ends every session of theirs;
	// an already disabled user changes nothing.
	DisableUser(ctx context.Context, id, why string, at time.Time, e *auth.AuditEntry) error
	// EnableUser lifts a user's disablement.
	EnableUser(ctx context.Context, id string, e *auth.AuditEntry) error

	// CreateSession stores a new session.
	CreateSession(ctx context.Context, s *Session, e *auth.AuditEntry) error
	// SessionByHash returns the session of a secret, or ErrNotFound (ended ones too:
	// the caller checks RevokedAt and the lifetimes).
	SessionByHash(ctx context.Context, h Secret) (*Session, error)
	// TouchSession records that a session was used at (and, when checked is not zero,
	// that the provider vouched again, with refresh the new sealed refresh token).
	TouchSession(ctx context.Context, id string, at, checked time.Time, refresh []byte) error
	// RevokeSession ends one session.
	RevokeSession(ctx context.Context, id string, at time.Time, e *auth.AuditEntry) error
	// ListSessions returns the sessions that are neither revoked nor past expiresAfter,
	// newest first.
	ListSessions(ctx context.Context, expiresAfter time.Time) ([]*Session, error)

	// CreateToken stores a new token.
	CreateToken(ctx context.Context, t *Token, e *auth.AuditEntry) error
	// TokenByHash returns the token of a secret, or ErrNotFound.
	TokenByHash(ctx context.Context, h Secret) (*Token, error)
	// TouchToken records that a token was used at.
	TouchToken(ctx context.Context, id string, at time.Time) error
	// ListTokens returns every token, newest first.
	ListTokens(ctx context.Context) ([]*Token, error)
	// RevokeToken ends a token; revoking a revoked one changes nothing.
	RevokeToken(ctx context.Context, id string, at time.Time, e *auth.AuditEntry) error
}

// idEncoding is lower-case base32 without padding, as key ids use.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a new public id: prefix ("usr_", "ses_", "tok_") and 16 random
// characters.
func NewID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + idEncoding.EncodeToString(b[:])
}

// TokenPrefix starts every API token, so that a leaked one is recognisable and is never
// mistaken for a gateway key (sk-sy-).
const TokenPrefix = "syt_"

// NewSecret returns a new random secret (256 bits) with prefix.
func NewSecret(prefix string) string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return prefix + idEncoding.EncodeToString(b[:])
}
