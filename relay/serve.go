package relay

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Limits on what the gateway holds of one upstream answer. An answer over them is the
// candidate's failure before the first byte, and ends a stream with the family's error
// event after it: no upstream can grow the process without bound.
const (
	// MaxJSONBody bounds a non-streamed answer, read whole to put the service model in.
	MaxJSONBody = 64 << 20
	// MaxErrorBody bounds an upstream error body passed back to the client.
	MaxErrorBody = 1 << 20
)

// Request is what the gateway forwards: the client's request after model resolution.
type Request struct {
	Op           protocols.Operation
	ServiceModel string
	// Body is the client's body: read whole, or still arriving and forwarded as it
	// comes until it is whole.
	Body   Body
	Header http.Header
	// ClientKeys are the secrets the client sent in its key headers, which are no longer
	// in Header: a forwarded header holding one is not sent (see
	// protocols.UpstreamRequestHeader).
	ClientKeys []string
	RawQuery   string
	// ID is the gateway's id of the request: it stands in a channel's error bodies where
	// the provider named its own.
	ID string
	// DeclaredOutputCap is the model's declared output cap (zero for none). A generation
	// request that sets no cap of its own is sent with it, so the upstream enforces the
	// cap admission reserved for.
	DeclaredOutputCap int64
	// Timeout is the model's request deadline: what the request may spend, from its whole
	// body on, before an answer's first byte (zero: no deadline beyond each attempt's).
	Timeout time.Duration
	// FailoverAfterTimeout lets a request whose attempt timed out after the upstream had
	// the whole body go on to the next candidate. Off, the request ends there with a 504:
	// the upstream may still be doing (and billing) the work, and another candidate would
	// do it again.
	FailoverAfterTimeout bool
	// Preferred is the Identity of the candidate that served this conversation last;
	// it is tried first while it is available.
	Preferred string
	// Finalize, when set, is called once per answer that reached the client, just
	// before the answer's last bytes are written: a record made there (the usage ledger)
	// exists for every answer a client saw complete, even if the process dies a moment
	// later. It is also called, once, for an answer read on after the client left (once
	// the upstream had the whole body, the work is done and billed upstream regardless).
	Finalize func(*Outcome)
	// KeepFinishReason asks for a whole answer's finish reason too, one lookup more over
	// its body (a stream's is observed anyway): traces want it, nothing else does.
	KeepFinishReason bool
	// Drain, when set, ends the request once the gateway's grace period for requests in
	// flight has run out on a stop: an answer still streaming then ends with the
	// family's error event, billed for what it carried, and one not yet begun is answered
	// with 503. Unlike the client's leaving, it never makes the answer look abandoned.
	Drain *Drain
}

// Attempt records one try on one candidate.
type Attempt struct {
	Candidate string
	// Retry is which retry on its candidate the attempt was (0: the first try), and Wait
	// the back-off it waited before it started.
	Retry  int
	Wait   time.Duration
	Reason routing.Reason // empty for the attempt that served the request
	Status int            // upstream status, 0 when none was received
	// Start is when the attempt began, after its wait; Duration is how long it took.
	Start    time.Time
	Duration time.Duration
	// RetryAfter is the pause the upstream asked for, when it gave one, bounded by the
	// candidate's max_cooldown (routing.RetryAfter).
	RetryAfter time.Duration
	// Blameless is a failure that came while the client's body was still being
	// forwarded: a slow client could have caused it, so the candidate's health does not
	// move (a failed dial is always the candidate's).
	Blameless bool
	// Abandoned is a timeout (the candidate's, or the request's deadline) after the
	// upstream had the whole body: it may still be generating, and billing, the answer.
	// It is not retried, does not move health, and is billed (Outcome.Abandoned).
	Abandoned bool
}

// Outcome describes how a request went, for logs, metrics, health and metering.
type Outcome struct {
	Attempts []Attempt
	// Served is the candidate whose answer reached the client, or was read on and
	// metered after the client left; nil when none did.
	Served *Upstream
	Status int
	Stream bool
	// TimeToFirstByte is from the start of Serve to the first byte sent to the client.
	TimeToFirstByte time.Duration
	// StreamError is set when a committed answer failed before its natural end, or
	// carried the upstream's own error event; StreamEnd names it.
	StreamError error
	// DeadlineExceeded is set when the request's deadline, not its candidates, ended
	// the attempts before any answer.
	DeadlineExceeded bool
	// ClientGone is set when the client went away before the answer was complete.
	ClientGone bool
	// Obs is what the answer's shape observed: usage, text sizes, completeness.
	Obs protocols.Observation
	// Latency runs from the start of Serve to the end of the answer, when Finalize runs.
	Latency time.Duration
	// Abandoned counts the attempts given up after the upstream had the whole body
	// (Attempt.Abandoned) whose work the answer Finalize records does not already stand
	// for: each is billed the request's input, estimated.
	Abandoned int
	// TimedOut is set when the request ended with a 504 because an attempt was
	// abandoned (or with a 503, Drained, the gateway's stop having ended it): Served is
	// then that attempt's candidate, billed for the work it was given, and no answer
	// reached the client.
	TimedOut bool
	// Drained is set when the gateway's stop ended an attempt whose upstream had the
	// whole request, before any answer.
	Drained bool

	start     time.Time
	finalized bool
}

