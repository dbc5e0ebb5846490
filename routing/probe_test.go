package routing

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probedPolicy is testPolicy with background probes: the first a second after a trip,
// doubling to at most five.
var probedPolicy = func() HealthPolicy {
	p := testPolicy
	p.ProbeInterval = time.Second
	p.ProbeMaxInterval = 5 * time.Second
	return p
}()

// probedHealth is a health with probedPolicy that a prober looks after.
func probedHealth() *Health {
	h := NewHealth(probedPolicy)
	h.lookAfter(+1)
	return h
}

// claim takes the probe due at now, failing the test if none is.
func claim(t *testing.T, h *Health, now time.Time) ProbeTicket {
	t.Helper()
	ticket, ok := h.ClaimProbe(now)
	require.True(t, ok, "a probe is due %v after t0", now.Sub(t0))
	return ticket
}

func TestProbePolicyDefaults(t *testing.T) {
	assert.Zero(t, HealthPolicy{}.WithDefaults().ProbeInterval, "without a prober nothing probes: off unless asked for")
	assert.Zero(t, HealthPolicy{ProbeInterval: -time.Second, ProbeMaxInterval: time.Second}.WithDefaults().ProbeMaxInterval)

	p := HealthPolicy{ProbeInterval: time.Second}.WithDefaults()
	assert.Equal(t, DefaultProbeMaxInterval, p.ProbeMaxInterval)
	p = HealthPolicy{ProbeInterval: 10 * time.Second}.WithDefaults()
	assert.Equal(t, 10*time.Second, p.ProbeMaxInterval, "the default cap is never below the interval")
	p = HealthPolicy{ProbeInterval: 3 * time.Second, ProbeMaxInterval: time.Second}.WithDefaults()
	assert.Equal(t, 3*time.Second, p.ProbeMaxInterval, "a cap below the interval means it does not grow")
	p = HealthPolicy{ProbeInterval: 2 * time.Second, ProbeMaxInterval: 30 * time.Second}.WithDefaults()
	assert.Equal(t, 30*time.Second, p.ProbeMaxInterval)
}

// Failed probes back off, doubling from the interval up to the cap, each wait counted
// from the end of the probe that failed; none is claimed early or twice.
func TestFailedProbesBackOffToTheCap(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	require.Equal(t, Open, h.State(tripped))

	_, ok := h.ClaimProbe(tripped.Add(time.Second - time.Nanosecond))
	assert.False(t, ok, "no probe before the interval")
	now := tripped.Add(time.Second)
	var waits []time.Duration
	for range 6 {
		ticket := claim(t, h, now)
		_, again := h.ClaimProbe(now.Add(50 * time.Millisecond))
		assert.False(t, again, "one probe at a time")
		ended := now.Add(100 * time.Millisecond) // the probe took this long
		h.RecordProbe(ticket, ProbeOutcome{Result: ProbeFail}, ended)
		next := h.ReadyAt(ended)
		_, early := h.ClaimProbe(next.Add(-time.Nanosecond))
		assert.False(t, early, "no probe before its wait is over")
		waits = append(waits, next.Sub(ended))
		now = next
	}
	assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}, waits)
	s := h.Snapshot(now)
	assert.Equal(t, "open", s.State)
	assert.Equal(t, 1, s.ConsecutiveTrips, "failed probes are not trips")
	assert.Equal(t, uint64(3), s.Outcomes, "probes are not client traffic")
}

// While probes are on, an open circuit stays open for live requests however long its
// cooldown has been over: they never pay for a probe.
func TestLiveRequestsRefusedWhileProbing(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	for _, later := range []time.Duration{0, probedPolicy.Cooldown, time.Hour} {
		now := tripped.Add(later)
		assert.Equal(t, Open, h.State(now), "%v after the trip", later)
		assert.False(t, h.Available(now))
		assert.Equal(t, Refused, h.Admit(now))
	}
	assert.Equal(t, tripped.Add(time.Second), h.ReadyAt(tripped), "ready when the first probe is due")
	s := h.Snapshot(tripped)
	assert.True(t, s.Probing)
	assert.Equal(t, 1.0, s.NextProbeSeconds)
	assert.Zero(t, s.CooldownSeconds, "no cooldown ends the circuit while it is probed")

	// Late outcomes of requests admitted before the trip change nothing.
	h.RecordSuccess(Admitted, time.Millisecond, tripped.Add(time.Second))
	assert.Equal(t, Open, h.State(tripped.Add(time.Second)))
}

