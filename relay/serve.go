package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// maxJSONBody bounds a non-streamed upstream body the gateway holds to rewrite; a larger
// one fails the attempt rather than exhaust memory.
const maxJSONBody = 256 << 20

// maxErrorBody bounds how much of an upstream error body is kept.
const maxErrorBody = 1 << 20

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
	// Usage is the raw usage JSON of the answer (for streams, the last one seen);
	// StartUsage is Family B's message_start usage.
	Usage, StartUsage []byte
	// OutputChars and ThinkingChars count the generated text forwarded, for estimates.
	OutputChars, ThinkingChars int64
	// Complete says the answer reached its natural end.
	Complete bool
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
		opts[i] = routing.Option{Candidate: up.Candidate, Health: up.Health}
		if req.Preferred != "" && up.Identity == req.Preferred {
			preferred = i
		}
	}
	for _, i := range routing.Order(opts, preferred, start) {
		up := upstreams[i]
		admission := up.Health.Admit(time.Now())
		if admission == routing.Refused {
			continue // another request took the last probe slot meanwhile
		}
		attemptStart := time.Now()
		att := Attempt{Candidate: up.Candidate.Name}
		committed := try(ctx, w, req, up, out, &att, start)
		now := time.Now()
		att.Duration = now.Sub(attemptStart)
		out.Attempts = append(out.Attempts, att)

		switch {
		case committed:
			out.Served = up
			up.Health.RecordSuccess(admission, out.TimeToFirstByte, now)
			if out.StreamError != nil && !out.ClientGone {
				// Failed after the first byte: too late to fail over, not too late to learn.
				up.Health.RecordFailure(routing.Admitted, routing.ReasonBrokenBody, 0, now)
			}
			return out, nil
		case ctx.Err() != nil:
			// The client left; that says nothing about the candidate.
			out.Attempts[len(out.Attempts)-1].Reason = routing.ReasonClientGone
			up.Health.Release(admission)
			out.ClientGone = true
			return out, nil
		}
		up.Health.RecordFailure(admission, att.Reason, cooldownHint(att), now)
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
// after it, when the upstream is silent for longer than the idle limit.
type attemptClock struct {
	timer    *time.Timer
	idle     time.Duration
	timedOut atomic.Bool
}

func startClock(firstByte, idle time.Duration, cancel context.CancelFunc) *attemptClock {
	c := &attemptClock{idle: idle}
	c.timer = time.AfterFunc(firstByte, func() {
		c.timedOut.Store(true)
		cancel()
	})
	return c
}

// activity restarts the idle limit after a read from the upstream.
func (c *attemptClock) activity() { c.timer.Reset(c.idle) }

func (c *attemptClock) stop() { c.timer.Stop() }

// try makes one attempt and reports whether it committed an answer to the client.
func try(ctx context.Context, w http.ResponseWriter, req *Request, up *Upstream, out *Outcome, att *Attempt, start time.Time) bool {
	cand := up.Candidate
	body, injectedUsage := req.Parsed.Upstream(req.Op, cand.UpstreamModel)
	attemptCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	clock := startClock(firstByteLimit(cand, req.Parsed.Streamed()), idleLimit(cand), cancel)
	defer clock.stop()

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

	if routing.FailoverStatus(resp.StatusCode) {
		att.Reason = routing.ReasonStatus
		if resp.StatusCode == http.StatusTooManyRequests {
			att.Reason = routing.ReasonRateLimit
		}
		att.RetryAfter = routing.RetryAfterSeconds(resp.Header)
		// Read a little so the connection can be reused; the body is not shown to anyone.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		return false
	}

	scrub := protocols.Scrubber{UpstreamModel: cand.UpstreamModel, ServiceModel: req.ServiceModel, Secrets: up.secrets}
	if resp.StatusCode >= 400 {
		// The client's own mistake (400, 413, 422, …): pass it back, mapping hidden.
		b, err := ReadAll(resp.Body, resp.ContentLength, maxErrorBody)
		if err != nil && !errors.Is(err, errTooLarge) {
			att.Reason = brokenOrTimedOut(clock)
			return false
		}
		clock.stop()
		b = scrub.Scrub(b)
		commitHeader(w, resp, len(b))
		out.Status, out.TimeToFirstByte, out.Complete = resp.StatusCode, time.Since(start), true
		out.finalize(req, up)
		_, _ = w.Write(b)
		return true
	}

	if isEventStream(resp.Header) {
		return relayStream(ctx, w, req, up, resp, injectedUsage, scrub, clock, out, att, start)
	}
	// A non-streamed answer: its headers are the first byte; the body is bounded by the
	// idle limit from here on.
	clock.activity()
	return relayJSON(w, req, up, resp, clock, out, att, start)
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

func brokenOrTimedOut(clock *attemptClock) routing.Reason {
	if clock.timedOut.Load() {
		return routing.ReasonTimeout
	}
	return routing.ReasonBrokenBody
}

// relayJSON reads a whole JSON answer, then sends it with the service model spliced in.
// A body that breaks off before its end is a failed attempt the client never sees.
func relayJSON(w http.ResponseWriter, req *Request, up *Upstream, resp *http.Response, clock *attemptClock, out *Outcome, att *Attempt, start time.Time) bool {
	b, err := ReadAll(&activityReader{r: resp.Body, clock: clock}, resp.ContentLength, maxJSONBody)
	if err != nil {
		att.Reason = brokenOrTimedOut(clock)
		return false
	}
	clock.stop()
	literal := protocols.AppendJSONString(nil, req.ServiceModel)
	s, e, found := 0, 0, false
	if path := protocols.ResponseModelPath(req.Op); path != "" {
		s, e, found = protocols.ValueSpan(b, path)
	}
	size := len(b)
	if found {
		size += len(literal) - (e - s)
	}
	if u := gjson.GetBytes(b, "usage"); u.IsObject() {
		out.Usage = []byte(u.Raw)
	}
	if req.Op.Kind == protocols.KindMessages {
		// Thinking text, in case the upstream does not split thinking tokens out.
		for _, t := range gjson.GetBytes(b, `content.#(type=="thinking")#.thinking`).Array() {
			out.ThinkingChars += int64(len(t.Raw))
		}
	}
	commitHeader(w, resp, size)
	out.Status, out.TimeToFirstByte, out.Complete = resp.StatusCode, time.Since(start), true
	out.finalize(req, up)
	if found {
		_, _ = w.Write(b[:s])
		_, _ = w.Write(literal)
		_, _ = w.Write(b[e:])
	} else {
		_, _ = w.Write(b)
	}
	return true
}

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
func relayStream(ctx context.Context, w http.ResponseWriter, req *Request, up *Upstream, resp *http.Response, injectedUsage bool,
	scrub protocols.Scrubber, clock *attemptClock, out *Outcome, att *Attempt, start time.Time) bool {
	events := protocols.NewEventStream(req.Op.Kind, req.ServiceModel, injectedUsage, scrub)
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
		n, err := resp.Body.Read(buf)
		if n > 0 {
			events.Push(buf[:n])
		}
		if err != nil && n == 0 {
			att.Reason = brokenOrTimedOut(clock)
			return false
		}
	}
	if events.IsError(first) {
		att.Reason = routing.ReasonInBand
		return false
	}

	commitHeader(w, resp, -1)
	clock.activity() // from here on the idle limit applies
	out.Status, out.Stream = resp.StatusCode, true
	flush := flusher(w)
	// finish records what the stream carried and runs the Finalize hook: before the
	// terminal event is written when there is one, else when the stream ends.
	finish := func() {
		out.Usage, out.StartUsage = events.Usage, events.StartUsage
		out.OutputChars, out.ThinkingChars, out.Complete = events.OutputChars, events.ThinkingChars, events.Terminal
		out.finalize(req, up)
	}
	defer finish()
	pending, _ = events.AppendRewritten(pending, first)
	for {
		for ev, ok := events.Next(); ok; ev, ok = events.Next() {
			pending, _ = events.AppendRewritten(pending, ev)
		}
		if events.Terminal {
			finish()
		}
		if len(pending) > 0 {
			if out.TimeToFirstByte == 0 {
				out.TimeToFirstByte = time.Since(start)
			}
			if _, err := w.Write(pending); err != nil {
				out.ClientGone = true
				break
			}
			flush()
			pending = pending[:0]
		}
		n, err := resp.Body.Read(buf)
		if n > 0 {
			clock.activity()
			events.Push(buf[:n])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			// An upstream that ends without a final blank line still sent its last event.
			if rest := events.Pending(); len(bytes.TrimSpace(rest)) > 0 {
				events.Push(append(append([]byte(nil), rest...), '\n', '\n'))
				for ev, ok := events.Next(); ok; ev, ok = events.Next() {
					pending, _ = events.AppendRewritten(pending, ev)
				}
				_, _ = w.Write(pending)
				flush()
				pending = pending[:0]
			}
			break
		}
		if ctx.Err() != nil {
			out.ClientGone = true
			break
		}
		// The upstream failed, or went silent past the idle limit, after the client saw
		// the start of the answer: no failover is possible any more, so end the stream
		// the way the family ends a failed one.
		out.StreamError = err
		message := "the upstream stream was interrupted before it completed"
		if clock.timedOut.Load() {
			out.StreamError = errIdle
			message = "the upstream stream stalled and was ended by the gateway"
		}
		apiErr := protocols.Errorf(req.Op.Family, http.StatusBadGateway, "", "%s", message)
		finish()
		_, _ = w.Write(protocols.StreamErrorEvent(req.Op.Kind, apiErr, events.LastSequence+1))
		flush()
		break
	}
	return true
}

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

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

var errTooLarge = errors.New("upstream body exceeds the gateway's limit")

// ReadAll reads a body into one buffer sized from Content-Length when the sender gave it.
func ReadAll(r io.Reader, contentLength int64, limit int) ([]byte, error) {
	size := 16 << 10
	if contentLength > 0 && contentLength <= int64(limit) {
		size = int(contentLength) + 1 // +1 lets the final Read see EOF without growing
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			if len(b) >= limit {
				return b, errTooLarge
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
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