// Result names how the request ended, for metrics: success, client_error (an upstream
// 4xx passed back), stream_error, client_gone, deadline, shutdown, upstream_timeout or
// no_channel.
func (out *Outcome) Result() string {
	switch {
	case out.ClientGone:
		return "client_gone"
	case out.DeadlineExceeded:
		return "deadline"
	case out.Drained:
		return "shutdown"
	case out.TimedOut:
		return "upstream_timeout"
	case out.Served == nil:
		return "no_channel"
	case out.StreamError != nil:
		return "stream_error"
	case out.Status >= 400:
		return "client_error"
	}
	return "success"
}

// finalize runs the request's Finalize hook once.
func (out *Outcome) finalize(req *Request, up *Upstream) {
	if out.finalized {
		return
	}
	out.finalized = true
	out.Served = up
	for _, a := range out.Attempts {
		if a.Abandoned {
			out.Abandoned++
		}
	}
	if out.TimedOut {
		out.Abandoned-- // the record Finalize makes is this attempt's own
	}
	out.Latency = time.Since(out.start)
	if req.Finalize != nil {
		req.Finalize(out)
	}
}

// Serve tries the model's upstreams, best first by health, until one commits an answer
// to w. Upstreams whose circuit is open are skipped without cost. A failure that another
// attempt can fix (routing.Retryable) is retried on the same candidate, within its
// retries, once every other candidate has had its turn: a healthy alternative answers at
// once, where a retry must first wait out its back-off. All of it fits in the request's
// deadline. It returns an APIError, with nothing written, when none could serve; the
// caller renders it.
func Serve(ctx context.Context, w http.ResponseWriter, req *Request, upstreams []*Upstream) (*Outcome, *protocols.APIError) {
	start := time.Now()
	room := 0
	for _, up := range upstreams {
		room += 1 + max(up.Candidate.Retry.Retries, 0)
	}
	s := &serving{ctx: ctx, w: w, req: req, upstreams: upstreams, deadline: &deadline{timeout: req.Timeout},
		out: &Outcome{Attempts: make([]Attempt, 0, room), start: start}}
	// The deadline runs from the whole body on: a slow upload does not use up the time
	// the candidates are given.
	req.Body.whenPassed(func(*protocols.ParsedRequest) { s.deadline.begin(time.Now()) })
	s.opts = make([]routing.LiveCandidate, len(upstreams))
	preferred := -1
	for i, up := range upstreams {
		s.opts[i] = routing.LiveCandidate{Candidate: up.Candidate, Health: up.HealthFor(req.Op)}
		if req.Preferred != "" && up.Identity == req.Preferred {
			preferred = i
		}
	}
	for _, i := range routing.Order(s.opts, preferred, start) {
		if s.try(i, 0, 0) {
			return s.out, s.err
		}
	}
	// Every candidate had its turn; retries go soonest first.
	for len(s.retries) > 0 {
		next := 0
		for j, r := range s.retries {
			if r.at.Before(s.retries[next].at) {
				next = j
			}
		}
		r := s.retries[next]
		s.retries = slices.Delete(s.retries, next, next+1)
		if !s.waitUntil(r.at) {
			break
		}
		if s.try(r.pos, r.n, r.wait) {
			return s.out, s.err
		}
	}
	if s.ctx.Err() != nil {
		s.out.ClientGone = true
		return s.out, nil
	}
	if s.abandoned != nil {
		// Failed over after a timeout and no other candidate served: the request ends as
		// it would have without failing over, billed for the first abandoned attempt.
		s.timedOut(s.abandoned)
		return s.out, s.err
	}
	if s.outOfTime {
		// The request's own time ran out, not its candidates: saying none was available
		// would send the client to retry a request that needs a longer deadline.
		s.out.DeadlineExceeded = true
		return s.out, protocols.ErrDeadline(req.Op.Family, req.ServiceModel, req.Timeout)
	}
	if s.notOffered > 0 && s.notOffered == len(s.out.Attempts) {
		return s.out, protocols.ErrSubOperationNotOffered(req.Op, req.ServiceModel)
	}
	return s.out, noChannel(req, s.opts)
}