func TestPassingProbeClosesTheCircuit(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	now := tripped.Add(time.Second)
	rate := h.Snapshot(now).SuccessRate
	h.RecordProbe(claim(t, h, now), ProbeOutcome{Result: ProbePass}, now)

	assert.Equal(t, Closed, h.State(now))
	assert.Equal(t, Admitted, h.Admit(now))
	s := h.Snapshot(now)
	assert.False(t, s.Probing)
	assert.Zero(t, s.RecentFailures, "the failures before the trip are cleared")
	assert.Equal(t, 1, s.ConsecutiveTrips, "only a live success resets the trip count")
	assert.Equal(t, rate, s.SuccessRate, "a probe is not a client request")
	assert.Equal(t, now, s.Since)

	// On trial: the first live failure re-opens it at once, and as the trip count was
	// kept, its first probe waits longer.
	failed := now.Add(100 * time.Millisecond)
	h.RecordFailure(Admitted, ReasonStatus, 0, failed)
	assert.Equal(t, Open, h.State(failed), "one failed attempt, not three")
	assert.Equal(t, 2, h.Snapshot(failed).ConsecutiveTrips)
	assert.Equal(t, failed.Add(2*time.Second), h.ReadyAt(failed))
	passed := failed.Add(2 * time.Second)
	h.RecordProbe(claim(t, h, passed), ProbeOutcome{Result: ProbePass}, passed)
	// A live success ends the trial and clears the trips: one failure is one failure
	// again, and the next trip's first probe is a second away.
	h.RecordSuccess(Admitted, time.Millisecond, passed.Add(time.Second))
	assert.Zero(t, h.Snapshot(passed.Add(time.Second)).ConsecutiveTrips)
	h.RecordFailure(Admitted, ReasonStatus, 0, passed.Add(2*time.Second))
	h.RecordFailure(Admitted, ReasonStatus, 0, passed.Add(3*time.Second))
	assert.Equal(t, Closed, h.State(passed.Add(3*time.Second)))
	h.RecordFailure(Admitted, ReasonStatus, 0, passed.Add(4*time.Second))
	assert.Equal(t, passed.Add(5*time.Second), h.ReadyAt(passed.Add(4*time.Second)))
}

// A pause the upstream asked for is not probed before it ends; it ends in half-open, so a
// retry that waited it out may probe it, and where a prober looks after the candidate a
// background probe is due at once, so that it comes back without traffic. That holds for
// a pause that comes while a circuit is already being probed, too.
func TestNoProbeBeforeARetryAfterPauseEnds(t *testing.T) {
	h := probedHealth()
	h.RecordFailure(Admitted, ReasonRateLimit, 10*time.Second, t0)
	for _, d := range []time.Duration{0, time.Second, 10*time.Second - time.Nanosecond} {
		_, ok := h.ClaimProbe(at(d))
		assert.False(t, ok, "probed %v into a 10s pause", d)
	}
	s := h.Snapshot(t0)
	assert.True(t, s.Paused)
	assert.Equal(t, 10.0, s.CooldownSeconds)
	end := at(10 * time.Second)
	assert.Equal(t, HalfOpen, h.State(end))
	h.RecordProbe(claim(t, h, end), ProbeOutcome{Result: ProbePass}, end)
	assert.Equal(t, Admitted, h.Admit(end), "a passing probe at the pause's end brings it back")

	// A live request may probe it at the end too (a retry that waited the pause out).
	h = probedHealth()
	h.RecordFailure(Admitted, ReasonRateLimit, 10*time.Second, t0)
	a := h.Admit(end)
	require.Equal(t, Probe, a)
	h.RecordSuccess(a, time.Millisecond, end)
	assert.Equal(t, Closed, h.State(end))
	_, ok := h.ClaimProbe(end)
	assert.False(t, ok, "nothing left to probe")

	// A failed probe at the end takes it out again, probed on the failure schedule.
	h = probedHealth()
	h.RecordFailure(Admitted, ReasonRateLimit, 10*time.Second, t0)
	h.RecordProbe(claim(t, h, end), ProbeOutcome{Result: ProbeFail}, end)
	assert.Equal(t, Open, h.State(end.Add(time.Second-time.Nanosecond)))
	assert.Equal(t, Refused, h.Admit(end.Add(time.Second-time.Nanosecond)))
	claim(t, h, end.Add(time.Second))

	// Without a prober (probe off, a cloud channel), the pause ends in half-open, for a
	// live request.
	h = NewHealth(probedPolicy)
	h.RecordFailure(Admitted, ReasonRateLimit, 10*time.Second, t0)
	assert.Equal(t, HalfOpen, h.State(end))
	assert.Equal(t, Probe, h.Admit(end))

	// A longer Retry-After arriving (from a request admitted earlier) while a circuit is
	// probed takes over: no probe until it ends.
	h = probedHealth()
	tripped := fail(h, t0, 3)
	h.RecordFailure(Admitted, ReasonRateLimit, 20*time.Second, tripped.Add(500*time.Millisecond))
	_, ok = h.ClaimProbe(tripped.Add(2 * time.Second))
	assert.False(t, ok)
	_, ok = h.ClaimProbe(tripped.Add(20499 * time.Millisecond))
	assert.False(t, ok)
	claim(t, h, tripped.Add(20500*time.Millisecond))

	// A shorter one, within a long cooldown already in force, still holds the next probe
	// back until it ends.
	h = probedHealth()
	tripped = fail(h, t0, 3) // cooldown 5s, first probe at 1s
	h.RecordFailure(Admitted, ReasonRateLimit, 3*time.Second, tripped)
	_, ok = h.ClaimProbe(tripped.Add(time.Second))
	assert.False(t, ok, "probed during a 3s pause")
	claim(t, h, tripped.Add(3*time.Second))

	// A probe's own 429 with Retry-After holds the next probe back as long as asked, up to
	// max_cooldown (20s here).
	h = probedHealth()
	tripped = fail(h, t0, 3)
	now := tripped.Add(time.Second)
	h.RecordProbe(claim(t, h, now), ProbeOutcome{Result: ProbeFail, RetryAfter: 15 * time.Second}, now)
	assert.Equal(t, now.Add(15*time.Second), h.ReadyAt(now))
	now = now.Add(15 * time.Second)
	h.RecordProbe(claim(t, h, now), ProbeOutcome{Result: ProbeFail, RetryAfter: 1000 * time.Hour}, now)
	assert.Equal(t, now.Add(20*time.Second), h.ReadyAt(now))
}

