package auth

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the cache's background work.
const (
	// DefaultRefreshInterval bounds how long another gateway's change (a revocation)
	// takes to reach this one: one interval plus a query, within the 400 ms docs/store-and-scale-out.md states.
	DefaultRefreshInterval = 250 * time.Millisecond
	// DefaultTouchInterval is how often last-used times are written, in one batch.
	DefaultTouchInterval = 5 * time.Second
	// refreshTimeout bounds one read of the store's changes: a database that stops
	// answering without closing the connection must not stall the cache.
	refreshTimeout = 5 * time.Second
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
	opts  CacheOptions
	now   func() time.Time // time.Now; a test's clock

	mu     sync.RWMutex
	byHash map[Hash]*cachedKey
	hashOf map[string]Hash // key id → hash, to drop a key that changed
	seq    int64
	// stale: what is held did not come from the store in this process (nothing yet,
	// or a snapshot), so the next refresh reads every key rather than the changes.
	stale bool

	// projects maps a project id to the project, replaced whole on each change (never
	// modified), so that Project reads it without a lock. projSeq and projStale are to
	// projects what seq and stale are to keys; they are guarded by mu.
	projects  atomic.Pointer[map[string]*Project]
	projSeq   int64
	projStale bool

	refreshMu sync.Mutex // one refresh at a time

	touchMu sync.Mutex
	touched []*cachedKey
}

// CacheOptions give a cache a snapshot to start from when its store is unreachable.
type CacheOptions struct {
	// Snapshot is the file the cache keeps a copy of its keys in (see snapshot.go);
	// empty: none.
	Snapshot string
	// StoreID names the store, so that a snapshot of another is never served. It must
	// not hold a password.
	StoreID string
	// Log is told about the snapshot: served at start, or a failure to read or write
	// it. err is nil for news that is not a failure.
	Log func(msg string, err error)
}

// NewCache loads every key of the store, and fails if the store cannot be read.
func NewCache(ctx context.Context, store KeyStore) (*Cache, error) {
	c := newCache(store, CacheOptions{})
	return c, c.Refresh(ctx)
}

func newCache(store KeyStore, opts CacheOptions) *Cache {
	if opts.Log == nil {
		opts.Log = func(string, error) {}
	}
	c := &Cache{store: store, opts: opts, now: time.Now, byHash: map[Hash]*cachedKey{}, hashOf: map[string]Hash{}, stale: true, projStale: true}
	c.projects.Store(&map[string]*Project{})
	return c
}

// Project returns a project the cache holds (the store's projects, or the snapshot's
// while the store is unreachable). It takes no lock; the project is shared: never
// modify it.
func (c *Cache) Project(id string) (*Project, bool) {
	p, ok := (*c.projects.Load())[id]
	return p, ok
}

// OpenCache loads every key of the store, as NewCache does, and keeps opts.Snapshot up
// to date from then on. When the store cannot be read, it does not fail: the cache
// starts with the keys of the snapshot (or none, when there is no usable snapshot;
// static keys from the configuration still work), and its first refresh that reaches
// the store replaces them with every key the store has.
func OpenCache(ctx context.Context, store KeyStore, opts CacheOptions) *Cache {
	c := newCache(store, opts)
	var (
		snap *snapshotState
		serr = errNoSnapshot
	)
	if opts.Snapshot != "" {
		// Read first: the snapshot's projects stand in until the store's are read, so
		// that a start whose keys' read succeeds and projects' read fails neither loses
		// the projects nor writes a snapshot without them.
		if snap, serr = readSnapshot(opts.Snapshot, opts.StoreID); serr == nil {
			c.projects.Store(&snap.projects)
		}
	}
	err := c.Refresh(ctx)
	if err == nil || opts.Snapshot == "" {
		return c
	}
	c.mu.RLock()
	keysLoaded := !c.stale
	c.mu.RUnlock()
	if keysLoaded {
		return c // the store's keys, and the snapshot's projects until its are read
	}
	switch {
	case errors.Is(serr, errNoSnapshot):
		c.opts.Log("key store unreachable and no key snapshot yet: only the configuration's keys work until it answers", err)
	case serr != nil:
		c.opts.Log("key store unreachable and the key snapshot is unusable: only the configuration's keys work until it answers", serr)
	default:
		c.mu.Lock()
		c.byHash, c.hashOf = snap.byHash, snap.hashOf
		c.mu.Unlock()
		c.opts.Log("key store unreachable: serving the key snapshot written "+snap.file.WrittenAt.Format(time.RFC3339)+
			" ("+strconv.Itoa(len(snap.byHash))+" stored keys, "+strconv.Itoa(len(snap.projects))+" projects) until it answers", nil)
	}
	return c
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
	now := c.now()
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

// Refresh applies every change made to the store since the last refresh: keys, and
// projects when the store is a ProjectStore (read after the keys, so that a project a
// key refers to is held). It is called in the background and, after a change made
// through this gateway, at once. The first refresh that reaches the store reads every
// key and project and replaces what was held (a snapshot's). After each change the
// snapshot, if any, is rewritten. When only the projects' read fails, the keys' changes
// are applied and the error returned; the projects are read again next time.
func (c *Cache) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	ps, hasProjects := c.store.(ProjectStore)
	c.mu.RLock()
	since, full := c.seq, c.stale
	projSince, projFull := c.projSeq, c.projStale && hasProjects
	c.mu.RUnlock()
	if full {
		since = 0
	}
	if projFull {
		projSince = 0
	}
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	changed, err := c.store.ChangedSince(rctx, since)
	if err != nil {
		return err
	}
	// Projects are read after the keys: a project a key refers to was stored before the
	// key was put in it, so it is in this read (or was in an earlier one).
	var (
		projects []*Project
		perr     error
	)
	if hasProjects {
		if projects, perr = ps.ProjectsChangedSince(rctx, projSince); perr != nil {
			projects, projFull = nil, false // the keys are applied; projects next time
		}
	}
	if len(changed) == 0 && !full && len(projects) == 0 && !projFull {
		return perr
	}
	now := c.now()
	c.mu.Lock()
	if full {
		c.byHash, c.hashOf, c.seq, c.stale = map[Hash]*cachedKey{}, map[string]Hash{}, 0, false
	}
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
	if projFull || len(projects) > 0 {
		next := make(map[string]*Project, len(*c.projects.Load())+len(projects))
		if projFull {
			c.projSeq, c.projStale = 0, false
		} else {
			for id, p := range *c.projects.Load() {
				next[id] = p
			}
		}
		for _, p := range projects {
			next[p.ID] = p
			c.projSeq = max(c.projSeq, p.Seq)
		}
		c.projects.Store(&next)
	}
	var snap *snapshotFile
	if c.opts.Snapshot != "" {
		snap = c.snapshotOf()
	}
	c.mu.Unlock()
	if snap != nil {
		if err := writeSnapshot(c.opts.Snapshot, snap); err != nil {
			c.opts.Log("writing the key snapshot (a start while the key store is unreachable would serve an older one)", err)
		}
	}
	return perr
}

func identityOf(k *Key) *Identity {
	id := &Identity{KeyID: k.ID, Name: k.Name, ProjectID: k.ProjectID, Limits: k.Limits, Owner: k.Owner}
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
