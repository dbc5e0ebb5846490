package auth

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"time"

	"github.com/switchyard-gw/switchyard/limits"
)

// KeyPrefix starts every generated key, so that a leaked key is recognisable (and secret
// scanners can be taught it).
const KeyPrefix = "sk-sy-"

// displayPrefixLen is how much of a key is kept in clear to tell keys apart in lists.
const displayPrefixLen = len(KeyPrefix) + 6

// keyEncoding is lower-case base32 without padding: no characters that need quoting in
// a shell or a header, and no look-alikes that matter for a machine-read secret.
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// GenerateSecret returns a new key: the prefix and 32 random bytes (256 bits).
func GenerateSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return KeyPrefix + keyEncoding.EncodeToString(b[:]), nil
}

// NewKeyID returns a new public key id ("key_" and 16 random characters).
func NewKeyID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "key_" + keyEncoding.EncodeToString(b[:])
}

// DisplayPrefix is the part of a secret kept in clear: enough to recognise a key in a
// list, far too little to use it.
func DisplayPrefix(secret string) string {
	if len(secret) <= displayPrefixLen {
		return secret[:min(len(secret), len(KeyPrefix))]
	}
	return secret[:displayPrefixLen]
}

// Key is a stored API key. The secret itself is never stored: only its hash and a short
// display prefix.
type Key struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Prefix string   `json:"prefix"`
	Hash   Hash     `json:"-"`
	Models []string `json:"models,omitempty"` // empty: every model
	// CreatedAt, LastUsedAt, ExpiresAt and RevokedAt are zero when unset.
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
	// ReplacedBy is the id of the key that replaced this one in a rotation.
	ReplacedBy string `json:"replaced_by,omitempty"`
	// ProjectID is the project the key belongs to; empty: none.
	ProjectID string `json:"project_id,omitempty"`
	// Owner is who the key belongs to: a person's user id ("usr_…", see package
	// access), a service account ("svc:<name>"), or empty for a key made by the
	// operator without one. It never changes; a rotation's replacement keeps it.
	Owner string `json:"owner,omitempty"`
	// Limits are the key's own limits; nil: none of its own.
	Limits *limits.Policy `json:"limits,omitempty"`
	// Seq orders changes: every write to a key gives it the store's next sequence
	// number, so that gateways sharing a store pick up exactly what changed.
	Seq int64 `json:"-"`
}

// Active reports whether the key may be used at now.
func (k *Key) Active(now time.Time) bool {
	return k.RevokedAt.IsZero() && (k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt))
}

// Status is "active", "expired" or "revoked".
func (k *Key) Status(now time.Time) string {
	switch {
	case !k.RevokedAt.IsZero():
		return "revoked"
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return "expired"
	}
	return "active"
}

// ErrNotFound is returned for a key id the store does not have; a *NotFoundError (a
// project, a key named as such) errors.Is it too.
var ErrNotFound = errors.New("no such key")

// ErrConflict is returned for a write that clashes with what is stored: a key already
// replaced, or two rotations of one key at once.
var ErrConflict = errors.New("conflict with the stored key")

// KeyStore keeps keys. Implementations (SQLite, PostgreSQL) live in package store.
// Every method that changes a key gives it a new Seq.
type KeyStore interface {
	// CreateKey stores a new key (ID, Hash, Prefix, Name, Models, CreatedAt, ExpiresAt,
	// ProjectID and Limits set).
	CreateKey(ctx context.Context, k *Key) error
	// GetKey returns one key by id, or ErrNotFound.
	GetKey(ctx context.Context, id string) (*Key, error)
	// ListKeys returns every key, newest first.
	ListKeys(ctx context.Context) ([]*Key, error)
	// RevokeKey marks a key revoked at the given time. Revoking a revoked key changes
	// nothing (its first time and Seq stay).
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// RotateKey stores replacement as a new key and, in the same transaction, ends the
	// old one: revoked at `at` when grace is zero, otherwise expiring at at+grace (never
	// later than an expiry it already had). It returns the old key as it now is. A key
	// already replaced cannot be rotated again (ErrConflict).
	RotateKey(ctx context.Context, oldID string, replacement *Key, at time.Time, grace time.Duration) (*Key, error)
	// ChangedSince returns the keys whose Seq is greater than seq, in Seq order.
	ChangedSince(ctx context.Context, seq int64) ([]*Key, error)
	// TouchKeys records last-used times (batched by the caller).
	TouchKeys(ctx context.Context, lastUsed map[string]time.Time) error
	// Close releases the store.
	Close() error
}

// ValidateName checks a key's name: the rule is CheckKeyName's (keyname.go).
func ValidateName(name string) error {
	_, err := CheckKeyName(name)
	return err
}
