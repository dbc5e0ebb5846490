package routing

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the fixed start of every test clock in this package: no test sleeps.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// testPolicy is small enough to step through by hand: three failures in 30s trip the
// circuit, the first pause is 5s, and pauses double to at most 20s.
var testPolicy = HealthPolicy{
	FailureThreshold: 3,
	Window:           30 * time.Second,
	Cooldown:         5 * time.Second,
	MaxCooldown:      20 * time.Second,
	HalfOpenProbes:   2,
}

func at(d time.Duration) time.Time { return t0.Add(d) }

// fail records n plain failures (no Retry-After) from closed-circuit admissions, one a
// second from start.
func fail(h *Health, start time.Time, n int) time.Time {
	now := start
	for i := range n {
		now = start.Add(time.Duration(i) * time.Second)
		h.RecordFailure(Admitted, ReasonStatus, 0, now)
	}
	return now
}

// halfOpen waits out the cooldown in force at now and returns when the circuit half-opens.
func halfOpen(t *testing.T, h *Health, now time.Time) time.Time {
	t.Helper()
	ready := h.ReadyAt(now)
	require.True(t, ready.After(now), "expected an open circuit at %v", now)
	require.Equal(t, Open, h.State(ready.Add(-time.Nanosecond)))
	require.Equal(t, HalfOpen, h.State(ready))
	return ready
}

func TestHealthPolicyDefaults(t *testing.T) {
	assert.Equal(t, DefaultHealthPolicy, HealthPolicy{}.WithDefaults())

	p := HealthPolicy{FailureThreshold: 7, Window: time.Minute, Cooldown: time.Second, MaxCooldown: 10 * time.Second, HalfOpenProbes: 4}
	assert.Equal(t, p, p.WithDefaults(), "set fields are kept")

	// Only the cap is unset: the default cap, or the cooldown if that is longer.
	assert.Equal(t, DefaultHealthPolicy.MaxCooldown, HealthPolicy{Cooldown: time.Second}.WithDefaults().MaxCooldown)
	assert.Equal(t, time.Hour, HealthPolicy{Cooldown: time.Hour}.WithDefaults().MaxCooldown)

	// A cap set below the cooldown means "do not grow": it must not become the
	// five-minute default.
	p = HealthPolicy{Cooldown: 10 * time.Second, MaxCooldown: 2 * time.Second}.WithDefaults()
	assert.Equal(t, 10*time.Second, p.MaxCooldown)
}

func TestHealthStartsClosedAndHealthy(t *testing.T) {
	h := NewHealth(testPolicy)
	assert.Equal(t, Closed, h.State(t0))
	assert.True(t, h.Available(t0))
	assert.Equal(t, Admitted, h.Admit(t0))
	assert.Equal(t, t0, h.ReadyAt(t0))
	s := h.Snapshot(t0)
	assert.Equal(t, "closed", s.State)
	assert.Equal(t, 1.0, s.SuccessRate)
	assert.Zero(t, s.RecentFailures)
	assert.Zero(t, s.ConsecutiveTrips)
	assert.Zero(t, s.CooldownSeconds)
}

func TestCircuitStateString(t *testing.T) {
	assert.Equal(t, "closed", Closed.String())
	assert.Equal(t, "half_open", HalfOpen.String())
	assert.Equal(t, "open", Open.String())
}

func TestCircuitOpensAfterThresholdWithinWindow(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, at(0))
	h.RecordFailure(Admitted, ReasonTimeout, 0, at(time.Second))
	assert.Equal(t, Closed, h.State(at(time.Second)), "two failures are below the threshold")
	assert.True(t, h.Available(at(time.Second)))
	assert.Equal(t, 2, h.Snapshot(at(time.Second)).RecentFailures)

	tripped := at(2 * time.Second)
	h.RecordFailure(Admitted, ReasonConnect, 0, tripped)
	assert.Equal(t, Open, h.State(tripped))
	assert.False(t, h.Available(tripped))
	assert.Equal(t, Refused, h.Admit(tripped))
	assert.Equal(t, tripped.Add(testPolicy.Cooldown), h.ReadyAt(tripped))

	s := h.Snapshot(tripped)
	assert.Equal(t, "open", s.State)
	assert.Equal(t, 1, s.ConsecutiveTrips)
	assert.Equal(t, 5.0, s.CooldownSeconds)
	assert.Equal(t, string(ReasonConnect), s.LastFailure)
	assert.Equal(t, uint64(3), s.Outcomes)
	assert.Equal(t, tripped, s.Since)
}