// However long a pause the upstream asks for, the candidate is out for at most
// max_cooldown; and an operator's reset brings it back at once.
func TestAPauseIsBoundedByMaxCooldownAndAResetEndsIt(t *testing.T) {
	for _, asked := range []time.Duration{21 * time.Second, 31 * 365 * 24 * time.Hour, time.Duration(math.MaxInt64)} {
		h := probedHealth()
		h.RecordFailure(Admitted, ReasonRateLimit, asked, t0)
		assert.Equal(t, at(20*time.Second), h.ReadyAt(t0), "asked for %v", asked)
		assert.Equal(t, 20.0, h.Snapshot(t0).CooldownSeconds)
	}
	h := probedHealth()
	fail(h, t0, 3)
	h.RecordFailure(Admitted, ReasonRateLimit, time.Hour, at(3*time.Second))
	require.Equal(t, Refused, h.Admit(at(4*time.Second)))
	h.Reset(at(4 * time.Second))
	s := h.Snapshot(at(4 * time.Second))
	assert.Equal(t, "closed", s.State)
	assert.False(t, s.Paused)
	assert.Zero(t, s.CooldownSeconds)
	assert.Zero(t, s.RecentFailures)
	assert.Zero(t, s.ConsecutiveTrips)
	assert.Equal(t, 1.0, s.SuccessRate, "no longer demoted")
	assert.Equal(t, Admitted, h.Admit(at(4*time.Second)))
	// A fresh start: it takes threshold failures again to open it.
	fail(h, at(5*time.Second), 2)
	assert.Equal(t, Closed, h.State(at(7*time.Second)))
}

// A probe claimed before the circuit moved on says nothing about it after: not during a
// pause the upstream asked for, nor after a live probe re-opened it.
func TestAProbeOfAnEarlierOpeningIsIgnored(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	slow := claim(t, h, tripped.Add(time.Second)) // its answer takes a while
	h.RecordFailure(Admitted, ReasonRateLimit, 20*time.Second, tripped.Add(1500*time.Millisecond))
	h.RecordProbe(slow, ProbeOutcome{Result: ProbePass}, tripped.Add(2*time.Second))
	assert.Equal(t, Open, h.State(tripped.Add(2*time.Second)), "the pause stands")

	h = probedHealth()
	tripped = fail(h, t0, 3)
	slow = claim(t, h, tripped.Add(time.Second))
	h.Reset(tripped.Add(1500 * time.Millisecond))
	fail(h, tripped.Add(2*time.Second), 3)
	h.RecordProbe(slow, ProbeOutcome{Result: ProbePass}, tripped.Add(5*time.Second))
	assert.Equal(t, Open, h.State(tripped.Add(5*time.Second)), "a probe sent before a reset does not close the next opening")
}

