package routing

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// CircuitState is the state of a candidate's circuit breaker.
type CircuitState uint8

const (
	// Closed: the candidate takes traffic.
	Closed CircuitState = iota
	// HalfOpen: the cooldown is over; a bounded number of live requests probe it.
	HalfOpen
	// Open: the candidate failed repeatedly (or asked for a pause) and is skipped.
	Open
)

func (s CircuitState) String() string {
	switch s {
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "closed"
}

// HealthPolicy tunes how quickly a candidate is taken out and brought back.
type HealthPolicy struct {
	// FailureThreshold failures within Window open the circuit.
	FailureThreshold int
	Window           time.Duration
	// Cooldown is how long the circuit stays open after its first trip; each further
	// trip without a success in between doubles it, up to MaxCooldown.
	Cooldown time.Duration
	// MaxCooldown also bounds a pause the upstream asks for (Retry-After).
	MaxCooldown time.Duration
	// HalfOpenProbes is how many live requests may probe a half-open candidate at once.
	HalfOpenProbes int
	// ProbeInterval, when positive, has a circuit opened by failures probed in the
	// background (by a Prober) rather than by live requests: the first probe is due
	// ProbeInterval after it opens, each failed one doubles the wait up to
	// ProbeMaxInterval, and only a passing probe closes it. Zero leaves recovery to live
	// requests after the cooldown, as without a prober nothing else would ever close it.
	ProbeInterval    time.Duration
	ProbeMaxInterval time.Duration
}

// The probe schedule an operator gets unless they choose another: recovery is noticed
// within about DefaultProbeMaxInterval, while a candidate that stays down is asked at
// most every few seconds.
const (
	DefaultProbeInterval    = time.Second
	DefaultProbeMaxInterval = 5 * time.Second
)

// DefaultHealthPolicy is used for whatever a configuration leaves unset.
var DefaultHealthPolicy = HealthPolicy{
	FailureThreshold: 3,
	Window:           30 * time.Second,
	Cooldown:         5 * time.Second,
	MaxCooldown:      5 * time.Minute,
	HalfOpenProbes:   1,
}

// WithDefaults fills unset fields from DefaultHealthPolicy.
func (p HealthPolicy) WithDefaults() HealthPolicy {
	d := DefaultHealthPolicy
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = d.FailureThreshold
	}
	if p.Window <= 0 {
		p.Window = d.Window
	}
	if p.Cooldown <= 0 {
		p.Cooldown = d.Cooldown
	}
	if p.MaxCooldown <= 0 {
		p.MaxCooldown = max(d.MaxCooldown, p.Cooldown)
	} else if p.MaxCooldown < p.Cooldown {
		p.MaxCooldown = p.Cooldown // a cap below the cooldown means it does not grow
	}
	if p.HalfOpenProbes <= 0 {
		p.HalfOpenProbes = d.HalfOpenProbes
	}
	if p.ProbeInterval <= 0 {
		p.ProbeInterval, p.ProbeMaxInterval = 0, 0
	} else if p.ProbeMaxInterval <= 0 {
		p.ProbeMaxInterval = max(p.ProbeInterval, DefaultProbeMaxInterval)
	} else if p.ProbeMaxInterval < p.ProbeInterval {
		p.ProbeMaxInterval = p.ProbeInterval // a cap below the interval means it does not grow
	}
	return p
}

// ewmaWeight is how much one outcome moves the moving averages (about the last ten
// outcomes matter).
const ewmaWeight = 0.2

// Health is one candidate's live health. It is shared by every configuration that has
// the same candidate identity, so it survives reloads; all methods are safe for
// concurrent use.
type Health struct {
	mu     sync.Mutex
	policy HealthPolicy

	state     CircuitState
	failures  []time.Time // recent failures, oldest first, within the window
	trips     int         // consecutive trips without a success in between
	openUntil time.Time   // while Open: when it may half-open (unless background probes decide)
	probes    int         // probe admissions not yet recorded or released

	// Background probes (see HealthPolicy.ProbeInterval and probe.go).
	paused     bool          // while Open: the upstream asked for the pause (Retry-After)
	openings   uint64        // counts openings, so a probe claimed before one is not applied after it
	nextProbe  time.Time     // while awaiting a probe: when the next one is due
	probeWait  time.Duration // the wait before nextProbe; doubles with each failed probe
	probeLease time.Time     // a claimed probe's result is awaited until then
	noProbe    bool          // the candidate does not offer the probe: live requests probe it
	probers    int           // running Probers that look after this health
	onTrial    bool          // closed by a probe, and no live outcome since

	successRate float64       // EWMA of 1 (success) and 0 (failure)
	rateAt      time.Time     // when successRate was last updated: its fade runs from here
	ttfb        time.Duration // EWMA of time to first byte of successful attempts
	outcomes    uint64
	lastFailure Reason
	lastChange  time.Time

	observer atomic.Pointer[CircuitObserver] // nil: nobody listens
}

