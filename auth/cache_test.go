package auth

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testClock is a cache's time, moved by the test.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// t1 is where a test's clock starts.
var t1 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// clockedCache is a cache over store on a clock of the test's, loaded once.
func clockedCache(t *testing.T, store KeyStore, clk *testClock) *Cache {
	t.Helper()
	c := newCache(store, CacheOptions{})
	c.now = clk.now
	require.NoError(t, c.Refresh(context.Background()))
	return c
}

// setExpiry changes a stored key's expiry, as a rotation with grace does: the key
// gets the next sequence number.
func (s *fakeStore) setExpiry(id string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.keys[id].ExpiresAt, s.keys[id].Seq = at, s.seq
}

func (s *fakeStore) lastSince() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sinces[len(s.sinces)-1]
}

func (s *fakeStore) written() (map[string]time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.lastUsed))
	for id, t := range s.lastUsed {
		out[id] = t
	}
	return out, s.touches
}

func accepted(c *Cache, secret string) bool {
	_, ok := c.Verify(secret)
	return ok
}

// A cached key stops being accepted at its expiry, to the instant, without the store
// being asked: the cache holds the expiry itself. A key already expired when the cache
// loads is not held at all, and an expiry set later (a rotation's grace) is taken on
// the next poll.
func TestACachedKeyStopsAtItsExpiry(t *testing.T) {
	store := newFakeStore()
	clk := &testClock{t: t1}
	expiringSecret, expiring := store.add(t, "expiring")
	store.setExpiry(expiring.ID, t1.Add(time.Hour))
	laterSecret, later := store.add(t, "later")
	c := clockedCache(t, store, clk)
	store.setDown(true) // from here on only the cache decides

	assert.True(t, accepted(c, expiringSecret))
	clk.set(t1.Add(time.Hour - time.Microsecond))
	assert.True(t, accepted(c, expiringSecret), "a microsecond before its expiry")
	clk.set(t1.Add(time.Hour))
	assert.False(t, accepted(c, expiringSecret), "at its expiry")
	clk.set(t1.Add(48 * time.Hour))
	assert.False(t, accepted(c, expiringSecret), "after it")
	assert.True(t, accepted(c, laterSecret), "a key with no expiry")

	// A cache loaded after the expiry does not hold the key.
	store.setDown(false)
	fresh := clockedCache(t, store, clk)
	assert.Equal(t, 1, fresh.Len())
	assert.False(t, accepted(fresh, expiringSecret))

	// An expiry given to a key later reaches the cache with the next poll.
	store.setExpiry(later.ID, t1.Add(49*time.Hour))
	require.NoError(t, fresh.Refresh(context.Background()))
	assert.True(t, accepted(fresh, laterSecret))
	clk.set(t1.Add(49 * time.Hour))
	assert.False(t, accepted(fresh, laterSecret))
}

// While the store cannot be read the cache goes on with what it holds: every key it
// held is still accepted, however many polls fail, and each failure is reported. Once
// the store answers, the changes made meanwhile arrive by the usual poll (from the
// last change seen, not a reload).
func TestTheCacheCarriesOnWhileTheStoreIsUnreachable(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	aSecret, a := store.add(t, "a")
	bSecret, _ := store.add(t, "b")
	c := clockedCache(t, store, &testClock{t: t1})
	seen := store.seq

	store.setDown(true)
	assert.ErrorIs(t, c.Refresh(ctx), errDown)
	var mu sync.Mutex
	var failures []error
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(runCtx, 5*time.Millisecond, time.Hour, func(err error) { mu.Lock(); failures = append(failures, err); mu.Unlock() })
	}()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(failures) >= 5 },
		5*time.Second, 5*time.Millisecond, "several failed polls")
	assert.True(t, accepted(c, aSecret), "kept through the outage")
	assert.True(t, accepted(c, bSecret), "kept through the outage")
	assert.Equal(t, 2, c.Len())
	mu.Lock()
	for _, err := range failures {
		assert.ErrorIs(t, err, errDown)
	}
	mu.Unlock()

	store.setDown(false)
	require.NoError(t, store.RevokeKey(ctx, a.ID, time.Now()))
	cSecret, _ := store.add(t, "c")
	require.Eventually(t, func() bool { return !accepted(c, aSecret) && accepted(c, cSecret) },
		5*time.Second, 5*time.Millisecond, "the changes made meanwhile")
	assert.True(t, accepted(c, bSecret))
	store.mu.Lock()
	for _, since := range store.sinces[1:] {
		assert.GreaterOrEqual(t, since, seen, "polls ask for changes after the last one seen, not for everything")
	}
	store.mu.Unlock()
}

// Last-used times whose write fails are kept and written by a later flush, with the
// latest use; nothing is written when nothing was used; the last flush, when Run
// ends, writes what is left.
func TestLastUsedTimesOutliveAFailedWrite(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	clk := &testClock{t: t1}
	aSecret, a := store.add(t, "a")
	bSecret, b := store.add(t, "b")
	c := clockedCache(t, store, clk)

	require.True(t, accepted(c, aSecret))
	store.setDown(true)
	assert.ErrorIs(t, c.FlushTouched(ctx), errDown)
	clk.set(t1.Add(30 * time.Second))
	require.True(t, accepted(c, aSecret))
	clk.set(t1.Add(time.Minute))
	require.True(t, accepted(c, bSecret))
	assert.ErrorIs(t, c.FlushTouched(ctx), errDown)
	got, _ := store.written()
	assert.Empty(t, got)

	store.setDown(false)
	require.NoError(t, c.FlushTouched(ctx))
	got, touches := store.written()
	assert.Equal(t, map[string]time.Time{a.ID: t1.Add(30 * time.Second), b.ID: t1.Add(time.Minute)}, got,
		"the times of the failed writes, each key's latest")
	require.NoError(t, c.FlushTouched(ctx))
	_, again := store.written()
	assert.Equal(t, touches, again, "nothing used since: no write")

	// Run's last flush, when it is stopped, writes what was used since.
	clk.set(t1.Add(2 * time.Minute))
	require.True(t, accepted(c, bSecret))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx, time.Hour, time.Hour, nil) }()
	stop()
	<-done
	got, _ = store.written()
	assert.Equal(t, t1.Add(2*time.Minute), got[b.ID])
}

// A revocation reaches the cache with the next poll, which asks only for what changed
// since the last change seen; the other keys stay.
func TestARevocationIsTakenOnTheNextPoll(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	aSecret, a := store.add(t, "a")
	bSecret, b := store.add(t, "b")
	c := clockedCache(t, store, &testClock{t: t1})
	seen := store.seq

	require.NoError(t, store.RevokeKey(ctx, a.ID, t1))
	assert.True(t, accepted(c, aSecret), "the cache learns of it by polling, not before")
	require.NoError(t, c.Refresh(ctx))
	assert.Equal(t, seen, store.lastSince(), "the poll asks for the changes after the last one seen")
	assert.False(t, accepted(c, aSecret), "revoked at the next poll")
	assert.True(t, accepted(c, bSecret))
	assert.Equal(t, 1, c.Len())

	// The same through Run's polling.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx, 5*time.Millisecond, time.Hour, nil) }()
	t.Cleanup(func() { stop(); <-done })
	require.NoError(t, store.RevokeKey(ctx, b.ID, t1))
	require.Eventually(t, func() bool { return !accepted(c, bSecret) }, 5*time.Second, 5*time.Millisecond)
	assert.Zero(t, c.Len())
}
