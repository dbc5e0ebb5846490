package relay

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// The minimum body rate, as docs/design.md states it: a forwarder gives up on a client once
// no byte has come for a second, or once the body has taken longer than a second plus its
// length at 1 MiB/s. The bounds are checked to the nanosecond on a clock of the test's.
func TestTheMinimumBodyRateIsASecondWithoutAByteOrASecondPlusTheLengthAt1MiBs(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	p := defaultPatience
	for _, c := range []struct {
		declared int
		whole    time.Duration // what the body may take in all
	}{
		{1 << 20, 2 * time.Second},
		{3 << 20, 4 * time.Second},
		{3 << 19, 2500 * time.Millisecond}, // 1.5 MiB
		{1000000, time.Second + 953674316*time.Nanosecond},
	} {
		giveUp := p.giveUpAt(t0, c.declared)
		require.Equal(t, t0.Add(c.whole), giveUp, "declared %d", c.declared)
		// Bytes keep coming (the last one just now): only the length bound counts.
		last := giveUp.Add(-time.Nanosecond)
		assert.Positive(t, p.wait(last, last, giveUp), "declared %d: still within its time", c.declared)
		assert.LessOrEqual(t, p.wait(giveUp, giveUp, giveUp), time.Duration(0), "declared %d: its time is up", c.declared)
	}
	// A second without a byte, long before the length bound.
	giveUp := p.giveUpAt(t0, 32<<20)
	lastByte := t0.Add(5 * time.Second)
	assert.Equal(t, time.Nanosecond, p.wait(lastByte.Add(time.Second-time.Nanosecond), lastByte, giveUp))
	assert.LessOrEqual(t, p.wait(lastByte.Add(time.Second), lastByte, giveUp), time.Duration(0))
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// The forwarder applies those bounds to a body arriving through a pipe the test feeds, on
// the test's clock: it forwards while the client keeps within them, and gives up (to send
// the body again whole) once it does not.
func TestAForwarderGivesUpAtTheMinimumBodyRate(t *testing.T) {
	const declared = 2 << 20 // may take 1 s + 2 s
	// Many short strings, so that what has arrived is known good (and forwarded) at once.
	head, item := `{"model":"m","input":[`, `"`+strings.Repeat("x", 97)+`",`
	n := (declared - len(head) - len(`"x"]}`)) / len(item)
	last := declared - len(head) - n*len(item) - len(`""]}`)
	body := []byte(head + strings.Repeat(item, n) + `"` + strings.Repeat("x", last) + `"]}`)
	require.Len(t, body, declared)
	op := protocols.Operation{Kind: protocols.KindResponses, Family: protocols.FamilyA}
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

	// start begins a body at t0 whose first 64 KiB arrive at once, and its forwarder.
	start := func(t *testing.T) (*ArrivingBody, *io.PipeWriter, *fakeClock, *forwarded) {
		clock := &fakeClock{t: t0}
		a := NewArrivingBody(op, declared)
		a.now, a.start, a.lastAt = clock.Now, t0, t0
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.CloseWithError(io.ErrUnexpectedEOF); a.Release(false) })
		go func() { _, _ = pw.Write(body[:64<<10]) }()
		_, ok := a.ReadUntilModel(pr)
		require.True(t, ok)
		a.FinishWhileForwarding(pr, nil)
		return a, pw, clock, forwardAll(a.Forward("up", 0))
	}
	// arrive sends the next n bytes at the clock's time, and waits until the body has
	// taken them in (and noted when they came).
	sent := 64 << 10
	arrive := func(t *testing.T, a *ArrivingBody, pw *io.PipeWriter, n int) {
		_, err := pw.Write(body[sent : sent+n])
		require.NoError(t, err)
		sent += n
		require.Eventually(t, func() bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.arrived == sent
		}, 5*time.Second, time.Millisecond)
	}
	gaveUp := func(t *testing.T, out *forwarded) {
		t.Helper()
		select {
		case <-out.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the forwarder still waits on a client past the minimum rate")
		}
		assert.ErrorIs(t, out.err, ErrBodyStalled)
	}

	t.Run("bytes keep coming, too slowly for the length", func(t *testing.T) {
		sent = 64 << 10
		a, pw, clock, out := start(t)
		// A byte every half second never stalls; at 2.5 s the body is still in time.
		for at := 500 * time.Millisecond; at <= 2500*time.Millisecond; at += 500 * time.Millisecond {
			clock.set(t0.Add(at))
			arrive(t, a, pw, 16<<10)
		}
		clock.set(t0.Add(3*time.Second - time.Nanosecond))
		arrive(t, a, pw, 16<<10)
		require.Eventually(t, func() bool { return out.length() >= sent-(16<<10) }, 5*time.Second, time.Millisecond,
			"the forwarder passes on what arrives in time")
		select {
		case <-out.done:
			t.Fatalf("gave up within the body's time: %v", out.err)
		default:
		}
		// At a second plus 2 MiB at 1 MiB/s, however recent the last byte, it gives up.
		clock.set(t0.Add(3 * time.Second))
		arrive(t, a, pw, 16<<10)
		gaveUp(t, out)
	})

	t.Run("a second without a byte", func(t *testing.T) {
		sent = 64 << 10
		a, pw, clock, out := start(t)
		clock.set(t0.Add(500 * time.Millisecond))
		arrive(t, a, pw, 16<<10)
		// The forwarder's own timer would wake it in a second of real time; the test wakes
		// it at once, as a change of the body would.
		poke := func() { a.mu.Lock(); a.notify(); a.mu.Unlock() }
		clock.set(t0.Add(1500*time.Millisecond - time.Nanosecond))
		poke()
		require.Eventually(t, func() bool { return out.length() >= sent-(16<<10) }, 5*time.Second, time.Millisecond)
		select {
		case <-out.done:
			t.Fatalf("gave up before a second without a byte: %v", out.err)
		default:
		}
		clock.set(t0.Add(1500 * time.Millisecond))
		poke()
		gaveUp(t, out)
	})
}
