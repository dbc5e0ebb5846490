package auth

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the cache's background work.
const (
	// DefaultRefreshInterval bounds how long another gateway's change (a revocation)
	// takes to reach this one: well under the one second promised.
	DefaultRefreshInterval = 250 * time.Millisecond
	// DefaultTouchInterval is how often last-used times are written, in one batch.
	DefaultTouchInterval = 5 * time.Second
)

// cachedKey is a stored key as the request path sees it.
type cachedKey struct {
	identity  *Identity
	expiresAt time.Time
	// lastUsed is Unix seconds of the latest request; dirty says it is not written yet.
	lastUsed atomic.Int64
	dirty    atomic.Bool
}

// Cache verifies keys from a KeyStore without touching the store per request: every
// active key is held in memory by hash, and changes are picked up by sequence number.
type Cache struct {
	store KeyStore

	mu     sync.RWMutex
	byHash map[Hash]*cachedKey
	hashOf map[string]Hash // key id → hash, to drop a key that changed
	seq    int64

	refreshMu sync.Mutex // one refresh at a time

	touchMu sync.Mutex
	touched []*cachedKey
}

// NewCache loads every key of the store.
func NewCache(ctx context.Context, store KeyStore) (*Cache, error) {
	c := &Cache{store: store, byHash: map[Hash]*cachedKey{}, hashOf: map[string]Hash{}}
	return c, c.Refresh(ctx)
}

// Verify implements Verifier.
func (c *Cache) Verify(secret string) (*Identity, bool) {
	if secret == "" {
		return nil, false
	}
	return c.VerifyHash(HashKey(secret))
}

// VerifyHash implements HashVerifier.
func (c *Cache) VerifyHash(h Hash) (*Identity, bool) {
	c.mu.RLock()
	k, ok := c.byHash[h]
	c.mu.RUnlock()
	if !ok {
		return nil, false
	}
	now := time.Now()
	if !k.expiresAt.IsZero() && !now.Before(k.expiresAt) {
		return nil, false
	}
	k.lastUsed.Store(now.Unix())
	if k.dirty.CompareAndSwap(false, true) {
		c.touchMu.Lock()
		c.touched = append(c.touched, k)
		c.touchMu.Unlock()
	}
	return k.identity, true
}

// Refresh applies every change made to the store since the last refresh. It is called
// in the background and, after a change made through this gateway, at once.
func (c *Cache) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.mu.RLock()
	since := c.seq
	c.mu.RUnlock()
	changed, err := c.store.ChangedSince(ctx, since)
	if err != nil || len(changed) == 0 {
		return err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range changed {
		if old, ok := c.hashOf[k.ID]; ok {
			delete(c.byHash, old)
			delete(c.hashOf, k.ID)
		}
		if k.Active(now) {
			c.byHash[k.Hash] = &cachedKey{identity: identityOf(k), expiresAt: k.ExpiresAt}
			c.hashOf[k.ID] = k.Hash
		}
		c.seq = max(c.seq, k.Seq)
	}
	return nil
}

func identityOf(k *Key) *Identity {
	id := &Identity{KeyID: k.ID, Name: k.Name}
	if len(k.Models) > 0 {
		id.Models = make(map[string]bool, len(k.Models))
		for _, m := range k.Models {
			id.Models[m] = true
		}
	}
	return id
}

// Len is the number of usable keys held.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.byHash)
}

// FlushTouched writes the last-used times gathered since the previous flush.
func (c *Cache) FlushTouched(ctx context.Context) error {
	c.touchMu.Lock()
	batch := c.touched
	c.touched = nil
	c.touchMu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	times := make(map[string]time.Time, len(batch))
	for _, k := range batch {
		k.dirty.Store(false)
		times[k.identity.KeyID] = time.Unix(k.lastUsed.Load(), 0).UTC()
	}
	if err := c.store.TouchKeys(ctx, times); err != nil {
		// Keep the times for the next flush rather than lose them with the store away.
		for _, k := range batch {
			if k.dirty.CompareAndSwap(false, true) {
				c.touchMu.Lock()
				c.touched = append(c.touched, k)
				c.touchMu.Unlock()
			}
		}
		return err
	}
	return nil
}

// Run keeps the cache current and writes last-used times until ctx ends, then writes
// them one last time. onError is told of failures (the store being unreachable must not
// stop the gateway: it keeps verifying with what it has).
func (c *Cache) Run(ctx context.Context, refresh, touch time.Duration, onError func(error)) {
	refreshTick := time.NewTicker(refresh)
	touchTick := time.NewTicker(touch)
	defer refreshTick.Stop()
	defer touchTick.Stop()
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := c.FlushTouched(final); err != nil && onError != nil {
				onError(err)
			}
			cancel()
			return
		case <-refreshTick.C:
			if err := c.Refresh(ctx); err != nil && ctx.Err() == nil && onError != nil {
				onError(err)
			}
		case <-touchTick.C:
			if err := c.FlushTouched(ctx); err != nil && ctx.Err() == nil && onError != nil {
				onError(err)
			}
		}
	}
}

// HashVerifier resolves an already hashed key, so that a chain of verifiers hashes the
// presented key once.
type HashVerifier interface {
	VerifyHash(h Hash) (*Identity, bool)
}

// Verifiers tries several verifiers in turn (static keys from the configuration, then
// the store), hashing the key once for all of them.
type Verifiers []HashVerifier

// Verify implements Verifier.
func (vs Verifiers) Verify(secret string) (*Identity, bool) {
	if secret == "" {
		return nil, false
	}
	h := HashKey(secret)
	for _, v := range vs {
		if id, ok := v.VerifyHash(h); ok {
			return id, true
		}
	}
	return nil, false
}
