package relay

import (
	"context"
	"errors"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
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

// After the client has gone, the gateway reads on for the usage that ends most streams,
// within these bounds, so that what the client received is billed from real counts.
const (
	clientGoneGrace = 2 * time.Second
	clientGoneBytes = 64 << 10
)

// Request is what the gateway forwards: the client's request after model resolution.
type Request struct {
	Op           protocols.Operation
	ServiceModel string
	// Parsed is the client's body with its top-level fields located.
	Parsed   *protocols.ParsedRequest
	Header   http.Header
	RawQuery string
	// Preferred is the Identity of the candidate that served this conversation last;
	// it is tried first while it is available.
	Preferred string
	// Finalize, when set, is called once per answer that reached the client, just
	// before the answer's last bytes are written: a record made there (the usage ledger)
	// exists for every answer a client saw complete, even if the process dies a moment
	// later.
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
}

// Outcome describes how a request went, for logs, metrics, health and metering.
type Outcome struct {
	Attempts []Attempt
	// Served is the candidate whose answer reached the client; nil when none did.
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

// A stream holds its read and output buffers for as long as it is open, so they are kept
// small: SSE events are small, and ten thousand open streams must fit in memory.
var (
	readBufs    = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}
	scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}
)

// maxPooledScratch is the largest output buffer put back in the pool; one that grew for
// a huge event is left to the garbage collector.
const maxPooledScratch = 64 << 10

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
		committed := try(ctx, w, req, up, out, att, start)
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
			// The client left; that says nothing about the candidate.
			att.Reason = routing.ReasonClientGone
			health.Release(admission)
			out.ClientGone = true
			return out, nil
		case att.Reason == routing.ReasonNotOffered:
			// Not the candidate's failure: it simply lacks this sub-operation.
			health.Release(admission)
			notOffered++
			continue
		}
		health.RecordFailure(admission, att.Reason, cooldownHint(*att), now)
	}
	if notOffered > 0 && notOffered == len(out.Attempts) {
		e := protocols.Errorf(req.Op.Family, http.StatusNotFound, "unsupported_operation",
			"model '%s' does not offer %s", req.ServiceModel, req.Op.Kind)
		e.NoRetry = true
		return out, e
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
	e := protocols.Errorf(req.Op.Family, http.StatusServiceUnavailable, protocols.CodeNoChannel,
		"%s: model '%s' has no candidate available to serve this request right now; retry later", protocols.CodeNoChannel, req.ServiceModel)
	e.RetryAfter = max(1, int(math.Ceil(wait)))
	return e
}

// attemptClock ends an attempt that is too slow: before commit, at the first-byte limit;
// after it, when the upstream is silent for longer than the idle limit, or once the
// client has gone and the grace for reading on has passed.
type attemptClock struct {
	timer    *time.Timer
	idle     time.Duration
	timedOut atomic.Bool
	// committed is set once the answer's status went to the client; clientLeft once the
	// client went away after that.
	committed, clientLeft atomic.Bool
}

func startClock(firstByte, idle time.Duration, cancel context.CancelFunc) *attemptClock {
	c := &attemptClock{idle: idle}
	c.timer = time.AfterFunc(firstByte, func() {
		c.timedOut.Store(true)
		cancel()
	})
	return c
}

// activity restarts the idle limit after a read from the upstream, unless the client
// has gone: then only the grace counts.
func (c *attemptClock) activity() {
	if !c.clientLeft.Load() {
		c.timer.Reset(c.idle)
	}
}

// clientGone starts the bounded read-on after the client left a committed answer.
func (c *attemptClock) clientGone() {
	if c.clientLeft.CompareAndSwap(false, true) {
		c.timer.Reset(clientGoneGrace)
	}
}

func (c *attemptClock) stop() { c.timer.Stop() }