func TestCircuitOpensOnThresholdJustInsideWindow(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, at(0))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(15*time.Second))
	last := at(testPolicy.Window - time.Millisecond)
	h.RecordFailure(Admitted, ReasonStatus, 0, last)
	assert.Equal(t, Open, h.State(last))
}

func TestCircuitStaysClosedWhenFailuresAreSpreadBeyondWindow(t *testing.T) {
	h := NewHealth(testPolicy)
	// A failure every 20s: any 30s window holds at most two.
	var now time.Time
	for i := range 10 {
		now = at(time.Duration(i) * 20 * time.Second)
		h.RecordFailure(Admitted, ReasonStatus, 0, now)
		require.Equal(t, Closed, h.State(now), "failure %d", i)
		require.LessOrEqual(t, h.Snapshot(now).RecentFailures, 2, "failures older than the window are forgotten")
	}
	// A failure exactly one window old no longer counts.
	h = NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, at(0))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(10*time.Second))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(testPolicy.Window))
	assert.Equal(t, Closed, h.State(at(testPolicy.Window)))
}

func TestCircuitStaysOpenForCooldownThenHalfOpens(t *testing.T) {
	h := NewHealth(testPolicy)
	tripped := fail(h, t0, 3)
	ready := tripped.Add(testPolicy.Cooldown)

	for _, now := range []time.Time{tripped, tripped.Add(time.Second), ready.Add(-time.Nanosecond)} {
		assert.Equal(t, Open, h.State(now), "%v after the trip", now.Sub(tripped))
		assert.False(t, h.Available(now))
		assert.Equal(t, Refused, h.Admit(now))
		assert.Equal(t, ready, h.ReadyAt(now))
	}
	assert.Equal(t, HalfOpen, h.State(ready))
	assert.True(t, h.Available(ready))
	assert.Equal(t, ready, h.ReadyAt(ready))
	s := h.Snapshot(ready)
	assert.Equal(t, "half_open", s.State)
	assert.Zero(t, s.CooldownSeconds)
	assert.Equal(t, ready, s.Since)
}

func TestHalfOpenAdmitsBoundedProbes(t *testing.T) {
	h := NewHealth(testPolicy) // two probes
	now := halfOpen(t, h, fail(h, t0, 3))

	assert.Equal(t, Probe, h.Admit(now))
	assert.True(t, h.Available(now), "one probe slot is still free")
	assert.Equal(t, Probe, h.Admit(now))
	assert.False(t, h.Available(now), "every probe slot is taken")
	assert.Equal(t, Refused, h.Admit(now))
	assert.Equal(t, Refused, h.Admit(now.Add(time.Minute)), "time alone frees no probe slot")
	assert.Equal(t, 2, h.Snapshot(now).ProbesInFlight)
	assert.Equal(t, HalfOpen, h.State(now))
	assert.Equal(t, now, h.ReadyAt(now), "half-open is not a pause")
}

func TestReleaseFreesAnUnusedProbeSlot(t *testing.T) {
	p := testPolicy
	p.HalfOpenProbes = 1
	h := NewHealth(p)
	now := halfOpen(t, h, fail(h, t0, 3))

	a := h.Admit(now)
	require.Equal(t, Probe, a)
	require.Equal(t, Refused, h.Admit(now))

	h.Release(a)
	assert.Equal(t, 0, h.Snapshot(now).ProbesInFlight)
	assert.Equal(t, HalfOpen, h.State(now), "releasing a probe says nothing about the candidate")
	assert.True(t, h.Available(now))

	// Releasing what was no probe, or releasing twice, frees nothing extra.
	h.Release(Admitted)
	h.Release(Refused)
	h.Release(a)
	assert.Equal(t, 0, h.Snapshot(now).ProbesInFlight)
	require.Equal(t, Probe, h.Admit(now))
	assert.Equal(t, Refused, h.Admit(now), "still only one probe at a time")
}