// serving is one request on its way through its candidates.
type serving struct {
	ctx       context.Context
	w         http.ResponseWriter
	req       *Request
	upstreams []*Upstream
	opts      []routing.LiveCandidate
	deadline  *deadline
	out       *Outcome
	err       *protocols.APIError

	retries    []retryLater
	notOffered int
	// outOfTime is set once the deadline cut an attempt short or left a candidate
	// untried.
	outOfTime bool
	// abandoned is the first attempt given up after the upstream had the whole body.
	abandoned *abandonedAttempt
}

// abandonedAttempt is an attempt the gateway gave up on after its upstream had the whole
// body, and the limit that ran out.
type abandonedAttempt struct {
	up  *Upstream
	ran limit
}

// retryLater is a retry waiting for its time.
type retryLater struct {
	pos  int           // the candidate's place in upstreams
	n    int           // which retry it is, 1 for the first
	at   time.Time     // when it may start
	wait time.Duration // how long it will have waited
}

// try makes one attempt on candidate pos (retry n, after waiting wait); it reports
// whether the request is over, with s.out and s.err its result.
func (s *serving) try(pos, n int, wait time.Duration) bool {
	up, health := s.upstreams[pos], s.opts[pos].Health
	now := time.Now()
	if s.draining() {
		return true
	}
	if s.deadline.passed(now) {
		s.outOfTime = true
		return false
	}
	admission := health.Admit(now)
	if admission == routing.Refused {
		return false // its circuit opened, or another request took the last probe slot
	}
	out := s.out
	// Recorded before the attempt runs, so that the Finalize hook inside it sees every
	// attempt, its own included. Attempts has room for every attempt Serve can make: no
	// reallocation moves the record the attempt writes to.
	out.Attempts = append(out.Attempts, Attempt{Candidate: up.Candidate.Name, Retry: n, Wait: wait, Start: now})
	att := &out.Attempts[len(out.Attempts)-1]
	a := &attempt{ctx: s.ctx, w: s.w, req: s.req, up: up, out: out, att: att, start: out.start, deadline: s.deadline}
	committed := a.run()
	end := time.Now()
	att.Duration = end.Sub(now)

	switch {
	case committed:
		out.Served = up
		// The candidate's own time to first byte, from its attempt's start.
		health.RecordSuccess(admission, max(out.TimeToFirstByte-now.Sub(out.start), 0), end)
		if out.StreamError != nil && !out.ClientGone && !errors.Is(out.StreamError, errUpstreamErrorEvent) && !errors.Is(out.StreamError, errDrained) {
			// Failed after the first byte: too late to fail over, not too late to learn.
			// The upstream's own error event is left out: what it says may be the
			// request's doing, and nothing a client sends may move a candidate's health.
			health.RecordFailure(routing.Admitted, routing.ReasonBrokenBody, 0, end)
		}
		return true
	case s.ctx.Err() != nil:
		// The client left; that says nothing about the candidate, whether its answer
		// was read on and metered (Served is then set) or not. No other is tried. An
		// answer the read-on gave up on was still work the upstream had: billed.
		if att.Abandoned {
			s.billAbandoned(&abandonedAttempt{up: up, ran: a.abandonedAt}, http.StatusGatewayTimeout)
		}
		att.Reason = routing.ReasonClientGone
		health.Release(admission)
		out.ClientGone = true
		return true
	case att.Reason == routing.ReasonClientBody:
		health.Release(admission)
		s.err = a.bodyErr
		return true
	case a.clock != nil && a.clock.drained.Load():
		// The gateway's stop cut the attempt, not the candidate: nothing moves, and no
		// other candidate is tried. An upstream that had the whole request may be
		// generating it still: that work is billed, as an abandoned attempt's is.
		health.Release(admission)
		if a.wholeWithUpstream() {
			att.Abandoned = true
			out.Drained = true
			s.billAbandoned(&abandonedAttempt{up: up, ran: limit{"grace_period", 0}}, http.StatusServiceUnavailable)
		}
		s.draining()
		return true
	case att.Abandoned:
		// Not retried and not held against the candidate; billed. Failing over would have
		// another upstream start the same work, which the operator may allow.
		health.Release(admission)
		if s.abandoned == nil {
			s.abandoned = &abandonedAttempt{up: up, ran: a.abandonedAt}
		}
		if !s.req.FailoverAfterTimeout || att.Reason == routing.ReasonDeadline {
			s.timedOut(s.abandoned)
			return true
		}
		return false
	case att.Reason == routing.ReasonDeadline:
		health.Release(admission)
		s.outOfTime = true
		return false
	case att.Blameless:
		health.Release(admission)
		return false
	case att.Reason == routing.ReasonNotOffered:
		// Not the candidate's failure: it simply lacks this sub-operation.
		health.Release(admission)
		s.notOffered++
		return false
	}
	hint := cooldownHint(*att)
	health.RecordFailure(admission, att.Reason, hint, end)
	// A pause asked for that is longer than the longest back-off is the client's to wait
	// out, told by Retry-After; a retry that could not start before the deadline is not
	// made either. The request then fails over, or is answered, at once. Nor does one
	// request make more attempts on a candidate than would open its circuit: a probe that
	// passes in between must not let its retries go on failing there.
	retry := up.Candidate.Retry
	if n < retry.Retries && n+1 < health.FailureThreshold() && routing.Retryable(att.Reason, att.Status) && hint <= retry.MaxBackoff {
		wait := retry.Wait(n+1, hint, rand.Float64())
		if at := end.Add(wait); !s.deadline.passed(at) {
			s.retries = append(s.retries, retryLater{pos: pos, n: n + 1, at: at, wait: wait})
		}
	}
	return false
}