// NewHealth starts a candidate healthy.
func NewHealth(p HealthPolicy) *Health {
	return &Health{policy: p.WithDefaults(), successRate: 1}
}

// SetPolicy replaces the policy (a reload may change it) without touching the state.
func (h *Health) SetPolicy(p HealthPolicy) {
	h.mu.Lock()
	h.policy = p.WithDefaults()
	h.mu.Unlock()
}

// Destruct implements caddy.Destructor for the pool that shares Health across reloads.
func (h *Health) Destruct() error { return nil }

// Admission is the answer to "may a request try this candidate now?".
type Admission uint8

const (
	// Refused: the circuit is open (or all probe slots are taken).
	Refused Admission = iota
	// Admitted: the circuit is closed.
	Admitted
	// Probe: the circuit is half-open and this request is one of its probes; the caller
	// must Record the outcome (or Release the slot) so the slot is freed.
	Probe
)

// Available reports, without taking a probe slot, whether the candidate would be tried.
func (h *Health) Available(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	return h.state == Closed || (h.state == HalfOpen && h.probes < h.policy.HalfOpenProbes)
}

// Admit decides whether a request may try the candidate now and, for a half-open
// circuit, takes a probe slot.
func (h *Health) Admit(now time.Time) Admission {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	switch h.state {
	case Closed:
		return Admitted
	case HalfOpen:
		if h.probes < h.policy.HalfOpenProbes {
			h.probes++
			return Probe
		}
	}
	return Refused
}

// Release frees a probe slot that was taken but not used for an attempt.
func (h *Health) Release(a Admission) {
	if a != Probe {
		return
	}
	h.mu.Lock()
	if h.probes > 0 {
		h.probes--
	}
	h.mu.Unlock()
}

// advance moves an open circuit whose cooldown is over to half-open, unless background
// probes are to close it. Caller holds mu.
func (h *Health) advance(now time.Time) {
	if h.state == Open && !now.Before(h.openUntil) && !h.awaitingProbe() {
		h.state = HalfOpen
		h.lastChange = now
	}
}