func TestProbesStillOutCountAgainstTheNextHalfOpen(t *testing.T) {
	h := NewHealth(testPolicy) // two probes
	now := halfOpen(t, h, fail(h, t0, 3))
	first, second := h.Admit(now), h.Admit(now)
	require.Equal(t, Probe, first)
	require.Equal(t, Probe, second)

	// The first probe fails and re-opens the circuit while the second is still running.
	h.RecordFailure(first, ReasonStatus, 0, now)
	now = halfOpen(t, h, now)
	assert.Equal(t, 1, h.Snapshot(now).ProbesInFlight)
	require.Equal(t, Probe, h.Admit(now))
	assert.Equal(t, Refused, h.Admit(now), "with one probe still out, only one more may start")

	// When the old probe comes back, its slot is the one freed.
	h.Release(second)
	assert.Equal(t, 1, h.Snapshot(now).ProbesInFlight)
	assert.Equal(t, Probe, h.Admit(now))
	assert.Equal(t, Refused, h.Admit(now))
}

func TestSuccessfulProbeClosesCircuit(t *testing.T) {
	h := NewHealth(testPolicy)
	now := halfOpen(t, h, fail(h, t0, 3))
	a := h.Admit(now)
	require.Equal(t, Probe, a)

	done := now.Add(300 * time.Millisecond)
	h.RecordSuccess(a, 200*time.Millisecond, done)
	assert.Equal(t, Closed, h.State(done))
	assert.Equal(t, Admitted, h.Admit(done))
	s := h.Snapshot(done)
	assert.Zero(t, s.ProbesInFlight)
	assert.Zero(t, s.ConsecutiveTrips, "a success resets the trip count")
	assert.Zero(t, s.RecentFailures)
	assert.Equal(t, 200*time.Millisecond, s.TimeToFirstByte)
	assert.Equal(t, 200.0, s.TTFBMillis)
	assert.Equal(t, done, s.Since)
}

func TestFailedProbeReopensWithDoubledCooldownUpToMax(t *testing.T) {
	h := NewHealth(testPolicy) // 5s, doubling, capped at 20s
	now := fail(h, t0, 3)
	assert.Equal(t, now.Add(5*time.Second), h.ReadyAt(now))

	for i, want := range []time.Duration{10 * time.Second, 20 * time.Second, 20 * time.Second, 20 * time.Second} {
		now = halfOpen(t, h, now)
		a := h.Admit(now)
		require.Equal(t, Probe, a)
		h.RecordFailure(a, ReasonStatus, 0, now)
		assert.Equal(t, Open, h.State(now), "probe %d failed", i)
		assert.Equal(t, now.Add(want), h.ReadyAt(now), "cooldown after %d failed probes", i+1)
		assert.Equal(t, i+2, h.Snapshot(now).ConsecutiveTrips)
		assert.Zero(t, h.Snapshot(now).ProbesInFlight)
	}
}

func TestCooldownCapHoldsForManyTrips(t *testing.T) {
	h := NewHealth(testPolicy)
	now := fail(h, t0, 3)
	for i := range 100 { // far beyond where 2^trips overflows a Duration
		now = halfOpen(t, h, now)
		h.RecordFailure(h.Admit(now), ReasonStatus, 0, now)
		pause := h.ReadyAt(now).Sub(now)
		require.LessOrEqual(t, pause, testPolicy.MaxCooldown, "failed probe %d", i)
		if i >= 1 { // 10s, then 20s and no more
			require.Equal(t, testPolicy.MaxCooldown, pause, "failed probe %d", i)
		}
	}
}

func TestSuccessResetsTripCount(t *testing.T) {
	h := NewHealth(testPolicy)
	now := fail(h, t0, 3)
	// Two failed probes: the next pause would be 20s.
	for range 2 {
		now = halfOpen(t, h, now)
		h.RecordFailure(h.Admit(now), ReasonStatus, 0, now)
	}
	require.Equal(t, now.Add(20*time.Second), h.ReadyAt(now))

	now = halfOpen(t, h, now)
	h.RecordSuccess(h.Admit(now), time.Second, now)
	require.Equal(t, Closed, h.State(now))

	// The next trip starts again from the base cooldown.
	now = fail(h, now.Add(time.Minute), 3)
	assert.Equal(t, Open, h.State(now))
	assert.Equal(t, now.Add(testPolicy.Cooldown), h.ReadyAt(now))
	assert.Equal(t, 1, h.Snapshot(now).ConsecutiveTrips)
}

