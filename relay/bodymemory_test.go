package relay

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestTheCeilingGivesWhatItHasAndWaitsForTheRest(t *testing.T) {
	m := NewBodyMemory(100, 30*time.Millisecond)
	require.True(t, m.Take(60))
	require.True(t, m.Take(40))
	assert.Equal(t, int64(100), m.Held())

	start := time.Now()
	assert.False(t, m.Take(1), "taken past the ceiling")
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond, "refused without waiting")
	assert.False(t, m.Take(101), "more than the whole ceiling")

	m.Give(40)
	assert.Equal(t, int64(60), m.Held())
	assert.True(t, m.Take(40))
	m.Give(100)
	assert.Equal(t, int64(0), m.Held())

	var none *BodyMemory
	assert.True(t, none.Take(1<<40), "no ceiling refuses nothing")
	none.Give(1 << 40)
}

func TestAWaitingBodyIsWokenByBytesGivenBack(t *testing.T) {
	m := NewBodyMemory(100, time.Minute)
	require.True(t, m.Take(100))
	got := make(chan bool)
	go func() { got <- m.Take(50) }()
	require.Eventually(t, func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.freed != nil },
		10*time.Second, 100*time.Microsecond, "the body never waited")
	m.Give(50)
	select {
	case ok := <-got:
		assert.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting body was not woken when bytes came back")
	}
	assert.Equal(t, int64(100), m.Held())
}

func TestTheCeilingHoldsUnderConcurrentBodies(t *testing.T) {
	const limit = 1000
	m := NewBodyMemory(limit, 5*time.Millisecond)
	var wg sync.WaitGroup
	var mu sync.Mutex
	mostHeld := int64(0)
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				n := int64(1 + r.IntN(300))
				if !m.Take(n) {
					continue
				}
				held := m.Held()
				mu.Lock()
				mostHeld = max(mostHeld, held)
				mu.Unlock()
				m.Give(n)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, mostHeld, int64(limit))
	assert.Equal(t, int64(0), m.Held(), "bytes lost or given back twice")
}

func TestABodyThatPromisesMuchTakesMemoryOnlyForWhatArrives(t *testing.T) {
	// 10 bytes that claim to be 8 MiB are read within a ceiling of 100 KiB.
	m := NewBodyMemory(100<<10, 0)
	body, held, err := protocols.ReadBoundedWithin(strings.NewReader(`{"a":"b"}`), 8<<20, 32<<20, m)
	require.NoError(t, err)
	assert.Equal(t, `{"a":"b"}`, string(body))
	assert.LessOrEqual(t, held, int64(protocols.FirstBodyBuffer))
	m.Give(held)

	// A body without a length grows by doubling to its end, and takes each buffer from the
	// ceiling first: one that outgrows the ceiling is refused and gives back what it held.
	big := bytes.Repeat([]byte("x"), 300<<10)
	body, held, err = protocols.ReadBoundedWithin(bytes.NewReader(big), -1, 32<<20, NewBodyMemory(1<<20, 0))
	require.NoError(t, err)
	assert.Equal(t, big, body)
	assert.Equal(t, int64(512<<10), held)
	_, held, err = protocols.ReadBoundedWithin(bytes.NewReader(big), -1, 32<<20, m)
	assert.ErrorIs(t, err, protocols.ErrNoBodyMemory)
	assert.Zero(t, held)
	assert.Zero(t, m.Held(), "a refused body kept its bytes")
}

