package routing

import (
	"context"
	"sync"
	"time"
)

// ProbeResult is what one background probe of a candidate found.
type ProbeResult uint8

const (
	// ProbeFail: the candidate did not answer the probe well (5xx, 429, 401, a transport
	// failure, a timeout); the circuit stays open and the next probe waits longer.
	ProbeFail ProbeResult = iota
	// ProbePass: the candidate answered; the circuit closes.
	ProbePass
	// ProbeNotOffered: the candidate does not serve the probe (404, 405); it is not
	// probed again and live requests probe it after the cooldown instead.
	ProbeNotOffered
)

func (r ProbeResult) String() string {
	switch r {
	case ProbePass:
		return "pass"
	case ProbeNotOffered:
		return "not_offered"
	}
	return "fail"
}

// ProbeOutcome is a probe's result and, for a failure, how long the upstream asked to
// be left alone (Retry-After on a 429 or 503; zero when it did not say).
type ProbeOutcome struct {
	Result     ProbeResult
	RetryAfter time.Duration
}

// probeLease is how long a claimed probe's result is awaited before another may be
// claimed: far past any probe's own time limit, it only matters if a prober vanished
// mid-probe, which must not leave the circuit open for good.
const probeLease = time.Minute

// ProbeTicket is a claim on one probe of one opening of a circuit.
type ProbeTicket struct{ opening uint64 }

// awaitingProbe reports whether background probes, rather than live requests, are to
// close the circuit: it is open after failures (not for a pause the upstream asked for),
// probes are on, a prober is running for this health, and the candidate offers them.
// Caller holds mu.
func (h *Health) awaitingProbe() bool {
	return h.state == Open && !h.paused && h.probed()
}

// probed reports whether background probes look after this health. Caller holds mu.
func (h *Health) probed() bool {
	return h.policy.ProbeInterval > 0 && h.probers > 0 && !h.noProbe
}

// pauseOver reports whether a pause the upstream asked for has ended in half-open and a
// background probe is to be sent now, so that the candidate comes back without waiting
// for traffic; a live request (a retry that waited the pause out) may probe it too.
// Caller holds mu.
func (h *Health) pauseOver() bool {
	return h.state == HalfOpen && h.paused && h.probed()
}

// lookAfter counts a prober in (+1) or out (-1). Only a health some prober looks after
// waits for probes; any other (a sub-operation's health, or every one once the last
// prober stopped) half-opens at the end of its cooldown as without probes.
func (h *Health) lookAfter(delta int) {
	h.mu.Lock()
	h.probers += delta
	h.mu.Unlock()
}

// ClaimProbe takes the next probe if one is due at now and none is under way. The caller
// must end the claim with RecordProbe or DropProbe.
func (h *Health) ClaimProbe(now time.Time) (ProbeTicket, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	if !(h.awaitingProbe() || h.pauseOver()) || now.Before(h.nextProbe) || now.Before(h.probeLease) {
		return ProbeTicket{}, false
	}
	h.probeLease = now.Add(probeLease)
	return ProbeTicket{opening: h.openings}, true
}

// RecordProbe applies a claimed probe's outcome. A pass closes the circuit and clears
// the recent failures, on trial: the first live outcome decides, a failure re-opening
// it at once. It leaves the trip count, which only a live success resets, so a
// candidate whose probe passes but whose generation fails waits longer for each probe,
// up to the cap, and costs one failed attempt per cycle. Probes are not client
// traffic: the success rate and outcome counts do not move.
func (h *Health) RecordProbe(t ProbeTicket, out ProbeOutcome, now time.Time) {
	h.mu.Lock()
	was := h.state
	h.recordProbeLocked(t, out, now)
	h.unlockAndNotify(was, now)
}

func (h *Health) recordProbeLocked(t ProbeTicket, out ProbeOutcome, now time.Time) {
	if out.Result == ProbeNotOffered {
		h.noProbe = true // whatever the circuit did meanwhile, this is true of the candidate
	}
	if t.opening != h.openings || !(h.awaitingProbe() || h.pauseOver()) {
		return // the circuit moved on meanwhile (a pause); this result is about an older state
	}
	h.probeLease = time.Time{}
	if h.pauseOver() && out.Result == ProbeFail {
		// Still failing after the pause it asked for: out, and probed on schedule.
		h.trip(now)
		return
	}
	switch out.Result {
	case ProbePass:
		h.state = Closed
		h.onTrial = true
		h.failures = h.failures[:0]
		h.lastChange = now
	case ProbeFail:
		h.probeWait = min(max(2*h.probeWait, h.policy.ProbeInterval), h.policy.ProbeMaxInterval)
		h.nextProbe = now.Add(max(h.probeWait, min(out.RetryAfter, h.policy.MaxCooldown)))
	}
}

// DropProbe ends a claim without an outcome (the prober stopped); the probe is due
// again at once.
func (h *Health) DropProbe(t ProbeTicket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.opening == h.openings {
		h.probeLease = time.Time{}
	}
}

// ProbeTarget is one candidate a Prober looks after.
type ProbeTarget struct {
	Health *Health
	// Probe sends one probe; it must return promptly once ctx is done.
	Probe func(ctx context.Context) ProbeOutcome
	// Done, if set, is told each outcome recorded (for metrics and logs).
	Done func(ProbeOutcome)
}

// Prober sends the background probes of a set of candidates as they fall due.
type Prober struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	targets []ProbeTarget
}

// StartProber looks at the targets every tick and starts each probe that is due, each
// in its own goroutine so that one slow candidate does not hold up another. A target is
// claimed before it is probed, so two probers sharing a Health (two configurations
// overlapping during a reload) do not probe it twice at once.
func StartProber(targets []ProbeTarget, tick time.Duration) *Prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prober{cancel: cancel, targets: targets}
	if len(targets) == 0 {
		return p
	}
	for _, t := range targets {
		t.Health.lookAfter(+1)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-ticker.C:
				for i := range targets {
					if ticket, ok := targets[i].Health.ClaimProbe(now); ok {
						p.wg.Add(1)
						go p.run(ctx, &targets[i], ticket)
					}
				}
			}
		}
	}()
	return p
}

func (p *Prober) run(ctx context.Context, t *ProbeTarget, ticket ProbeTicket) {
	defer p.wg.Done()
	out := t.Probe(ctx)
	if ctx.Err() != nil {
		t.Health.DropProbe(ticket) // cut short by Stop: it says nothing about the candidate
		return
	}
	t.Health.RecordProbe(ticket, out, time.Now())
	if t.Done != nil {
		t.Done(out)
	}
}

// Stop cancels the probes under way and returns when every goroutine of the prober has
// ended. It must be called once.
func (p *Prober) Stop() {
	p.cancel()
	p.wg.Wait()
	for _, t := range p.targets {
		t.Health.lookAfter(-1)
	}
}