func TestSuccessClearsRecentFailures(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, at(0))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(time.Second))
	h.RecordSuccess(Admitted, time.Second, at(2*time.Second))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(3*time.Second))
	assert.Equal(t, Closed, h.State(at(3*time.Second)), "the count starts again after a success")
	assert.Equal(t, 1, h.Snapshot(at(3*time.Second)).RecentFailures)
}

func TestRetryAfterOpensAtOnce(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonRateLimit, 15*time.Second, t0)
	assert.Equal(t, Open, h.State(t0), "one 429 with Retry-After is enough")
	assert.False(t, h.Available(t0))
	assert.Equal(t, Refused, h.Admit(t0))
	// The upstream's own pause is honoured as asked, longer than the cooldown.
	assert.Equal(t, at(15*time.Second), h.ReadyAt(t0))
	assert.Equal(t, 15.0, h.Snapshot(t0).CooldownSeconds)
	assert.True(t, h.Snapshot(t0).Paused)
	assert.Equal(t, string(ReasonRateLimit), h.Snapshot(t0).LastFailure)

	assert.Equal(t, Open, h.State(at(15*time.Second-time.Nanosecond)))
	assert.Equal(t, HalfOpen, h.State(at(15*time.Second)))
}

func TestRetryAfterNeverShortensALongerPause(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonRateLimit, 15*time.Second, t0)
	// Late answers from requests admitted before the pause ask for less.
	h.RecordFailure(Admitted, ReasonRateLimit, 5*time.Second, at(time.Second))
	assert.Equal(t, at(15*time.Second), h.ReadyAt(at(time.Second)))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(2*time.Second))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(3*time.Second))
	h.RecordFailure(Admitted, ReasonStatus, 0, at(4*time.Second))
	assert.Equal(t, at(15*time.Second), h.ReadyAt(at(4*time.Second)), "failures while open do not reset the pause")

	// A longer request does extend it, up to max_cooldown from when it came.
	h.RecordFailure(Admitted, ReasonRateLimit, 2*time.Minute, at(10*time.Second))
	assert.Equal(t, at(10*time.Second+testPolicy.MaxCooldown), h.ReadyAt(at(10*time.Second)))

	// A Retry-After shorter than a tripped circuit's cooldown leaves the cooldown alone.
	h = NewHealth(testPolicy)
	tripped := fail(h, t0, 3)
	h.RecordFailure(Admitted, ReasonRateLimit, time.Second, tripped)
	assert.Equal(t, tripped.Add(testPolicy.Cooldown), h.ReadyAt(tripped))
}

func TestRetryAfterOnAFailedProbe(t *testing.T) {
	h := NewHealth(testPolicy)
	now := halfOpen(t, h, fail(h, t0, 3))
	a := h.Admit(now)
	require.Equal(t, Probe, a)
	h.RecordFailure(a, ReasonRateLimit, 12*time.Second, now)
	assert.Equal(t, Open, h.State(now))
	assert.Equal(t, now.Add(12*time.Second), h.ReadyAt(now))
	assert.Zero(t, h.Snapshot(now).ProbesInFlight)
}

func TestStateViewsAgree(t *testing.T) {
	// Walk one candidate through every state and check each view against the others.
	h := NewHealth(testPolicy)
	check := func(name string, now time.Time, want CircuitState, available bool) {
		t.Helper()
		s := h.Snapshot(now)
		assert.Equal(t, want, h.State(now), name)
		assert.Equal(t, want.String(), s.State, name)
		assert.Equal(t, available, h.Available(now), name)
		ready := h.ReadyAt(now)
		if want == Open {
			assert.True(t, ready.After(now), name)
			assert.InDelta(t, ready.Sub(now).Seconds(), s.CooldownSeconds, 0.01, name)
		} else {
			assert.Equal(t, now, ready, name)
			assert.Zero(t, s.CooldownSeconds, name)
		}
		assert.LessOrEqual(t, s.ProbesInFlight, testPolicy.HalfOpenProbes, name)
	}

	check("fresh", t0, Closed, true)
	tripped := fail(h, t0, 3)
	check("tripped", tripped, Open, false)
	check("cooling down", tripped.Add(2500*time.Millisecond), Open, false)
	now := tripped.Add(testPolicy.Cooldown)
	check("half-open", now, HalfOpen, true)
	p1 := h.Admit(now)
	check("one probe out", now, HalfOpen, true)
	p2 := h.Admit(now)
	check("all probes out", now, HalfOpen, false)
	h.Release(p2)
	check("one released", now, HalfOpen, true)
	h.RecordSuccess(p1, time.Second, now)
	check("probe succeeded", now, Closed, true)
}

