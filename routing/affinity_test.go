package routing

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAffinityGetAfterSet(t *testing.T) {
	a := NewAffinity(10, time.Hour)
	_, ok := a.Get("conv-1", t0)
	assert.False(t, ok)

	a.Set("conv-1", "east", t0)
	got, ok := a.Get("conv-1", t0.Add(time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "east", got)

	a.Set("conv-1", "west", t0.Add(2*time.Minute))
	got, ok = a.Get("conv-1", t0.Add(3*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "west", got, "the last candidate to serve wins")
	assert.Equal(t, 1, a.Len())

	_, ok = a.Get("conv-2", t0)
	assert.False(t, ok)
}

func TestAffinityExpiresAfterTTL(t *testing.T) {
	const ttl = 10 * time.Minute
	a := NewAffinity(10, ttl)
	a.Set("conv", "east", t0)

	got, ok := a.Get("conv", t0.Add(ttl))
	assert.True(t, ok, "still remembered at exactly the TTL")
	assert.Equal(t, "east", got)

	a = NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	_, ok = a.Get("conv", t0.Add(ttl+time.Nanosecond))
	assert.False(t, ok)
	assert.Zero(t, a.Len(), "an expired entry found by Get is dropped")

	// A Set sweeps expired entries from the old end.
	a = NewAffinity(10, ttl)
	a.Set("old-1", "east", t0)
	a.Set("old-2", "east", t0.Add(time.Minute))
	a.Set("new", "west", t0.Add(time.Minute+ttl+time.Second))
	assert.Equal(t, 1, a.Len())

	// Setting again keeps a conversation alive.
	a = NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	a.Set("conv", "east", t0.Add(ttl))
	_, ok = a.Get("conv", t0.Add(ttl+ttl/2))
	assert.True(t, ok)
}

func TestAffinityReadKeepsConversationAlive(t *testing.T) {
	// The TTL counts from a conversation's last request: a read is a use.
	const ttl = 10 * time.Minute
	a := NewAffinity(10, ttl)
	a.Set("conv", "east", t0)
	_, ok := a.Get("conv", t0.Add(8*time.Minute))
	require.True(t, ok)
	got, ok := a.Get("conv", t0.Add(16*time.Minute))
	assert.True(t, ok)
	assert.Equal(t, "east", got)
}

func TestAffinityEvictsLeastRecentlyUsed(t *testing.T) {
	a := NewAffinity(3, time.Hour)
	a.Set("a", "1", t0)
	a.Set("b", "2", t0.Add(time.Second))
	a.Set("c", "3", t0.Add(2*time.Second))
	require.Equal(t, 3, a.Len())

	// "a" is the oldest entry, but it was just read: "b" is the least recently used.
	_, ok := a.Get("a", t0.Add(3*time.Second))
	require.True(t, ok)
	a.Set("d", "4", t0.Add(4*time.Second))
	assert.Equal(t, 3, a.Len())
	_, ok = a.Get("b", t0.Add(5*time.Second))
	assert.False(t, ok, "the least recently used entry goes")
	for _, k := range []string{"a", "c", "d"} {
		_, ok := a.Get(k, t0.Add(5*time.Second))
		assert.True(t, ok, k)
	}

	// Updating an entry counts as use too.
	a = NewAffinity(2, time.Hour)
	a.Set("x", "1", t0)
	a.Set("y", "2", t0.Add(time.Second))
	a.Set("x", "3", t0.Add(2*time.Second))
	a.Set("z", "4", t0.Add(3*time.Second))
	_, ok = a.Get("y", t0.Add(4*time.Second))
	assert.False(t, ok)
	got, ok := a.Get("x", t0.Add(4*time.Second))
	assert.True(t, ok)
	assert.Equal(t, "3", got)
}

func TestAffinityLenIsBounded(t *testing.T) {
	const limit = 50
	a := NewAffinity(limit, time.Hour)
	for i := range 1000 {
		a.Set(fmt.Sprint("conv-", i), "east", t0.Add(time.Duration(i)*time.Millisecond))
		require.LessOrEqual(t, a.Len(), limit)
	}
	assert.Equal(t, limit, a.Len())
	// The newest survive.
	_, ok := a.Get("conv-999", t0.Add(time.Second))
	assert.True(t, ok)
	_, ok = a.Get("conv-0", t0.Add(time.Second))
	assert.False(t, ok)
}

func TestAffinityConcurrentUse(t *testing.T) {
	const limit = 64
	a := NewAffinity(limit, time.Minute)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				key := fmt.Sprint("conv-", (w*7919+i)%200)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				if i%3 == 0 {
					a.Set(key, fmt.Sprint("cand-", w), now)
				} else {
					a.Get(key, now)
				}
				if n := a.Len(); n > limit {
					t.Errorf("Len %d is over the limit %d", n, limit)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, a.Len(), limit)
}
