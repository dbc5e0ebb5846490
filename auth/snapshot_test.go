package auth

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeStore is a KeyStore in memory that can be taken down. It keeps the last-used
// times written to it, and the seq of each ChangedSince call.
type fakeStore struct {
	mu       sync.Mutex
	down     bool
	seq      int64
	keys     map[string]*Key
	lastUsed map[string]time.Time // every successful TouchKeys, merged
	touches  int                  // TouchKeys calls, failed ones included
	sinces   []int64              // ChangedSince's argument, call by call
}

var errDown = errors.New("connection refused")

func newFakeStore() *fakeStore {
	return &fakeStore{keys: map[string]*Key{}, lastUsed: map[string]time.Time{}}
}

func (s *fakeStore) setDown(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

// add stores a new key and returns its secret.
func (s *fakeStore) add(t *testing.T, name string, models ...string) (string, *Key) {
	t.Helper()
	secret, err := GenerateSecret()
	require.NoError(t, err)
	k := &Key{ID: NewKeyID(), Name: name, Prefix: DisplayPrefix(secret), Hash: HashKey(secret), Models: models, CreatedAt: time.Now()}
	require.NoError(t, s.CreateKey(context.Background(), k))
	return secret, k
}

func (s *fakeStore) CreateKey(_ context.Context, k *Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	s.seq++
	k.Seq = s.seq
	c := *k
	s.keys[k.ID] = &c
	return nil
}

func (s *fakeStore) GetKey(_ context.Context, id string) (*Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errDown
	}
	k, ok := s.keys[id]
	if !ok {
		return nil, ErrNotFound
	}
	c := *k
	return &c, nil
}

func (s *fakeStore) ListKeys(context.Context) ([]*Key, error) { return nil, errors.New("not used") }

func (s *fakeStore) RevokeKey(_ context.Context, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errDown
	}
	k, ok := s.keys[id]
	if !ok {
		return ErrNotFound
	}
	s.seq++
	k.Seq, k.RevokedAt = s.seq, at
	return nil
}

func (s *fakeStore) RotateKey(context.Context, string, *Key, time.Time, time.Duration) (*Key, error) {
	return nil, errors.New("not used")
}

func (s *fakeStore) ChangedSince(_ context.Context, seq int64) ([]*Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinces = append(s.sinces, seq)
	if s.down {
		return nil, errDown
	}
	var out []*Key
	for _, k := range s.keys {
		if k.Seq > seq {
			c := *k
			out = append(out, &c)
		}
	}
	slices.SortFunc(out, func(a, b *Key) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

func (s *fakeStore) TouchKeys(_ context.Context, lastUsed map[string]time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.touches++
	if s.down {
		return errDown
	}
	for id, t := range lastUsed {
		if t.After(s.lastUsed[id]) {
			s.lastUsed[id] = t
		}
	}
	return nil
}

func (s *fakeStore) Close() error { return nil }

// logLines collects what a cache logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) log(msg string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		msg += ": " + err.Error()
	}
	l.lines = append(l.lines, msg)
}

func (l *logLines) all() string { l.mu.Lock(); defer l.mu.Unlock(); return strings.Join(l.lines, "\n") }

func TestSnapshotIsWrittenAndReloaded(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	path := filepath.Join(t.TempDir(), "state", "keys.snapshot")
	opts := CacheOptions{Snapshot: path, StoreID: "db-1"}

	limitedSecret, limited := store.add(t, "limited", "model-a", "model-b")
	revokedSecret, revoked := store.add(t, "revoked")
	expiringSecret, expiring := store.add(t, "expiring")
	store.keys[expiring.ID].ExpiresAt = time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	require.NoError(t, store.RevokeKey(ctx, revoked.ID, time.Now()))

	first := OpenCache(ctx, store, opts)
	require.Equal(t, 2, first.Len())
	info, err := os.Stat(path)
	require.NoError(t, err, "the snapshot is written when the cache loads")
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "readable by its owner only, like the SQLite file")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, secret := range []string{limitedSecret, revokedSecret, expiringSecret} {
		assert.NotContains(t, string(raw), secret)
		assert.NotContains(t, string(raw), DisplayPrefix(secret), "not even the display prefix")
	}
	assert.NotContains(t, string(raw), revoked.ID, "a revoked key is not in the snapshot at all")
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*.tmp"))
	assert.Empty(t, leftovers, "no temporary file is left behind")

	// A new start with the store down serves the snapshot.
	store.setDown(true)
	var logs logLines
	opts.Log = logs.log
	second := OpenCache(ctx, store, opts)
	assert.Contains(t, logs.all(), "(2 stored keys, 0 projects)")
	id, ok := second.Verify(limitedSecret)
	require.True(t, ok)
	assert.Equal(t, limited.ID, id.KeyID)
	assert.Equal(t, "limited", id.Name)
	assert.True(t, id.MayCall("model-b"))
	assert.False(t, id.MayCall("model-c"), "the allowlist comes back with the key")
	_, ok = second.Verify(expiringSecret)
	assert.True(t, ok)
	_, ok = second.Verify(revokedSecret)
	assert.False(t, ok, "a revoked key stays revoked")
	_, ok = second.Verify("sk-sy-not-a-key-of-this-store-at-all-000000")
	assert.False(t, ok)

	// Another store's snapshot is not served.
	logs = logLines{}
	other := OpenCache(ctx, store, CacheOptions{Snapshot: path, StoreID: "db-2", Log: logs.log})
	assert.Zero(t, other.Len())
	assert.Contains(t, logs.all(), "another store")

	// A damaged snapshot is not served either, and does not stop the start.
	require.NoError(t, os.WriteFile(path, []byte(`{"version":1,"store":"db-1","keys":[{"id":"k","sha256":"zz"}]}`), 0o600))
	logs = logLines{}
	damaged := OpenCache(ctx, store, CacheOptions{Snapshot: path, StoreID: "db-1", Log: logs.log})
	assert.Zero(t, damaged.Len())
	assert.Contains(t, logs.all(), "unusable")
}

