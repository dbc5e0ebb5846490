package signin

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"sync"
	"time"
)

// newSealer derives an AES-256-GCM key from the client secret for one purpose (info):
// a database dump alone does not open a stored refresh token, and a state cookie is
// opened only by a gateway configured with the same client.
func newSealer(clientSecret, info string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(clientSecret), []byte("switchyard sign-in"), info, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts plain bound to context (what it belongs to: a session id, a cookie's
// purpose), with a random nonce in front.
func seal(a cipher.AEAD, plain, context []byte) []byte {
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return a.Seal(nonce, nonce, plain, context)
}

var errUnsealed = errors.New("sealed value does not open")

// unseal opens what seal made for the same context.
func unseal(a cipher.AEAD, sealed, context []byte) ([]byte, error) {
	if len(sealed) < a.NonceSize()+a.Overhead() {
		return nil, errUnsealed
	}
	plain, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], context)
	if err != nil {
		return nil, errUnsealed
	}
	return plain, nil
}

// maxPendingStates bounds how many finished sign-ins a gateway remembers to refuse
// their replay: at one sign-in a second per gateway, over the ten minutes a state lives,
// 600; the bound leaves room for bursts.
const maxPendingStates = 10000

// usedStates remembers the states of callbacks already taken, until the state would
// have expired anyway, so that a callback is accepted once. Past its bound it forgets
// the oldest first: a replay of that one still meets the provider, which refuses an
// authorization code used twice.
type usedStates struct {
	mu    sync.Mutex
	max   int
	seen  map[[sha256.Size]byte]time.Time
	order [][sha256.Size]byte // oldest first
}

func newUsedStates(max int) *usedStates {
	return &usedStates{max: max, seen: map[[sha256.Size]byte]time.Time{}}
}

// claim records state as used until expires; false when it was used already.
func (u *usedStates) claim(state string, now, expires time.Time) bool {
	h := sha256.Sum256([]byte(state))
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.seen[h]; ok {
		return false
	}
	// Forget expired states (and, when still full, the oldest), oldest first.
	for len(u.order) > 0 {
		first := u.order[0]
		if until, ok := u.seen[first]; ok && now.Before(until) && len(u.seen) < u.max {
			break
		}
		delete(u.seen, first)
		u.order = u.order[1:]
	}
	u.seen[h] = expires
	u.order = append(u.order, h)
	return true
}