func TestSnapshotSuccessRateAndCounters(t *testing.T) {
	h := NewHealth(testPolicy)
	h.RecordSuccess(Admitted, 100*time.Millisecond, t0)
	h.RecordSuccess(Admitted, 300*time.Millisecond, t0)
	s := h.Snapshot(t0)
	assert.Equal(t, 1.0, s.SuccessRate)
	assert.Equal(t, uint64(2), s.Outcomes)
	assert.Equal(t, 140*time.Millisecond, s.TimeToFirstByte, "EWMA: 100 + 0.2*(300-100)")

	h.RecordFailure(Admitted, ReasonTimeout, 0, t0)
	s = h.Snapshot(t0)
	assert.Equal(t, 0.8, s.SuccessRate)
	assert.Equal(t, uint64(3), s.Outcomes)
	assert.Equal(t, "timeout", s.LastFailure)
	assert.Equal(t, 1, s.RecentFailures)
	assert.Equal(t, 140*time.Millisecond, s.TimeToFirstByte, "a failure has no first byte")
}

func TestFailuresFadeWithHalfLifeOfAThirdOfTheWindow(t *testing.T) {
	halfLife := testPolicy.Window / 3
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, t0)
	rate := func(now time.Time) float64 { return h.Snapshot(now).SuccessRate }

	assert.InDelta(t, 0.8, rate(t0), 1e-9)
	assert.InDelta(t, 0.9, rate(t0.Add(halfLife)), 1e-9)
	assert.InDelta(t, 0.95, rate(t0.Add(2*halfLife)), 1e-9)
	assert.InDelta(t, 0.975, rate(t0.Add(3*halfLife)), 1e-9)
	assert.InDelta(t, 1.0, rate(t0.Add(30*halfLife)), 1e-3)
	assert.InDelta(t, 0.8, rate(t0), 1e-9, "reading does not change the record")
}

func TestFadeIsNotCompoundedByLaterSuccesses(t *testing.T) {
	// A failure, then a success one half-life later: 0.8 fades to 0.9, and the success
	// takes it to 0.92. Another half-life halves what is left of the failure: 0.96. The
	// fade must run from when the rate was last updated, not again from the failure.
	halfLife := testPolicy.Window / 3
	h := NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, t0)
	h.RecordSuccess(Admitted, time.Second, t0.Add(halfLife))
	assert.InDelta(t, 0.92, h.Snapshot(t0.Add(halfLife)).SuccessRate, 1e-9)
	assert.InDelta(t, 0.96, h.Snapshot(t0.Add(2*halfLife)).SuccessRate, 1e-9)

	// Two failures a half-life apart: (0.8 faded to 0.9) * 0.8 = 0.72, then 0.86.
	h = NewHealth(testPolicy)
	h.RecordFailure(Admitted, ReasonStatus, 0, t0)
	h.RecordFailure(Admitted, ReasonStatus, 0, t0.Add(halfLife))
	assert.InDelta(t, 0.72, h.Snapshot(t0.Add(halfLife)).SuccessRate, 1e-9)
	assert.InDelta(t, 0.86, h.Snapshot(t0.Add(2*halfLife)).SuccessRate, 1e-9)
}

func TestSetPolicyKeepsState(t *testing.T) {
	h := NewHealth(testPolicy)
	tripped := fail(h, t0, 3)
	p := testPolicy
	p.HalfOpenProbes = 1
	h.SetPolicy(p)
	assert.Equal(t, Open, h.State(tripped), "a reload does not close an open circuit")
	now := halfOpen(t, h, tripped)
	require.Equal(t, Probe, h.Admit(now))
	assert.Equal(t, Refused, h.Admit(now), "the new probe limit applies")
	assert.NoError(t, h.Destruct())
}