func TestAnArrivingBodyGrowsWithWhatArrivesUpToItsLength(t *testing.T) {
	var w recycleWatch
	op := protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}
	body := []byte(`{"model":"m-early","input":"` + strings.Repeat("y", 300<<10) + `"}`)
	m := NewBodyMemory(1<<30, 0)
	// Sixteen times its length is promised; nothing past the first buffer is taken
	// until bytes come.
	promised := 16 * len(body)
	a, apiErr := NewArrivingBodyWithin(op, promised, m.For("k"))
	require.Nil(t, apiErr)
	assert.Equal(t, int64(protocols.FirstBodyBuffer), m.Held())
	a.Release(false)
	assert.Zero(t, m.Held())

	before := w.recycled()
	a, apiErr = NewArrivingBodyWithin(op, len(body), m.For("k"))
	w.of(a)
	require.Nil(t, apiErr)
	src := bytes.NewReader(body)
	model, ok := a.ReadUntilModel(src)
	require.True(t, ok)
	assert.Equal(t, int64(protocols.FirstBodyBuffer), m.Held(), "grown before the bytes came")
	parsed, apiErr := a.Finish(src)
	require.Nil(t, apiErr)
	assert.Equal(t, string(body), string(parsed.Body))
	// The whole body holds its own buffer and those it outgrew (each half the next), all
	// charged until it is let go: 64 + 128 + 256 KiB outgrown, and its own 320 KiB.
	assert.Equal(t, int64(64+128+256+320)<<10, m.Held())
	// The model was read from the first buffer, which the body outgrew: it still reads
	// as sent while the body is held.
	assert.Equal(t, "m-early", model)

	a.Release(true)
	assert.Zero(t, m.Held(), "the ceiling was not given back")
	assert.Equal(t, before+1, w.recycled(), "the body's buffers serve again together, once")
}

func TestAnArrivingBodyThatCannotGrowIsRefusedAndGivesItsMemoryBack(t *testing.T) {
	op := protocols.Operation{Kind: protocols.KindMessages, Family: protocols.FamilyB}
	body := []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("y", 300<<10) + `"}]}`)
	m := NewBodyMemory(200<<10, 0)
	a, apiErr := NewArrivingBodyWithin(op, len(body), m.For("k"))
	require.Nil(t, apiErr)
	src := bytes.NewReader(body)
	_, ok := a.ReadUntilModel(src)
	require.True(t, ok)
	_, apiErr = a.Finish(src)
	require.NotNil(t, apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
	assert.Equal(t, 1, apiErr.RetryAfter)
	assert.Equal(t, protocols.FamilyB, apiErr.Family)
	f := a.Forward("up", 0)
	_, err := io.ReadAll(f)
	assert.ErrorIs(t, err, ErrBodyRefused)
	a.Release(false)
	require.NoError(t, f.Close())
	assert.Zero(t, m.Held(), "a refused body kept its memory once every holder let go")

	// No room for even the first buffer: refused before anything is read.
	full := NewBodyMemory(1, 0)
	_, apiErr = NewArrivingBodyWithin(op, len(body), full.For("k"))
	require.NotNil(t, apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
}

func TestNoKeyHoldsMoreThanItsShareOfTheCeiling(t *testing.T) {
	m := NewBodyMemory(100, 20*time.Millisecond).SharePerKey(50)
	greedy, other := m.For("greedy"), m.For("other")
	require.True(t, greedy.Take(30))
	require.True(t, greedy.Take(20))
	start := time.Now()
	assert.False(t, greedy.Take(1), "past its share")
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "it waited for its own bytes to come back first")
	refusal := greedy.Refusal(protocols.FamilyB)
	assert.Equal(t, http.StatusTooManyRequests, refusal.Status, "the key's own limit, not the gateway's")
	assert.Equal(t, protocols.CodeKeyBodyMemory, refusal.Code)
	assert.Equal(t, 1, refusal.RetryAfter)
	assert.False(t, m.For("greedy").Take(51), "one body larger than the share never fits")

	assert.True(t, other.Take(50), "another key still has its share")
	assert.Equal(t, int64(100), m.Held())
	assert.Equal(t, int64(50), m.HeldBy("greedy"))
	// Now the ceiling is full: a third key is refused by the ceiling, with 503.
	third := m.For("third")
	assert.False(t, third.Take(1))
	assert.Equal(t, http.StatusServiceUnavailable, third.Refusal(protocols.FamilyA).Status)

	greedy.Give(50)
	other.Give(50)
	assert.Zero(t, m.Held())
	assert.Zero(t, m.HeldBy("greedy"))
	assert.Empty(t, m.byKey, "a key holding nothing has no entry")
	assert.True(t, m.For("greedy").Take(50), "its share is its own again")

	var none *BodyMemory
	assert.True(t, none.For("k").Take(1<<40), "no ceiling refuses nothing")
	assert.Equal(t, int64(100), NewBodyMemory(100, 0).SharePerKey(0).PerKey(), "no share: the whole ceiling")
	assert.Equal(t, int64(100), NewBodyMemory(100, 0).SharePerKey(500).PerKey(), "never more than the ceiling")
}
