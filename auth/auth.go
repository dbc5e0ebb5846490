// Package auth turns the API key a client presents into the identity it stands for. A
// key is only ever held as its SHA-256 hash; the check per request is one hash and one
// map lookup. It knows nothing about Caddy.
package auth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/switchyard-gw/switchyard/limits"
)

// Identity is what a valid key resolves to.
type Identity struct {
	// KeyID is safe to log and to meter by; it is never the key itself.
	KeyID string
	Name  string
	// Models, when non-nil, is the set of service models the key may call; a key may not
	// see or call any other.
	Models map[string]bool
	// ProjectID is the key's project (empty: none); its limits come from
	// Cache.Project. Keys from the configuration have none.
	ProjectID string
	// Limits are the key's own limits (nil: none of its own). Shared: never modify.
	Limits *limits.Policy
	// Owner is the key's owner (see Key.Owner; empty: none). With ProjectID it names
	// one member's keys in one project, which the project's member rules
	// (Cache.Project(ProjectID).Members) hold together.
	Owner string
}

// MayCall reports whether the identity may use the service model.
func (id *Identity) MayCall(model string) bool {
	return id.Models == nil || id.Models[model]
}

// Hash is the stored form of a key.
type Hash [sha256.Size]byte

// HashKey hashes a presented key. Keys are long random strings, so a fast hash is the
// right one: there is nothing to brute-force that a slow hash would protect.
func HashKey(secret string) Hash {
	// Copying into a stack buffer keeps the per-request check free of allocation.
	var buf [128]byte
	if len(secret) <= len(buf) {
		n := copy(buf[:], secret)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(secret))
}

// KeyFromRequest reads the key from `Authorization: Bearer <key>` or `x-api-key: <key>`,
// the two styles both protocol families' clients use.
func KeyFromRequest(h http.Header) string {
	if v := h.Get("Authorization"); v != "" {
		if scheme, token, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			// An empty Bearer (some tools send one by default) must not hide x-api-key.
			if token = strings.TrimSpace(token); token != "" {
				return token
			}
		}
	}
	return strings.TrimSpace(h.Get("X-Api-Key"))
}

// MinKeyLength is the shortest key the gateway accepts (ErrWeakKey): a shorter value
// cannot be a key.
const MinKeyLength = 16

// keyHeaders are the request headers a gateway key may arrive in, and
// Proxy-Authorization, which a client may fill with the same secret. None is forwarded.
var keyHeaders = []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Proxy-Authorization"}

// TakeKeyHeaders removes every header a key may have come in, and appends to secrets
// each word of their values long enough to be a key (so "Bearer" and "Basic" are not):
// the key the client presented, and any other secret it put beside it. The headers go
// so that no later handler sees them; the secrets stay with the request so that a copy
// of the key in a header that is forwarded (a user agent string, a session id) is kept
// from the upstream (protocols.UpstreamRequestHeader).
func TakeKeyHeaders(h http.Header, secrets []string) []string {
	for _, name := range keyHeaders {
		for _, v := range h[name] {
			// Cut, not FieldsSeq, whose iterator is an allocation per value.
			for rest := v; rest != ""; {
				var word string
				word, rest, _ = strings.Cut(rest, " ")
				if word = strings.TrimSpace(word); len(word) >= MinKeyLength {
					secrets = append(secrets, word)
				}
			}
		}
		delete(h, name)
	}
	return secrets
}

// Verifier resolves keys to identities.
type Verifier interface {
	Verify(secret string) (*Identity, bool)
}

// StaticKeys is a fixed set of keys from configuration.
type StaticKeys struct {
	byHash map[Hash]*Identity
}

// StaticKey is one configured key.
type StaticKey struct {
	Name   string
	Secret string
	Models []string // empty: every model
	// Limits are the key's own limits; nil: the configured defaults.
	Limits *limits.Policy
}

// ErrWeakKey is returned for a configured key too short to be a real secret.
var ErrWeakKey = errors.New("key secret must be at least 16 characters")

// NewStaticKeys indexes configured keys by hash.
func NewStaticKeys(keys []StaticKey) (*StaticKeys, error) {
	s := &StaticKeys{byHash: make(map[Hash]*Identity, len(keys))}
	names := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k.Name == "" {
			return nil, fmt.Errorf("key: a name is required")
		}
		if names[k.Name] {
			// The name is the key id in logs and metering; two keys must not share it.
			return nil, fmt.Errorf("key %q: name used twice", k.Name)
		}
		names[k.Name] = true
		if len(k.Secret) < MinKeyLength {
			return nil, fmt.Errorf("key %q: %w", k.Name, ErrWeakKey)
		}
		h := HashKey(k.Secret)
		if _, dup := s.byHash[h]; dup {
			return nil, fmt.Errorf("key %q: the same secret is configured twice", k.Name)
		}
		id := &Identity{KeyID: "static:" + k.Name, Name: k.Name, Limits: k.Limits}
		if len(k.Models) > 0 {
			id.Models = make(map[string]bool, len(k.Models))
			for _, m := range k.Models {
				id.Models[m] = true
			}
		}
		s.byHash[h] = id
	}
	return s, nil
}

// Verify implements Verifier.
func (s *StaticKeys) Verify(secret string) (*Identity, bool) {
	if secret == "" {
		return nil, false
	}
	return s.VerifyHash(HashKey(secret))
}

// VerifyHash implements HashVerifier.
func (s *StaticKeys) VerifyHash(h Hash) (*Identity, bool) {
	id, ok := s.byHash[h]
	return id, ok
}