// try makes one attempt and reports whether it committed an answer to the client.
func try(ctx context.Context, w http.ResponseWriter, req *Request, up *Upstream, out *Outcome, att *Attempt, start time.Time) bool {
	cand := up.Candidate
	body, injectedUsage := req.Parsed.Upstream(req.Op, cand.UpstreamModel)
	// The upstream call is not tied to the client's context directly: before commit a
	// departing client cancels it at once, after commit it is read on briefly for usage.
	attemptCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	clock := startClock(firstByteLimit(cand, req.Parsed.Streamed()), idleLimit(cand), cancel)
	defer clock.stop()
	stopWatching := context.AfterFunc(ctx, func() {
		if clock.committed.Load() {
			clock.clientGone()
		} else {
			cancel()
		}
	})
	defer stopWatching()

	upReq := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: up.scheme, Host: up.host, Path: up.basePath + req.Op.UpstreamPath(), RawQuery: req.RawQuery},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        protocols.UpstreamRequestHeader(req.Header, cand.Protocol, cand.Credential),
		Body:          io.NopCloser(body.Reader()),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(body.Reader()), nil },
		ContentLength: int64(body.Len()),
		Host:          up.host,
	}).WithContext(attemptCtx)
	if upReq.Header.Get("Content-Type") == "" {
		upReq.Header.Set("Content-Type", "application/json")
	}

	resp, err := up.transport.RoundTrip(upReq)
	if err != nil {
		att.Reason = classifyTransportError(err, clock)
		return false
	}
	defer resp.Body.Close()
	att.Status = resp.StatusCode
	if att.Reason = classifyStatus(req.Op, resp); att.Reason != routing.ReasonNone {
		att.RetryAfter = routing.RetryAfterSeconds(resp.Header)
		// Read a little so the connection can be reused; the body is not shown to anyone.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		return false
	}

	scrub := protocols.Scrubber{UpstreamModel: cand.UpstreamModel, ServiceModel: req.ServiceModel, Secrets: up.secrets}.WithAccountIDs(resp.Header)
	a := &attempt{ctx: ctx, w: w, req: req, up: up, resp: resp, scrub: scrub, clock: clock, out: out, att: att, start: start}
	switch {
	case resp.StatusCode >= 400:
		return a.relayError()
	case isEventStream(resp.Header):
		return a.relayStream(injectedUsage)
	}
	// A non-streamed answer: its headers are the first byte; the body is bounded by the
	// idle limit from here on.
	clock.activity()
	return a.relayJSON()
}

// classifyStatus says why an answer's status and type fail the attempt before anything
// is read, or ReasonNone when the answer may be relayed.
func classifyStatus(op protocols.Operation, resp *http.Response) routing.Reason {
	code := resp.StatusCode
	switch {
	case op.SubOperation() && (code == http.StatusNotFound || code == http.StatusMethodNotAllowed):
		return routing.ReasonNotOffered
	case code == http.StatusTooManyRequests:
		return routing.ReasonRateLimit
	case routing.FailoverStatus(code):
		return routing.ReasonStatus
	case code < 200 || code >= 300 && code < 400:
		return routing.ReasonBadResponse
	case code >= 400:
		return routing.ReasonNone // the client's own mistake, passed back scrubbed
	case isEventStream(resp.Header):
		if !op.Generates() || op.SubOperation() {
			return routing.ReasonBadResponse
		}
		return routing.ReasonNone
	case !isJSON(resp.Header):
		return routing.ReasonBadResponse
	}
	return routing.ReasonNone
}

// attempt is one answer being relayed, after its status said it may be.
type attempt struct {
	ctx   context.Context // the client's
	w     http.ResponseWriter
	req   *Request
	up    *Upstream
	resp  *http.Response
	scrub protocols.Scrubber
	clock *attemptClock
	out   *Outcome
	att   *Attempt
	start time.Time
}

// commit sends the status line and headers: from here on the answer is the client's.
func (a *attempt) commit(size int) {
	a.clock.committed.Store(true)
	commitHeader(a.w, a.resp, size)
	a.out.Status = a.resp.StatusCode
}