// ReadyAt is when the candidate can next be tried: now for a closed or half-open circuit.
func (h *Health) ReadyAt(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	switch {
	case h.awaitingProbe():
		return maxTime(h.nextProbe, now) // the earliest it can close
	case h.state == Open:
		return h.openUntil
	}
	return now
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// RecordSuccess notes an attempt that served its request; ttfb is its time to first byte.
func (h *Health) RecordSuccess(a Admission, ttfb time.Duration, now time.Time) {
	h.mu.Lock()
	was := h.state
	h.recordSuccessLocked(a, ttfb, now)
	h.unlockAndNotify(was, now)
}

func (h *Health) recordSuccessLocked(a Admission, ttfb time.Duration, now time.Time) {
	h.releaseLocked(a)
	h.outcomes++
	h.successRate = h.decayedSuccessRate(now)
	h.successRate += ewmaWeight * (1 - h.successRate)
	h.rateAt = now
	switch {
	case ttfb <= 0: // an answer whose first byte was never timed says nothing of speed
	case h.ttfb == 0:
		h.ttfb = ttfb
	default:
		h.ttfb += time.Duration(ewmaWeight * float64(ttfb-h.ttfb))
	}
	if h.state != Closed && a != Probe {
		// A request admitted before the circuit opened (a long stream, say) says nothing
		// about the candidate now: only a probe may close the circuit, and a pause the
		// upstream asked for stands.
		return
	}
	h.failures = h.failures[:0]
	h.trips = 0
	h.onTrial = false
	if h.state != Closed {
		h.state = Closed
		h.lastChange = now
	}
}

// RecordFailure notes an attempt that could not serve its request. retryAfter, when
// positive, is the upstream's own request for a pause and puts the candidate in cooldown
// for that long at once.
func (h *Health) RecordFailure(a Admission, reason Reason, retryAfter time.Duration, now time.Time) {
	h.mu.Lock()
	was := h.state
	h.recordFailureLocked(a, reason, retryAfter, now)
	h.unlockAndNotify(was, now)
}

func (h *Health) recordFailureLocked(a Admission, reason Reason, retryAfter time.Duration, now time.Time) {
	h.releaseLocked(a)
	h.outcomes++
	h.successRate = h.decayedSuccessRate(now) * (1 - ewmaWeight)
	h.rateAt = now
	h.lastFailure = reason

	if retryAfter > 0 {
		// However the hint was read, a pause never outlasts max_cooldown: one header must
		// not take a candidate out for longer than the operator's own worst case.
		h.openFor(min(retryAfter, h.policy.MaxCooldown), now, true)
		return
	}
	if h.state != Closed && a != Probe {
		// A late failure of a request admitted before the circuit opened is already
		// accounted for by the trip; it must not count as a failed probe.
		return
	}
	if h.state == HalfOpen || h.onTrial {
		// A failed probe re-opens the circuit with a longer cooldown; so does the first
		// live failure after a background probe closed it (its model list answers, its
		// generation does not), rather than threshold more failed client attempts.
		h.trip(now)
		return
	}
	cutoff := now.Add(-h.policy.Window)
	keep := h.failures[:0]
	for _, t := range h.failures {
		if t.After(cutoff) {
			keep = append(keep, t)
		}
	}
	h.failures = append(keep, now)
	if h.state == Closed && len(h.failures) >= h.policy.FailureThreshold {
		h.trip(now)
	}
}

// CircuitChange is a circuit leaving Closed (Opened, with the last failure's reason) or
// coming back to it. Half-open is still out of service: a move between open and
// half-open is no change.
type CircuitChange struct {
	Opened bool
	Reason Reason
	At     time.Time
}

// CircuitObserver hears a candidate's circuit changes. It is called without the health's
// lock held, on the goroutine that recorded the outcome: it must not block.
type CircuitObserver func(CircuitChange)

// SetObserver makes o hear this candidate's circuit changes, replacing any other (a
// reload's configuration takes over from the previous one's).
func (h *Health) SetObserver(o *CircuitObserver) { h.observer.Store(o) }

// RemoveObserver stops o hearing changes, unless another has replaced it already.
func (h *Health) RemoveObserver(o *CircuitObserver) { h.observer.CompareAndSwap(o, nil) }

// unlockAndNotify releases mu and tells the observer if the circuit left or came back to
// Closed since was. Nothing is allocated and no observer is loaded when nothing changed.
func (h *Health) unlockAndNotify(was CircuitState, now time.Time) {
	opened := was == Closed && h.state != Closed
	closed := was != Closed && h.state == Closed
	reason := h.lastFailure
	h.mu.Unlock()
	if !opened && !closed {
		return
	}
	if o := h.observer.Load(); o != nil {
		(*o)(CircuitChange{Opened: opened, Reason: reason, At: now})
	}
}

func (h *Health) releaseLocked(a Admission) {
	if a == Probe && h.probes > 0 {
		h.probes--
	}
}

// trip opens the circuit for a cooldown that doubles with each consecutive trip.
func (h *Health) trip(now time.Time) {
	cooldown := time.Duration(float64(h.policy.Cooldown) * math.Pow(2, float64(min(h.trips, 30))))
	h.trips++
	h.openFor(min(cooldown, h.policy.MaxCooldown), now, false)
	// With background probes the cooldown only matters if probing stops; the first probe
	// comes sooner. A candidate that trips again soon after a probe passed (its probe
	// endpoint answers, its generation does not) waits longer for it, up to the cap.
	h.probeWait = min(h.policy.ProbeInterval<<min(h.trips-1, 30), h.policy.ProbeMaxInterval)
	h.nextProbe = now.Add(h.probeWait)
}

// openFor opens the circuit for d; paused says the upstream asked for it: it is then not
// probed before it ends, and ends in half-open, with a background probe due at once
// where a prober looks after the candidate.
func (h *Health) openFor(d time.Duration, now time.Time, paused bool) {
	until := now.Add(d)
	if h.state == Open && h.openUntil.After(until) {
		// Never shorten a pause already in force; a probe still waits for this one.
		if paused && h.nextProbe.Before(until) {
			h.nextProbe = until
		}
		return
	}
	h.state = Open
	h.openUntil = until
	h.paused = paused
	h.onTrial = false
	h.openings++
	h.probeLease = time.Time{}
	h.failures = h.failures[:0]
	h.lastChange = now
	if paused {
		// Where background probes look after the candidate, one is due when the pause
		// ends (pauseOver), so that it comes back without waiting for traffic.
		h.nextProbe = until
		h.probeWait = h.policy.ProbeInterval
	}
}

// FailureThreshold is how many failures open the circuit: also the most attempts one
// request makes on the candidate, so that its retries alone never decide its health.
func (h *Health) FailureThreshold() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.policy.FailureThreshold
}

// MaxPause is the longest an upstream's Retry-After can pause the candidate: its
// max_cooldown.
func (h *Health) MaxPause() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.policy.MaxCooldown
}