// draining reports whether the gateway's grace for requests in flight has run out; the
// request is then over, answered with 503 since no answer began.
func (s *serving) draining() bool {
	if s.req.Drain == nil || !s.req.Drain.Ended() {
		return false
	}
	s.err = protocols.ErrShuttingDown(s.req.Op.Family, s.req.ServiceModel)
	return true
}

// timedOut ends the request with a 504 naming the limit that ran out, and bills the
// abandoned attempt: its upstream had the whole request, so the work was started.
func (s *serving) timedOut(ab *abandonedAttempt) {
	s.billAbandoned(ab, http.StatusGatewayTimeout)
	if ab.ran.name == requestTimeoutName {
		// The request's own deadline ran out, not a limit of the candidate's: told as
		// the deadline, and not to be sent again, since the upstream had the work.
		s.out.DeadlineExceeded = true
		e := protocols.ErrDeadline(s.req.Op.Family, s.req.ServiceModel, ab.ran.d)
		e.NoRetry = true
		s.err = e
		return
	}
	s.err = protocols.ErrUpstreamTimeout(s.req.Op.Family, s.req.ServiceModel, ab.ran.name, ab.ran.d)
}

// billAbandoned records the abandoned attempt through Finalize with status (a 504, or a
// 503 for one the gateway's stop ended): nothing of the answer came, so its input is
// billed as admission estimates it, flagged estimated.
func (s *serving) billAbandoned(ab *abandonedAttempt, status int) {
	out, req := s.out, s.req
	out.TimedOut = true
	out.Status = status
	out.Obs = protocols.Observation{Billable: req.Op.Generates()}
	out.finalize(req, ab.up)
}

// waitUntil waits for t; it reports false when the client left meanwhile.
func (s *serving) waitUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	var drain <-chan struct{}
	if s.req.Drain != nil {
		drain = s.req.Drain.done
	}
	select {
	case <-timer.C:
		return true
	case <-s.ctx.Done():
		return false
	case <-drain:
		return true // the next try answers that the gateway is stopping
	}
}

// deadline is a request's deadline for an answer's first byte. It starts once the whole
// body has arrived; before that, none runs.
type deadline struct {
	timeout time.Duration // zero: none
	at      atomic.Int64  // Unix nanoseconds; zero until it starts
}

func (d *deadline) begin(now time.Time) {
	if d.timeout > 0 {
		d.at.CompareAndSwap(0, now.Add(d.timeout).UnixNano())
	}
}

// left is the time that remains, and whether a deadline runs at all.
func (d *deadline) left(now time.Time) (time.Duration, bool) {
	at := d.at.Load()
	if at == 0 {
		return 0, false
	}
	return time.Unix(0, at).Sub(now), true
}

// passed reports whether the deadline runs and is over at t.
func (d *deadline) passed(t time.Time) bool {
	left, ok := d.left(t)
	return ok && left <= 0
}

// cooldownHint is how long an upstream asked to be left alone: a 429 or 503 with
// Retry-After (or retry-after-ms).
func cooldownHint(a Attempt) time.Duration {
	if a.RetryAfter > 0 && (a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable) {
		return a.RetryAfter
	}
	return 0
}

// noChannel is the answer when no candidate could serve: 503 with a Retry-After that is
// when the soonest candidate leaves its cooldown (at least one second).
func noChannel(req *Request, opts []routing.LiveCandidate) *protocols.APIError {
	now := time.Now()
	wait := routing.SoonestReady(opts, now).Sub(now).Seconds()
	return protocols.ErrNoChannel(req.Op.Family, req.ServiceModel, int(math.Ceil(wait)))
}
