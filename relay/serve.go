package relay

import (
	"context"
	"math"
	"net/http"
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
	Body     Body
	Header   http.Header
	RawQuery string
	// DeclaredOutputCap is the model's declared output cap (zero for none). A generation
	// request that sets no cap of its own is sent with it, so the upstream enforces the
	// cap admission reserved for.
	DeclaredOutputCap int64
	// Preferred is the Identity of the candidate that served this conversation last;
	// it is tried first while it is available.
	Preferred string
	// Finalize, when set, is called once per answer that reached the client, just
	// before the answer's last bytes are written: a record made there (the usage ledger)
	// exists for every answer a client saw complete, even if the process dies a moment
	// later. It is also called, once, for an answer read on after the client left (once
	// the upstream had the whole body, the work is done and billed upstream regardless).
	Finalize func(*Outcome)
}

// Attempt records one try on one candidate.
type Attempt struct {
	Candidate string
	Reason    routing.Reason // empty for the attempt that served the request
	Status    int            // upstream status, 0 when none was received
	Duration  time.Duration
	// RetryAfter is the upstream's retry hint in seconds, when it gave one.
	RetryAfter float64
	// Blameless is a failure that came while the client's body was still being
	// forwarded: a slow client could have caused it, so the candidate's health does not
	// move (a failed dial is always the candidate's).
	Blameless bool
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
	// StreamError is set when a committed answer failed before its natural end.
	StreamError error
	// ClientGone is set when the client went away before the answer was complete.
	ClientGone bool
	// Obs is what the answer's shape observed: usage, text sizes, completeness.
	Obs protocols.Observation
	// Served is set before Finalize runs; Latency is from the start of Serve to Finalize.
	Latency time.Duration

	start     time.Time
	finalized bool
}

// Result names how the request ended, for metrics: success, client_error (an upstream
// 4xx passed back), stream_error, client_gone or no_channel.
func (out *Outcome) Result() string {
	switch {
	case out.ClientGone:
		return "client_gone"
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
	out.Latency = time.Since(out.start)
	if req.Finalize != nil {
		req.Finalize(out)
	}
}

// Serve tries the model's upstreams, best first by health, until one commits an answer
// to w. Upstreams whose circuit is open are skipped without cost. It returns an
// APIError, with nothing written, when none could serve; the caller renders it.
func Serve(ctx context.Context, w http.ResponseWriter, req *Request, upstreams []*Upstream) (*Outcome, *protocols.APIError) {
	start := time.Now()
	out := &Outcome{Attempts: make([]Attempt, 0, len(upstreams)), start: start}
	opts := make([]routing.Option, len(upstreams))
	preferred := -1
	for i, up := range upstreams {
		opts[i] = routing.Option{Candidate: up.Candidate, Health: up.HealthFor(req.Op)}
		if req.Preferred != "" && up.Identity == req.Preferred {
			preferred = i
		}
	}
	notOffered := 0
	for _, i := range routing.Order(opts, preferred, start) {
		up := upstreams[i]
		health := opts[i].Health
		admission := health.Admit(time.Now())
		if admission == routing.Refused {
			continue // another request took the last probe slot meanwhile
		}
		attemptStart := time.Now()
		// Recorded before the attempt runs, so that the Finalize hook inside it sees every
		// attempt, its own included. Attempts has room for every upstream: no reallocation.
		out.Attempts = append(out.Attempts, Attempt{Candidate: up.Candidate.Name})
		att := &out.Attempts[len(out.Attempts)-1]
		try := &attempt{ctx: ctx, w: w, req: req, up: up, out: out, att: att, start: start}
		committed := try.run()
		now := time.Now()
		att.Duration = now.Sub(attemptStart)

		switch {
		case committed:
			out.Served = up
			health.RecordSuccess(admission, out.TimeToFirstByte, now)
			if out.StreamError != nil && !out.ClientGone {
				// Failed after the first byte: too late to fail over, not too late to learn.
				health.RecordFailure(routing.Admitted, routing.ReasonBrokenBody, 0, now)
			}
			return out, nil
		case ctx.Err() != nil:
			// The client left; that says nothing about the candidate, whether its answer
			// was read on and metered (Served is then set) or not. No other is tried.
			att.Reason = routing.ReasonClientGone
			health.Release(admission)
			out.ClientGone = true
			return out, nil
		case att.Reason == routing.ReasonClientBody:
			health.Release(admission)
			return out, try.bodyErr
		case att.Blameless:
			health.Release(admission)
			continue
		case att.Reason == routing.ReasonNotOffered:
			// Not the candidate's failure: it simply lacks this sub-operation.
			health.Release(admission)
			notOffered++
			continue
		}
		health.RecordFailure(admission, att.Reason, cooldownHint(*att), now)
	}
	if notOffered > 0 && notOffered == len(out.Attempts) {
		return out, protocols.ErrSubOperationNotOffered(req.Op, req.ServiceModel)
	}
	return out, noChannel(req, opts)
}

// cooldownHint is how long an upstream asked to be left alone: a 429 or 503 with
// Retry-After (or retry-after-ms).
func cooldownHint(a Attempt) time.Duration {
	if a.RetryAfter > 0 && (a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable) {
		return time.Duration(a.RetryAfter * float64(time.Second))
	}
	return 0
}

// noChannel is the answer when no candidate could serve: 503 with a Retry-After that is
// when the soonest candidate leaves its cooldown (at least one second).
func noChannel(req *Request, opts []routing.Option) *protocols.APIError {
	now := time.Now()
	wait := routing.SoonestReady(opts, now).Sub(now).Seconds()
	return protocols.ErrNoChannel(req.Op.Family, req.ServiceModel, int(math.Ceil(wait)))
}