// relayError passes back an upstream's answer to a mistake of the client's (400, 413,
// 422, …), scrubbed of everything that would reveal the candidate.
func (a *attempt) relayError() bool {
	b, err := ReadAll(a.resp.Body, a.resp.ContentLength, MaxErrorBody)
	if err != nil {
		a.att.Reason = brokenOrTimedOut(a.clock, err)
		return false
	}
	a.clock.stop()
	b = a.scrub.Scrub(b)
	a.commit(len(b))
	a.out.TimeToFirstByte, a.out.Obs = time.Since(a.start), protocols.Observation{Complete: true}
	a.out.finalize(a.req, a.up)
	_, _ = a.w.Write(b)
	return true
}

func firstByteLimit(c *routing.Candidate, streamed bool) time.Duration {
	switch {
	case c.Timeouts.FirstByte > 0:
		return c.Timeouts.FirstByte
	case streamed:
		return DefaultStreamFirstByte
	}
	// A non-streamed answer's first byte comes when the generation is done: only the
	// header timeout bounds it.
	if c.Timeouts.Header > 0 {
		return c.Timeouts.Header
	}
	return DefaultHeaderTimeout
}

func idleLimit(c *routing.Candidate) time.Duration {
	if c.Timeouts.Idle > 0 {
		return c.Timeouts.Idle
	}
	return DefaultIdleTimeout
}

func brokenOrTimedOut(clock *attemptClock, err error) routing.Reason {
	switch {
	case errors.Is(err, errTooLarge):
		return routing.ReasonBadResponse
	case clock.timedOut.Load():
		return routing.ReasonTimeout
	}
	return routing.ReasonBrokenBody
}

// relayJSON reads a whole JSON answer, then sends it with the service model spliced in.
// A body that breaks off before its end, or is not one JSON object, is a failed attempt
// the client never sees.
func (a *attempt) relayJSON() bool {
	req, out := a.req, a.out
	b, err := ReadAll(&activityReader{r: a.resp.Body, clock: a.clock}, a.resp.ContentLength, MaxJSONBody)
	if err == nil && !protocols.ValidJSONObject(b) {
		err = errNotJSON
	}
	if err != nil {
		a.att.Reason = brokenOrTimedOut(a.clock, err)
		if errors.Is(err, errNotJSON) {
			a.att.Reason = routing.ReasonBadResponse
		}
		return false
	}
	a.clock.stop()
	b = a.scrub.ScrubSecrets(b)
	model, obs := protocols.ShapeOf(req.Op.Kind).Answer(req.Op.Kind, b)
	out.Obs = obs
	answer := protocols.SpliceAt(b, len(b), len(b), nil)
	if model.Exists() && model.Index > 0 {
		answer = protocols.SpliceAt(b, model.Index, model.Index+len(model.Raw), protocols.AppendJSONString(nil, req.ServiceModel))
	}
	a.commit(answer.Len())
	out.TimeToFirstByte = time.Since(a.start)
	out.finalize(req, a.up)
	_, _ = answer.WriteTo(a.w)
	return true
}

var errNotJSON = errors.New("upstream answer is not one JSON object")

// activityReader restarts the idle limit whenever data arrives.
type activityReader struct {
	r     io.Reader
	clock *attemptClock
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.clock.activity()
	}
	return n, err
}

