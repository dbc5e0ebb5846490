package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

// auth.Cache on top of a real store.

func TestCacheFollowsTheStore(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		s := f.open(t)
		secret, k := newKey(t, "app", time.Time{})
		k.Models = []string{"claude-sonnet"}
		require.NoError(t, s.CreateKey(ctx, k))
		revokedBefore, gone := newKey(t, "gone", time.Time{})
		require.NoError(t, s.CreateKey(ctx, gone))
		require.NoError(t, s.RevokeKey(ctx, gone.ID, time.Time{}))

		c, err := auth.NewCache(ctx, s)
		require.NoError(t, err)
		id, ok := c.Verify(secret)
		require.True(t, ok)
		assert.Equal(t, k.ID, id.KeyID)
		assert.True(t, id.MayCall("claude-sonnet"))
		assert.False(t, id.MayCall("gpt-5"))
		_, ok = c.Verify(revokedBefore)
		assert.False(t, ok, "a key revoked before the cache was built")

		require.NoError(t, s.RevokeKey(ctx, k.ID, time.Time{}))
		require.NoError(t, c.Refresh(ctx))
		_, ok = c.Verify(secret)
		assert.False(t, ok, "revoked, then refreshed")
		assert.Zero(t, c.Len())

		// Rotation with grace: both work until the old one expires; without grace the
		// old one stops at once.
		oldSecret, old := newKey(t, "rotating", time.Time{})
		require.NoError(t, s.CreateKey(ctx, old))
		newSecret, repl := newKey(t, "rotating", time.Time{})
		_, err = s.RotateKey(ctx, old.ID, repl, time.Time{}, time.Hour)
		require.NoError(t, err)
		require.NoError(t, c.Refresh(ctx))
		_, okOld := c.Verify(oldSecret)
		_, okNew := c.Verify(newSecret)
		assert.True(t, okOld && okNew, "within the grace period both keys work")

		newerSecret, newer := newKey(t, "rotating", time.Time{})
		_, err = s.RotateKey(ctx, repl.ID, newer, time.Time{}, 0)
		require.NoError(t, err)
		require.NoError(t, c.Refresh(ctx))
		_, okNew = c.Verify(newSecret)
		_, okNewer := c.Verify(newerSecret)
		assert.False(t, okNew, "rotated without grace")
		assert.True(t, okNewer)

		// The cache's last-used flush reaches the store without waking anyone.
		seq := maxSeq(t, s)
		require.NoError(t, c.FlushTouched(ctx))
		got, err := s.GetKey(ctx, newer.ID)
		require.NoError(t, err)
		assert.False(t, got.LastUsedAt.IsZero())
		assert.Equal(t, seq, maxSeq(t, s))
	})
}

// Two gateways on one database, each with its own store handle and cache: a key
// revoked through one stops working on the other within a second, the other's cache
// refreshing in the background every auth.DefaultRefreshInterval as a gateway does.
// For SQLite the two handles share one file.
func TestRevocationReachesTheOtherGateway(t *testing.T) {
	forEachDriver(t, func(t *testing.T, f *fixture) {
		ctx, cancel := context.WithCancel(context.Background())
		gwA, gwB := f.open(t), f.open(t)

		const n = 5
		secrets := make([]string, n)
		keys := make([]*auth.Key, n)
		for i := range n {
			secrets[i], keys[i] = newKey(t, "shared", time.Time{})
			require.NoError(t, gwA.CreateKey(ctx, keys[i]))
		}
		cacheA, err := auth.NewCache(ctx, gwA)
		require.NoError(t, err)
		cacheB, err := auth.NewCache(ctx, gwB)
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			cacheB.Run(ctx, auth.DefaultRefreshInterval, auth.DefaultTouchInterval, func(err error) {
				t.Errorf("gateway B's cache: %v", err)
			})
		}()
		t.Cleanup(func() { cancel(); <-done })

		// A key created through A reaches B the same way.
		lateSecret, late := newKey(t, "late", time.Time{})
		start := time.Now()
		require.NoError(t, gwA.CreateKey(ctx, late))
		waitFor(t, func() bool { _, ok := cacheB.Verify(lateSecret); return ok })
		t.Logf("%s: a key created through gateway A worked on gateway B after %v",
			f.driver, time.Since(start).Round(time.Millisecond))

		var times []time.Duration
		for i := range n {
			_, ok := cacheB.Verify(secrets[i])
			require.True(t, ok, "key %d works on B before the revocation", i)
			start = time.Now()
			require.NoError(t, gwA.RevokeKey(ctx, keys[i].ID, time.Time{}))
			// Gateway A refreshes at once after its own change.
			require.NoError(t, cacheA.Refresh(ctx))
			_, ok = cacheA.Verify(secrets[i])
			assert.False(t, ok, "gateway A: revoked at once")
			waitFor(t, func() bool { _, ok := cacheB.Verify(secrets[i]); return !ok })
			times = append(times, time.Since(start)) // from the start of the revocation call
			// Spread the revocations over the refresh period.
			time.Sleep(time.Duration(i+1) * auth.DefaultRefreshInterval / (n + 1))
		}
		slices.Sort(times)
		t.Logf("%s: revocation through gateway A stopped the key on gateway B after: min %v, median %v, max %v (all: %v)",
			f.driver, times[0].Round(time.Millisecond), times[n/2].Round(time.Millisecond),
			times[n-1].Round(time.Millisecond), roundAll(times))
		for _, d := range times {
			assert.Less(t, d, time.Second, "a revocation must reach every gateway within a second")
		}
	})
}

// waitFor polls cond every millisecond until it holds; it fails the test after two
// seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 2*time.Second, time.Millisecond)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
