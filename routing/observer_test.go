package routing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCircuitObserverHearsOpenAndCloseOnce(t *testing.T) {
	h := NewHealth(testPolicy)
	var heard []CircuitChange
	obs := CircuitObserver(func(c CircuitChange) {
		assert.True(t, h.mu.TryLock(), "called without the lock held")
		h.mu.Unlock()
		heard = append(heard, c)
	})
	h.SetObserver(&obs)

	now := fail(h, t0, 2)
	assert.Empty(t, heard, "below the threshold")
	now = fail(h, now.Add(time.Second), 1)
	require.Len(t, heard, 1)
	assert.Equal(t, CircuitChange{Opened: true, Reason: ReasonStatus, At: now}, heard[0])

	// A failed probe re-opens a half-open circuit: still out of service, nothing new.
	now = halfOpen(t, h, now)
	require.Equal(t, Probe, h.Admit(now))
	h.RecordFailure(Probe, ReasonStatus, 0, now)
	assert.Len(t, heard, 1)

	now = halfOpen(t, h, now)
	require.Equal(t, Probe, h.Admit(now))
	h.RecordSuccess(Probe, time.Millisecond, now)
	require.Len(t, heard, 2)
	assert.Equal(t, CircuitChange{Opened: false, Reason: ReasonStatus, At: now}, heard[1])

	h.RecordSuccess(Admitted, time.Millisecond, now)
	assert.Len(t, heard, 2, "closed stays closed: nothing to tell")

	// A reload's observer replaces this one; removing the old one leaves the new.
	var second []CircuitChange
	obs2 := CircuitObserver(func(c CircuitChange) { second = append(second, c) })
	h.SetObserver(&obs2)
	h.RemoveObserver(&obs)
	fail(h, now.Add(time.Minute), 3)
	assert.Len(t, heard, 2)
	assert.Len(t, second, 1)
}

func TestCircuitObserverHearsAProbeClose(t *testing.T) {
	p := testPolicy
	p.ProbeInterval = time.Second
	h := NewHealth(p)
	h.lookAfter(1)
	var heard []CircuitChange
	obs := CircuitObserver(func(c CircuitChange) { heard = append(heard, c) })
	h.SetObserver(&obs)
	now := fail(h, t0, 3)
	require.Len(t, heard, 1)
	ticket, ok := h.ClaimProbe(h.ReadyAt(now))
	require.True(t, ok)
	h.RecordProbe(ticket, ProbeOutcome{Result: ProbePass}, h.ReadyAt(now))
	require.Len(t, heard, 2)
	assert.False(t, heard[1].Opened)
}

// Outcomes that change nothing cost no allocation, observer or not.
func TestCircuitObserverCostsNothingWithoutAChange(t *testing.T) {
	h := NewHealth(testPolicy)
	obs := CircuitObserver(func(CircuitChange) {})
	h.SetObserver(&obs)
	allocs := testing.AllocsPerRun(1000, func() { h.RecordSuccess(Admitted, time.Millisecond, t0) })
	assert.Zero(t, allocs)
}