// relayStream holds the answer until the first event with data has arrived, fails over
// if that event is an error, and otherwise relays every event as soon as it is complete.
// The usage record is made before the bytes that end the answer are written, on every
// way a stream can end; the bytes themselves are the upstream's, only the model changed.
func (a *attempt) relayStream(injectedUsage bool) bool {
	req, out, clock := a.req, a.out, a.clock
	events := protocols.NewEventStream(req.Op.Kind, req.ServiceModel, injectedUsage, a.scrub)
	bufp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bufp)
	buf := *bufp
	scratchp := scratchBufs.Get().(*[]byte)
	pending := (*scratchp)[:0]
	defer func() {
		if cap(pending) <= maxPooledScratch {
			*scratchp = pending[:0]
			scratchBufs.Put(scratchp)
		}
	}()

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
		n, err := a.resp.Body.Read(buf)
		if n > 0 {
			events.Push(buf[:n])
		}
		if err != nil && n == 0 {
			a.att.Reason = brokenOrTimedOut(clock, err)
			return false
		}
	}
	if events.IsError(first) {
		a.att.Reason = routing.ReasonInBand
		return false
	}

	a.commit(-1)
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
		for ev, ok := events.Next(); ok; ev, ok = events.Next() {
			pending, _ = events.AppendRewritten(pending, ev)
		}
		if events.Overflowed() && (readErr == nil || errors.Is(readErr, io.EOF)) {
			readErr = errEventTooLarge
		}
		if clock.clientLeft.Load() {
			out.ClientGone = true
		}
		switch {
		case readErr == nil:
		case errors.Is(readErr, io.EOF):
			// An upstream that ends without a final blank line still sent its last event:
			// it is observed, and passed on as it came.
			if ev, ok := events.Unterminated(); ok {
				pending, _ = events.AppendRewritten(pending, ev)
			}
		case out.ClientGone || a.ctx.Err() != nil:
			out.ClientGone = true
		default:
			// The upstream failed, stalled or overflowed after the client saw the start of
			// the answer: no failover is possible any more, so end the stream the way the
			// family ends a failed one.
			out.StreamError = readErr
			message := "the upstream stream was interrupted before it completed"
			switch {
			case errors.Is(readErr, errEventTooLarge):
				message = "the upstream sent an event larger than the gateway's limit"
			case clock.timedOut.Load():
				out.StreamError = errIdle
				message = "the upstream stream stalled and was ended by the gateway"
			}
			apiErr := protocols.Errorf(req.Op.Family, http.StatusBadGateway, "", "%s", message)
			pending = append(pending, events.ErrorEvent(apiErr)...)
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
		if readErr != nil || out.ClientGone && (events.Obs.Complete || readOn >= clientGoneBytes) {
			break
		}
		n, err := a.resp.Body.Read(buf)
		if n > 0 {
			clock.activity()
			events.Push(buf[:n])
			if out.ClientGone {
				readOn += n
			}
		}
		readErr = err
	}
	return true
}

var errEventTooLarge = errors.New("upstream event exceeds the gateway's limit")

var errIdle = errors.New("upstream idle for longer than the idle limit")

// commitHeader sends the status line and the headers a client may see. size is the exact
// body length, or -1 for a stream.
func commitHeader(w http.ResponseWriter, resp *http.Response, size int) {
	h := w.Header()
	protocols.CopyResponseHeader(h, resp.Header)
	if size >= 0 {
		h.Set("Content-Length", strconv.Itoa(size))
	} else {
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
}

func flusher(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	return func() { _ = rc.Flush() }
}

func isEventStream(h http.Header) bool { return mediaType(h) == "text/event-stream" }

// isJSON accepts application/json and the +json types some upstreams answer with.
func isJSON(h http.Header) bool {
	mt := mediaType(h)
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

func mediaType(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return mt
}

var errTooLarge = errors.New("upstream body exceeds the gateway's limit")

// ReadAll reads a body into one buffer sized from Content-Length when the sender gave it.
// A body longer than limit is an error: at most limit+1 bytes are read.
func ReadAll(r io.Reader, contentLength int64, limit int) ([]byte, error) {
	size := 16 << 10
	if contentLength > 0 && contentLength <= int64(limit) {
		size = int(contentLength) + 1 // +1 lets the final Read see EOF without growing
	}
	b := make([]byte, 0, min(size, limit+1))
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if len(b) > limit {
			return b[:limit], errTooLarge
		}
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// classifyTransportError tells a connection failure from a timeout.
func classifyTransportError(err error, clock *attemptClock) routing.Reason {
	if clock.timedOut.Load() {
		return routing.ReasonTimeout
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return routing.ReasonTimeout
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return routing.ReasonTimeout
	}
	// Dial, TLS and reset failures all mean the upstream could not be reached.
	return routing.ReasonConnect
}