// TestHealthUnderConcurrentUse hammers one Health from many goroutines on a shared,
// advancing clock. Run with -race. The probes a caller holds (counted from outside,
// between Admit and Record/Release) never exceed the limit, even across trips, and every
// state read is one of the three.
func TestHealthUnderConcurrentUse(t *testing.T) {
	p := HealthPolicy{
		FailureThreshold: 2,
		Window:           40 * time.Millisecond,
		Cooldown:         3 * time.Millisecond,
		MaxCooldown:      12 * time.Millisecond,
		HalfOpenProbes:   3,
	}
	h := NewHealth(p)
	var clock atomic.Int64 // nanoseconds after t0
	now := func() time.Time { return t0.Add(time.Duration(clock.Add(int64(50 * time.Microsecond)))) }

	var held, maxHeld atomic.Int64
	var admitted, probes, refused atomic.Int64
	var badState atomic.Value
	valid := map[string]bool{"closed": true, "open": true, "half_open": true}

	const workers, rounds = 32, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				a := h.Admit(now())
				switch a {
				case Refused:
					refused.Add(1)
				case Admitted:
					admitted.Add(1)
				case Probe:
					probes.Add(1)
					n := held.Add(1)
					for m := maxHeld.Load(); n > m && !maxHeld.CompareAndSwap(m, n); m = maxHeld.Load() {
					}
				}
				if st := h.State(now()); st != Closed && st != Open && st != HalfOpen {
					badState.Store(st.String())
				}
				s := h.Snapshot(now())
				if !valid[s.State] {
					badState.Store(s.State)
				}
				if s.ProbesInFlight > p.HalfOpenProbes || s.ProbesInFlight < 0 {
					badState.Store("probes in flight out of range")
				}
				h.Available(now())
				h.ReadyAt(now())
				if a == Refused {
					continue
				}
				if a == Probe {
					held.Add(-1) // before the slot is given back
				}
				switch r := rng.IntN(10); {
				case r < 4:
					h.RecordSuccess(a, time.Millisecond, now())
				case r < 8:
					h.RecordFailure(a, ReasonStatus, 0, now())
				case r < 9:
					h.RecordFailure(a, ReasonRateLimit, time.Duration(rng.IntN(5))*time.Millisecond, now())
				default:
					h.Release(a)
				}
			}
		}()
	}
	wg.Wait()

	assert.Nil(t, badState.Load())
	assert.LessOrEqual(t, maxHeld.Load(), int64(p.HalfOpenProbes), "concurrent probes exceeded the limit")
	assert.Zero(t, held.Load())
	end := now()
	assert.Zero(t, h.Snapshot(end).ProbesInFlight, "every probe slot was given back")
	assert.Equal(t, int64(workers*rounds), admitted.Load()+probes.Load()+refused.Load())
	// The run must have exercised every path for the invariants to mean anything.
	assert.Positive(t, admitted.Load())
	assert.Positive(t, probes.Load())
	assert.Positive(t, refused.Load())
}

// An attempt admitted while the circuit was closed may finish after it opened: its
// outcome feeds the averages but moves the circuit no more.
func TestStaleOutcomesDoNotMoveAnOpenCircuit(t *testing.T) {
	p := HealthPolicy{FailureThreshold: 1, Window: time.Minute, Cooldown: 10 * time.Second, MaxCooldown: time.Minute}
	t0 := time.Unix(1_000_000, 0)
	h := NewHealth(p)
	stale := h.Admit(t0) // a long stream starts while all is well
	require.Equal(t, Admitted, stale)
	h.RecordFailure(Admitted, ReasonRateLimit, 30*time.Second, t0.Add(time.Second)) // the upstream asks for 30 s
	require.Equal(t, Open, h.State(t0.Add(2*time.Second)))

	h.RecordSuccess(stale, time.Second, t0.Add(3*time.Second)) // the old stream ends well
	assert.Equal(t, Open, h.State(t0.Add(3*time.Second)), "a stale success must not cancel the pause the upstream asked for")
	assert.Equal(t, t0.Add(31*time.Second), h.ReadyAt(t0.Add(3*time.Second)))

	// Half-open: a stale failure is not a failed probe and doubles nothing.
	half := t0.Add(31 * time.Second)
	require.Equal(t, HalfOpen, h.State(half))
	h.RecordFailure(Admitted, ReasonBrokenBody, 0, half)
	assert.Equal(t, HalfOpen, h.State(half))
	probe := h.Admit(half)
	require.Equal(t, Probe, probe)
	h.RecordSuccess(probe, time.Second, half)
	assert.Equal(t, Closed, h.State(half), "only the probe closes it")
}
