package relay

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// After the client has gone (once the stream's headers came), the gateway reads on for
// the usage that ends most streams, within these bounds, so that the work is billed from
// real counts.
const (
	clientGoneGrace = 2 * time.Second
	clientGoneBytes = 64 << 10
)

// A stream's output buffer is taken from this pool while there is output and given back
// before each read that may wait on the upstream: an idle stream holds none, and ten
// thousand open streams must fit in memory. (It reads into its EventStream's buffer.)
var scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// maxPooledScratch is the largest output buffer put back in the pool; one that grew for
// a huge event is left to the garbage collector.
const maxPooledScratch = 64 << 10

func takeScratch() []byte { return (*scratchBufs.Get().(*[]byte))[:0] }

func giveScratch(b []byte) {
	if b != nil && cap(b) <= maxPooledScratch {
		b = b[:0]
		scratchBufs.Put(&b)
	}
}

// relayStream holds the answer until the first event with data has arrived, fails over
// if that event is an error, and otherwise relays every event as soon as it is complete.
// The usage record is made before the bytes that end the answer are written, on every
// way a stream can end; the bytes themselves are the upstream's, only the model changed.
//
// A client that left after the upstream had the whole body, and before the first byte,
// is not written to: the stream is read on within the same bounds as after the first
// byte, and billed from what was read. It then reports no commit, so that Serve takes the
// client's leaving as it does before commit: no failover, the candidate's health as it was.
func (a *attempt) relayStream(injectedUsage bool) bool {
	req, out, clock := a.req, a.out, a.clock
	events := protocols.NewEventStream(req.Op.Kind, req.ServiceModel, injectedUsage, a.scrub)
	pending := takeScratch()
	defer func() { giveScratch(pending); events.Release() }()
	clock.streaming.Store(true)
	if a.ctx.Err() != nil {
		clock.clientGone() // it left before the headers came
	}
	// The headers came: the first event has a limit of its own, so that an upstream
	// that answers at once and then says nothing is moved on from in seconds.
	clock.limitFirstEvent(firstEventLimit(a.up.Candidate), a.deadline)

	// The gate: nothing is committed until an event that carries data is in hand.
	// Comments and keep-alive frames before it are held and sent with it; if it turns
	// out to be an error they are dropped with the rest of the attempt.
	var first protocols.Event
	for found := false; !found; {
		ev, ok := events.Next()
		if ok {
			if len(ev.Data) == 0 {
				pending = append(pending, ev.Raw...)
				continue
			}
			first, found = ev, true
			break
		}
		if events.Overflowed() || len(pending) > protocols.MaxEventSize {
			a.att.Reason = routing.ReasonBadResponse
			return false
		}
		n, err := events.Fill(a.resp.Body)
		if err != nil && n == 0 {
			a.att.Reason = brokenOrTimedOut(clock, err)
			if clock.clientLeft.Load() && clock.timedOut.Load() {
				// The read-on's own bound ended it, not the upstream, which has the prompt:
				// billed as an estimate.
				a.meterGone(events.Obs)
			}
			return false
		}
	}
	if events.IsError(first) {
		a.att.Reason = routing.ReasonInBand
		return false
	}
	if events.Unreadable(first) {
		a.att.Reason = routing.ReasonBadResponse
		return false
	}

	gone := a.ctx.Err() != nil
	if gone {
		out.Status, out.ClientGone = a.resp.StatusCode, true
	} else {
		a.commit(-1)
	}
	clock.activity() // from here on the idle limit applies
	out.Stream = true
	flush := flusher(a.w)
	// finish records what the stream carried and runs the Finalize hook: before the
	// terminal event is written when there is one, else before the last bytes.
	finish := func() {
		out.Obs = events.Obs
		out.finalize(req, a.up)
	}
	defer finish()
	pending, _ = events.AppendRewritten(pending, first)
	var readErr error
	readOn := 0 // bytes read after the client left
	for {
		for ev, ok := events.Next(); ok && !events.Broken(); ev, ok = events.Next() {
			pending, _ = events.AppendRewritten(pending, ev)
		}
		if events.Errored() && out.StreamError == nil {
			// The upstream's own error event is passed on as it came (scrubbed); the
			// answer still failed, for the request log and the metrics.
			out.StreamError = errUpstreamErrorEvent
		}
		if events.Overflowed() && (readErr == nil || errors.Is(readErr, io.EOF)) {
			readErr = errEventTooLarge
		}
		if events.Broken() && (readErr == nil || errors.Is(readErr, io.EOF)) {
			readErr = errUnreadableEvent
		}
		if clock.clientLeft.Load() {
			out.ClientGone = true
		}
		if errors.Is(readErr, io.EOF) {
			// An upstream that ends without a final blank line still sent its last event:
			// it is observed, and passed on as it came (unless it cannot be read).
			if ev, ok := events.Unterminated(); ok {
				if pending, _ = events.AppendRewritten(pending, ev); events.Broken() {
					readErr = errUnreadableEvent
				}
			}
		}
		switch {
		case readErr == nil, errors.Is(readErr, io.EOF):
		case out.ClientGone || a.ctx.Err() != nil:
			out.ClientGone = true
		default:
			// The upstream failed, stalled or overflowed after the client saw the start of
			// the answer: no failover is possible any more, so end the stream the way the
			// family ends a failed one.
			out.StreamError = readErr
			why := protocols.StreamInterrupted
			switch {
			case clock.drained.Load():
				// The gateway's grace for answers in flight ran out: ended as a broken
				// upstream would end it, billed for what was relayed.
				out.StreamError = errDrained
				why = protocols.StreamShutdown
			case errors.Is(readErr, errEventTooLarge):
				why = protocols.StreamOversized
			case errors.Is(readErr, errUnreadableEvent):
				why = protocols.StreamMalformed
			case clock.timedOut.Load():
				out.StreamError = errIdle
				why = protocols.StreamStalled
			}
			pending = append(pending, events.ErrorEvent(protocols.ErrStreamEnded(req.Op.Family, why))...)
		}
		if events.Obs.Complete || readErr != nil {
			finish()
		}
		if len(pending) > 0 && !out.ClientGone {
			if out.TimeToFirstByte == 0 {
				out.TimeToFirstByte = time.Since(a.start)
			}
			if _, err := a.w.Write(pending); err != nil {
				out.ClientGone = true
				clock.clientGone()
			} else {
				flush()
			}
		}
		pending = pending[:0]
		if readErr != nil || out.ClientGone && (events.Obs.Complete || events.Obs.UsageFinal || readOn >= clientGoneBytes) {
			break
		}
		giveScratch(pending) // nothing to send while waiting for the upstream
		n, err := events.Fill(a.resp.Body)
		pending = takeScratch()
		if n > 0 {
			clock.activity()
			if out.ClientGone {
				readOn += n
			}
		}
		readErr = err
	}
	return !gone
}

var errEventTooLarge = errors.New("upstream event exceeds the gateway's limit")

var errUnreadableEvent = errors.New("upstream event is not one JSON object")

var errIdle = errors.New("upstream idle for longer than the idle limit")

var errUpstreamErrorEvent = errors.New("upstream sent an error event after the stream began")

var errDrained = errors.New("the gateway's grace period for answers in flight ran out")

// StreamEnd names why a stream that reached the client ended in an error event, for the
// request log: upstream_error (the upstream's own error event, passed on), and for the
// gateway's own error event malformed_event, oversized_event, stalled, interrupted (the
// upstream broke off) or shutdown (the gateway's grace period on a stop ran out). Empty
// when the answer did not end so.
func (out *Outcome) StreamEnd() string {
	switch err := out.StreamError; {
	case err == nil:
		return ""
	case errors.Is(err, errUpstreamErrorEvent):
		return "upstream_error"
	case errors.Is(err, errUnreadableEvent):
		return "malformed_event"
	case errors.Is(err, errEventTooLarge):
		return "oversized_event"
	case errors.Is(err, errIdle):
		return "stalled"
	case errors.Is(err, errDrained):
		return "shutdown"
	}
	return "interrupted"
}

func flusher(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	return func() { _ = rc.Flush() }
}