// A gateway-side cache that starts with the store down serves the snapshot's keys,
// refuses others, and once the store answers takes every change made meanwhile:
// keys revoked stop, keys created start, and the snapshot follows.
func TestCacheStartedWithTheStoreDownCatchesUp(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	path := filepath.Join(t.TempDir(), "keys.snapshot")
	opts := CacheOptions{Snapshot: path, StoreID: "db"}
	keepSecret, _ := store.add(t, "keep")
	goneSecret, gone := store.add(t, "gone")
	_ = OpenCache(ctx, store, opts) // a run of the gateway that wrote the snapshot

	// Meanwhile, elsewhere: one key revoked, one created. Then the store goes away
	// and this gateway starts.
	require.NoError(t, store.RevokeKey(ctx, gone.ID, time.Now()))
	newSecret, _ := store.add(t, "new")
	store.setDown(true)
	c := OpenCache(ctx, store, opts)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx, 10*time.Millisecond, time.Hour, nil)
	}()
	t.Cleanup(func() { stop(); <-done })

	_, ok := c.Verify(keepSecret)
	assert.True(t, ok, "a key from the snapshot")
	_, ok = c.Verify(goneSecret)
	assert.True(t, ok, "the snapshot cannot know of a revocation made while this gateway was down")
	_, ok = c.Verify(newSecret)
	assert.False(t, ok, "nor of a key made meanwhile")
	assert.Error(t, c.Refresh(ctx))

	store.setDown(false)
	require.Eventually(t, func() bool {
		_, okNew := c.Verify(newSecret)
		_, okGone := c.Verify(goneSecret)
		return okNew && !okGone
	}, 5*time.Second, 5*time.Millisecond, "the store's changes are taken once it answers")
	_, ok = c.Verify(keepSecret)
	assert.True(t, ok)

	// The snapshot is rewritten just after the cache changes.
	require.Eventually(t, func() bool {
		raw, err := os.ReadFile(path)
		return err == nil && !strings.Contains(string(raw), gone.ID) && strings.Count(string(raw), `"sha256"`) == 2
	}, 5*time.Second, 5*time.Millisecond, "the snapshot follows the cache")
}

func TestManagerLogsEachFailedCallOnce(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	cache := OpenCache(ctx, store, CacheOptions{})
	var calls []string
	m := &Manager{Store: store, Cache: cache, OnError: func(call string, err error) {
		calls = append(calls, call+": "+err.Error())
	}}
	_, err := m.Get(ctx, "key_aaaa")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = m.Create(ctx, CreateRequest{Name: ""})
	assert.True(t, IsInvalid(err))
	assert.Empty(t, calls, "the caller's mistakes are not the gateway's failures")

	store.setDown(true)
	_, err = m.Create(ctx, CreateRequest{Name: "ci"})
	require.Error(t, err)
	_, err = m.Revoke(ctx, "key_abcdef")
	require.Error(t, err)
	_, err = m.Get(ctx, "sk-sy-pastedbymistake\x1b[31m")
	require.Error(t, err)
	require.Len(t, calls, 3)
	assert.Equal(t, "create key: connection refused", calls[0])
	assert.Equal(t, "revoke key key_abcdef: connection refused", calls[1])
	assert.NotContains(t, calls[2], "sk-sy-", "an id that is not a key id is not written out")
	assert.NotContains(t, calls[2], "\x1b")
}