// Reset forgets what the candidate's health has learnt (its circuit, cooldown or pause,
// recent failures, trips, success rate, latency and a probe's 404), so that it takes
// traffic again at once: an operator's way out when a candidate was taken out for a
// reason they know has passed. A probe or probe slot under way stays counted until it
// ends, but its result no longer applies.
func (h *Health) Reset(now time.Time) {
	h.mu.Lock()
	was := h.state
	h.state = Closed
	h.failures = h.failures[:0]
	h.trips = 0
	h.openUntil = time.Time{}
	h.paused = false
	h.openings++
	h.nextProbe, h.probeWait, h.probeLease = time.Time{}, 0, time.Time{}
	h.noProbe = false
	h.onTrial = false
	h.successRate, h.rateAt = 1, now
	h.ttfb = 0
	h.lastFailure = ReasonNone
	h.lastChange = now
	h.unlockAndNotify(was, now)
}

// decayedSuccessRate is the success rate with past failures fading: half of their weight
// goes every third of the window. Without it a candidate demoted by one failure would
// never be tried again while another is healthy, and so could never earn its place back.
// The fade runs from the last update of the stored rate (which already holds the fade up
// to then), so it is not applied twice. Caller holds mu.
func (h *Health) decayedSuccessRate(now time.Time) float64 {
	elapsed := now.Sub(h.rateAt)
	if h.successRate >= 1 || elapsed <= 0 {
		return h.successRate
	}
	halfLife := h.policy.Window / 3
	fade := math.Exp2(-float64(elapsed) / float64(halfLife))
	return 1 - (1-h.successRate)*fade
}

// score orders candidates of equal priority: higher is better. A candidate with a clean
// recent record beats one that is failing, by coarse bands so that one stray failure
// among many successes does not move all traffic. The top band is [0.9, 1]: a faded
// failure only approaches 1, so a band of its own for exactly 1 would keep a once-failed
// candidate behind a spotless one long after it recovered.
func (h *Health) score(now time.Time) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	band := min(math.Floor(h.decayedSuccessRate(now)*10), 9) // 0..9
	if h.state == HalfOpen {
		band = -1 // a probe goes last among the available
	}
	return band
}

// Snapshot is a copy of a candidate's health for the admin API and metrics.
type Snapshot struct {
	State            string        `json:"state"`
	SuccessRate      float64       `json:"success_rate"`
	TimeToFirstByte  time.Duration `json:"-"`
	TTFBMillis       float64       `json:"ttfb_ms"`
	RecentFailures   int           `json:"recent_failures"`
	ConsecutiveTrips int           `json:"consecutive_trips"`
	CooldownSeconds  float64       `json:"cooldown_remaining_s"`
	ProbesInFlight   int           `json:"probes_in_flight"`
	Outcomes         uint64        `json:"outcomes"`
	LastFailure      string        `json:"last_failure,omitempty"`
	Since            time.Time     `json:"state_since,omitzero"`
	// Probing is true while background probes, not live requests, are to close the
	// circuit; NextProbeSeconds is how long until the next is due (0: due or under way).
	Probing          bool    `json:"probing"`
	NextProbeSeconds float64 `json:"next_probe_s"`
	// ProbeNotOffered: the candidate answered a probe with 404 or 405, so live requests
	// probe it after the cooldown instead.
	ProbeNotOffered bool `json:"probe_not_offered,omitempty"`
	// Paused: the circuit is open because the upstream asked for a pause (Retry-After);
	// CooldownSeconds is then what is left of it.
	Paused bool `json:"paused,omitempty"`
}

// Snapshot reads the health at now.
func (h *Health) Snapshot(now time.Time) Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	s := Snapshot{
		State:            h.state.String(),
		SuccessRate:      math.Round(h.decayedSuccessRate(now)*1000) / 1000,
		TimeToFirstByte:  h.ttfb,
		TTFBMillis:       math.Round(float64(h.ttfb)/1e4) / 100,
		RecentFailures:   len(h.failures),
		ConsecutiveTrips: h.trips,
		ProbesInFlight:   h.probes,
		Outcomes:         h.outcomes,
		LastFailure:      string(h.lastFailure),
		Since:            h.lastChange,
		Probing:          h.awaitingProbe() || h.pauseOver(),
		ProbeNotOffered:  h.noProbe,
	}
	if s.Probing {
		s.NextProbeSeconds = math.Round(max(h.nextProbe.Sub(now), 0).Seconds()*100) / 100
	}
	if h.state == Open && (h.paused || !s.Probing) {
		// A pause is shown whether a probe or a live request ends it; a cooldown only
		// when no probe comes sooner.
		s.Paused = h.paused
		s.CooldownSeconds = math.Round(max(h.openUntil.Sub(now), 0).Seconds()*100) / 100
	}
	return s
}

// State reads the circuit state at now.
func (h *Health) State(now time.Time) CircuitState {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.advance(now)
	return h.state
}

// recentTTFB is the moving average of time to first byte of successful attempts: zero
// until one has succeeded. The ordering uses it to prefer the faster of equals.
func (h *Health) recentTTFB() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ttfb
}