// A candidate without the probe endpoint falls back to live half-open probes at the end
// of its cooldown, and is not probed again.
func TestNotOfferedFallsBackToHalfOpen(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	now := tripped.Add(time.Second)
	h.RecordProbe(claim(t, h, now), ProbeOutcome{Result: ProbeNotOffered}, now)
	s := h.Snapshot(now)
	assert.True(t, s.ProbeNotOffered)
	assert.False(t, s.Probing)
	assert.Equal(t, 4.0, s.CooldownSeconds, "the trip's own cooldown is what is left")

	ready := tripped.Add(probedPolicy.Cooldown)
	assert.Equal(t, Open, h.State(ready.Add(-time.Nanosecond)))
	assert.Equal(t, HalfOpen, h.State(ready))
	a := h.Admit(ready)
	require.Equal(t, Probe, a)
	h.RecordFailure(a, ReasonStatus, 0, ready)
	assert.Equal(t, ready.Add(10*time.Second), h.ReadyAt(ready), "live probes back off as before")
	for _, d := range []time.Duration{time.Second, time.Minute} {
		_, ok := h.ClaimProbe(ready.Add(d))
		assert.False(t, ok, "probed again after not_offered")
	}
}

// A probe cut short by the prober stopping is due again at once; one lost by a prober
// that vanished is due again after the lease.
func TestDroppedOrLostProbeIsDueAgain(t *testing.T) {
	h := probedHealth()
	tripped := fail(h, t0, 3)
	now := tripped.Add(time.Second)
	h.DropProbe(claim(t, h, now))
	claim(t, h, now)
	_, ok := h.ClaimProbe(now.Add(probeLease - time.Nanosecond))
	assert.False(t, ok)
	claim(t, h, now.Add(probeLease))
}

// Without a probe interval, or without a prober looking after it (a sub-operation's
// health, or any once the last prober stopped), nothing is probed in the background:
// live half-open as ever.
func TestNoProbesWithoutAnIntervalOrAProber(t *testing.T) {
	for name, h := range map[string]*Health{"no interval": NewHealth(testPolicy), "no prober": NewHealth(probedPolicy)} {
		if name == "no interval" {
			h.lookAfter(+1)
		}
		tripped := fail(h, t0, 3)
		_, ok := h.ClaimProbe(tripped.Add(time.Hour))
		assert.False(t, ok, name)
		assert.False(t, h.Snapshot(tripped).Probing, name)
		assert.Equal(t, HalfOpen, h.State(tripped.Add(testPolicy.Cooldown)), name)
	}

	h := probedHealth()
	tripped := fail(h, t0, 3)
	assert.Equal(t, Open, h.State(tripped.Add(testPolicy.Cooldown)))
	h.lookAfter(-1) // the last prober stopped
	assert.Equal(t, HalfOpen, h.State(tripped.Add(testPolicy.Cooldown)), "its circuit does not stay open for good")
}

// The prober probes what is due, records it, and nothing else; Stop cancels a probe
// under way and returns only once every probe has returned.
func TestProberProbesOpenCircuitsAndStops(t *testing.T) {
	policy := probedPolicy
	policy.ProbeInterval, policy.ProbeMaxInterval = 20*time.Millisecond, 40*time.Millisecond
	open, closed := NewHealth(policy), NewHealth(policy)
	now := time.Now()
	for i := range 3 {
		open.RecordFailure(Admitted, ReasonStatus, 0, now.Add(time.Duration(i)))
	}
	require.Equal(t, Open, open.State(time.Now()))

	var closedProbes atomic.Int64
	outcomes := make(chan ProbeOutcome, 8)
	blocked := make(chan struct{})
	var returned atomic.Int64
	var calls atomic.Int64
	p := StartProber([]ProbeTarget{
		{Health: closed, Probe: func(context.Context) ProbeOutcome { closedProbes.Add(1); return ProbeOutcome{Result: ProbePass} }},
		{Health: open, Done: func(o ProbeOutcome) { outcomes <- o }, Probe: func(ctx context.Context) ProbeOutcome {
			defer returned.Add(1)
			if calls.Add(1) == 1 {
				return ProbeOutcome{Result: ProbeFail}
			}
			close(blocked)
			<-ctx.Done() // the second probe hangs until the prober stops
			return ProbeOutcome{Result: ProbeFail}
		}},
	}, 5*time.Millisecond)

	select {
	case o := <-outcomes:
		assert.Equal(t, ProbeFail, o.Result)
	case <-time.After(5 * time.Second):
		t.Fatal("the open circuit was never probed")
	}
	select {
	case <-blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the failed probe was never followed by another")
	}
	p.Stop()
	assert.Equal(t, calls.Load(), returned.Load(), "Stop returned before a probe did")
	assert.Equal(t, int64(2), calls.Load(), "one probe at a time")
	assert.Zero(t, closedProbes.Load(), "a closed circuit is not probed")
	assert.Empty(t, outcomes, "a probe cut short by Stop is not recorded")
	assert.Equal(t, Open, open.State(time.Now()))
	assert.False(t, open.Snapshot(time.Now()).Probing, "no prober looks after it any more")
	assert.Equal(t, HalfOpen, open.State(time.Now().Add(time.Hour)), "so live requests will probe it")
}
