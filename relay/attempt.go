package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// attemptClock ends an attempt that is too slow: before commit, at the first-byte limit;
// after it, when the upstream is silent for longer than the idle limit, or once the
// client has gone and the grace for reading on has passed.
type attemptClock struct {
	timer    *time.Timer
	idle     time.Duration
	timedOut atomic.Bool
	// committed is set once the answer's status went to the client; streaming once a
	// stream's headers came; clientLeft once the client went away after either: then only
	// the grace for reading on counts.
	committed, streaming, clientLeft atomic.Bool
	// drained is set when the gateway's stop ended the attempt (Request.Drain); the
	// links place the clock in the Drain's list while the attempt runs.
	drained              atomic.Bool
	cancel               context.CancelFunc
	drainShard           *drainShard
	drainNext, drainPrev *attemptClock
	// due is when the limit before the first byte runs out (Unix nanoseconds), and
	// byDeadline whether that is the request's deadline rather than the candidate's own
	// limit.
	due        atomic.Int64
	byDeadline atomic.Bool
	// running names the limit in force as the configuration does (header_timeout,
	// first_byte_timeout, first_token_timeout, idle_timeout), and runningFor its length:
	// what a client is told ran out.
	running atomic.Pointer[limit]
	// The limits running points at, one place each, so that naming the one in force
	// allocates nothing (activity runs on every read of a stream).
	firstByte, firstEvent, idleLimit limit
}

// limit is one of a candidate's time limits, by its configuration name.
type limit struct {
	name string
	d    time.Duration
}

// requestTimeoutName is the request deadline's name among the limits: the model's
// request_timeout, which is the request's, not a candidate's.
const requestTimeoutName = "request_timeout"

// limitFirstByte sets the limit before the answer's first byte to l from now, or to the
// request's deadline when that comes first.
func (c *attemptClock) limitFirstByte(l limit, dl *deadline) {
	c.firstByte = l
	c.limitUntilFirstByte(&c.firstByte, dl)
}

// limitUntilFirstByte runs l, which stays in place while it is in force.
func (c *attemptClock) limitUntilFirstByte(l *limit, dl *deadline) {
	now := time.Now()
	d := l.d
	left, ok := dl.left(now)
	byDeadline := ok && left < d
	if byDeadline {
		d = max(left, 0)
	}
	c.byDeadline.Store(byDeadline)
	c.running.Store(l)
	c.due.Store(now.Add(d).UnixNano())
	c.timer.Reset(d)
}

// ranOut is the limit that ended the attempt: the one in force when the clock fired, or
// the transport's own header timeout.
func (c *attemptClock) ranOut(transportHeader time.Duration) limit {
	if c.timedOut.Load() {
		if l := c.running.Load(); l != nil {
			return *l
		}
	}
	return limit{"header_timeout", transportHeader}
}

// limitFirstEvent gives a stream whose headers came d for its first event, within what
// the limit before the first byte leaves. Once the client has left, only the grace for
// reading on counts.
func (c *attemptClock) limitFirstEvent(l limit, dl *deadline) {
	if c.clientLeft.Load() {
		return
	}
	if left := time.Until(time.Unix(0, c.due.Load())); left < l.d {
		return // the limit already running is the shorter
	}
	c.firstEvent = l
	c.limitUntilFirstByte(&c.firstEvent, dl)
}

func startClock(firstByte, idle time.Duration, cancel context.CancelFunc) *attemptClock {
	c := &attemptClock{idle: idle, idleLimit: limit{"idle_timeout", idle}, cancel: cancel}
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
		c.running.Store(&c.idleLimit)
		c.timer.Reset(c.idle)
	}
}

// clientGone starts the bounded read-on after the client left a committed answer or a
// stream whose headers came.
func (c *attemptClock) clientGone() {
	if c.clientLeft.CompareAndSwap(false, true) {
		c.timer.Reset(clientGoneGrace)
	}
}

func (c *attemptClock) stop() { c.timer.Stop() }

// drain ends the attempt because the gateway is stopping: the upstream call is cancelled,
// and whatever reads it learns why from drained.
func (c *attemptClock) drain() {
	c.drained.Store(true)
	c.cancel()
}

// startAttemptClock starts the attempt's clock (awaiting the body, then idle at most
// idle), which the request's Drain then watches to end the attempt; stopAttemptClock
// stops both once the attempt is over.
func (a *attempt) startAttemptClock(idle time.Duration, cancel context.CancelFunc) {
	a.clock = startClock(awaitingBody, idle, cancel)
	if a.req.Drain != nil {
		a.req.Drain.watch(a.clock)
	}
}

func (a *attempt) stopAttemptClock() {
	if a.req.Drain != nil {
		a.req.Drain.unwatch(a.clock)
	}
	a.clock.stop()
}

// run makes the attempt and reports whether it committed an answer to the client.
func (a *attempt) run() bool {
	committed := a.runOnce()
	if a.att.Reason == routing.ReasonTimeout && a.clock.byDeadline.Load() {
		// The request's deadline, not the candidate's own limit, ended it.
		a.att.Reason = routing.ReasonDeadline
	}
	if !committed && a.wholeWithUpstream() && (a.att.Reason == routing.ReasonTimeout || a.att.Reason == routing.ReasonDeadline) {
		// The upstream had the whole request and may be generating (and billing) the
		// answer still: asking again would start the work again. A long generation is the
		// request's doing as much as the candidate's, so its health does not move either.
		a.att.Abandoned = true
		a.abandonedAt = a.clock.ranOut(headerTimeout(a.up.Candidate))
		if a.att.Reason == routing.ReasonDeadline {
			a.abandonedAt = limit{requestTimeoutName, a.deadline.timeout}
		}
	}
	return committed
}

// wholeWithUpstream reports whether the upstream had the whole request: only a body that
// passed whole (not a slow client's body still arriving, nor one that failed) can have
// reached it whole.
func (a *attempt) wholeWithUpstream() bool {
	return a.delivered.Load() && !a.att.Blameless && a.bodyErr == nil && a.req.Body.Parsed() != nil
}

func (a *attempt) runOnce() bool {
	if committed := a.send(); committed || !a.again {
		return committed
	}
	// The body came too slowly to forward as it arrived, or needs a change among the
	// bytes already sent: the candidate did nothing wrong, and gets it again whole once
	// all of it is in (unless the client has left meanwhile).
	if a.ctx.Err() != nil {
		return false
	}
	*a.att = Attempt{Candidate: a.up.Candidate.Name}
	if _, bodyErr := a.req.Body.Wait(); bodyErr != nil {
		a.att.Reason, a.bodyErr = routing.ReasonClientBody, bodyErr
		return false
	}
	a.again = false
	return a.send()
}

// awaitingBody stands for the first-byte limit while the client's body still arrives:
// the limit starts once the whole body has passed, so a slow client never makes a
// candidate look slow.
const awaitingBody = 24 * time.Hour

// send sends the request with the body as it is now (whole, or forwarded as it arrives);
// it reports whether an answer was committed to the client.
func (a *attempt) send() bool {
	if a.up.channel != nil {
		return a.sendThroughChannel()
	}
	req, up, cand := a.req, a.up, a.up.Candidate
	// The upstream call is not tied to the client's context directly: a client that
	// departs before the upstream has the whole body cancels it at once; after that the
	// upstream can do (and bill) the work, so its answer is read on for billing.
	attemptCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// a.delivered is set once the transport has taken the whole body; opened is the body
	// the transport reads now.
	var opened atomic.Pointer[deliveryWatch]
	delivered := &a.delivered

	a.delivered.Store(false)
	// upload is the body the transport reads; it may open it again on a new connection.
	upload := req.Body.Open(cand.UpstreamModel, req.DeclaredOutputCap)
	length := upload.Length()
	// The first-byte limit starts once the whole body has passed: at once for a body
	// read whole.
	a.startAttemptClock(idleLimit(cand), cancel)
	defer a.stopAttemptClock()
	var ended atomic.Bool
	defer ended.Store(true)
	clock := a.clock
	req.Body.whenPassed(func(p *protocols.ParsedRequest) {
		if !ended.Load() {
			clock.limitFirstByte(firstByteLimit(cand, p.Streamed()), a.deadline)
		}
	})
	// Every body the transport reads, a reopened one too, is watched for its delivery.
	body := watchDelivery(upload, length, delivered, &opened)
	reopenBody := func() (io.ReadCloser, error) {
		upload = req.Body.Open(cand.UpstreamModel, req.DeclaredOutputCap)
		return watchDelivery(upload, length, delivered, &opened), nil
	}
	stopWatching := context.AfterFunc(a.ctx, func() {
		switch {
		case a.clock.committed.Load():
			a.clock.clientGone()
		case !delivered.Load():
			// The upstream cannot act on part of a body. Closing the body ends a read
			// waiting on the client, which the transport would wait for.
			cancel()
			if body := opened.Load(); body != nil {
				_ = body.Close()
			}
		case a.clock.streaming.Load():
			a.clock.clientGone()
		}
		// Otherwise the upstream has the whole body and has not answered: its answer is
		// awaited within the attempt's own limits, to be billed.
	})
	defer stopWatching()

	upReq := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: up.scheme, Host: up.host, Path: up.basePath + req.Op.UpstreamPath(), RawQuery: req.RawQuery},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        protocols.UpstreamRequestHeader(req.Header, req.ClientKeys, cand.Protocol, cand.Credential),
		Body:          body,
		GetBody:       reopenBody,
		ContentLength: length,
		Host:          up.host,
	}).WithContext(attemptCtx)
	if upReq.Header.Get("Content-Type") == "" {
		upReq.Header.Set("Content-Type", "application/json")
	}

	resp, err := up.transport.RoundTrip(upReq)
	// What came back before the upstream had the whole body may be a slow client's doing:
	// then only a good answer (or a failed dial) is the candidate's to answer for.
	early := upload.early()
	if upload.sendWholeAgain() {
		if err == nil {
			resp.Body.Close() // whatever it says, it was not said to the whole body
		}
		a.again = true
		return false
	}
	bodyErr := req.Body.failed()
	var injectedUsage bool
	if err == nil {
		// The answer is not looked at before the whole body has passed.
		if _, bodyErr = req.Body.Wait(); bodyErr != nil {
			resp.Body.Close()
		} else {
			injectedUsage = upload.usageInjected()
		}
	}
	if bodyErr != nil {
		a.att.Reason, a.bodyErr = routing.ReasonClientBody, bodyErr
		return false
	}
	if err != nil {
		a.att.Reason = classifyTransportError(err, a.clock)
		a.att.Blameless = early && !isDialError(err)
		return false
	}
	return a.answer(resp, injectedUsage, early)
}

// answer reads an upstream's answer to the attempt: a failure the request moves on
// from, or an answer relayed to the client (it reports whether one was committed).
func (a *attempt) answer(resp *http.Response, injectedUsage, early bool) bool {
	req, up, cand := a.req, a.up, a.up.Candidate
	defer resp.Body.Close()
	if up.channel != nil {
		up.channel.Response(req.Op, resp)
		// A provider's own request id (req_vrtx_…, or none at all on Bedrock) would
		// tell the client which channel served it; the gateway's own id stands.
		resp.Header.Del("Request-Id")
		resp.Header.Del("X-Request-Id")
	}
	a.resp = resp
	a.att.Status = resp.StatusCode
	mt := mediaType(resp.Header)
	if a.att.Reason = classifyStatus(req.Op, resp.StatusCode, mt); a.att.Reason != routing.ReasonNone {
		a.att.RetryAfter = routing.RetryAfter(resp.Header, time.Now(), up.HealthFor(req.Op).MaxPause())
		a.att.Blameless = early
		// Read a little so the connection can be reused; the body is not shown to anyone.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		return false
	}

	a.scrub = protocols.Scrubber{UpstreamModel: cand.UpstreamModel, ServiceModel: req.ServiceModel, Secrets: up.scrubSecrets(), Names: up.names,
		HideRequestID: up.channel != nil, RequestID: req.ID}.WithAccountIDs(resp.Header)
	switch {
	case resp.StatusCode >= 400:
		return a.relayError()
	case isEventStream(mt):
		return a.relayStream(injectedUsage)
	}
	// A non-streamed answer: its headers are the first byte; the body is bounded by the
	// idle limit from here on.
	a.clock.activity()
	return a.relayJSON()
}

// classifyStatus says why an answer's status and type fail the attempt before anything
// is read, or ReasonNone when the answer may be relayed.
func classifyStatus(op protocols.Operation, code int, mediaType string) routing.Reason {
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
	case isEventStream(mediaType):
		if !op.Generates() || op.SubOperation() {
			return routing.ReasonBadResponse
		}
		return routing.ReasonNone
	case !isJSON(mediaType):
		return routing.ReasonBadResponse
	}
	return routing.ReasonNone
}

// attempt is one try of a request on one candidate.
type attempt struct {
	ctx   context.Context // the client's; once it is done, nothing more is written to w
	w     http.ResponseWriter
	req   *Request
	up    *Upstream
	out   *Outcome
	att   *Attempt  // this attempt's record in out.Attempts
	start time.Time // when Serve started, for time to first byte
	// deadline is the request's, shared by all its attempts.
	deadline *deadline

	// Set as the attempt runs.
	clock *attemptClock
	// delivered is set once the upstream has the whole body; abandonedAt names the limit
	// that ran out after that, when one did (att.Abandoned).
	delivered   atomic.Bool
	abandonedAt limit
	// again asks for the attempt to be made once more with the whole body; bodyErr is the
	// client's error when its body failed while it was being forwarded.
	again   bool
	bodyErr *protocols.APIError
	resp    *http.Response
	scrub   protocols.Scrubber
}

// commit sends the status line and headers: from here on the answer is the client's.
func (a *attempt) commit(size int) {
	a.clock.committed.Store(true)
	commitHeader(a.w, a.resp, size, a.scrub)
	a.out.Status = a.resp.StatusCode
}

// relayError passes back an upstream's answer to a mistake of the client's (400, 413,
// 422, …), scrubbed of everything that would reveal the candidate.
func (a *attempt) relayError() bool {
	if a.ctx.Err() != nil {
		return false // nobody to pass it to, and a refusal bills nothing
	}
	b, err := protocols.ReadBounded(a.resp.Body, a.resp.ContentLength, MaxErrorBody)
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

// meterGone bills an answer read on after the client left, through the same Finalize
// hook as one the client received; nothing is written to the client.
func (a *attempt) meterGone(obs protocols.Observation) {
	a.out.Status, a.out.Obs = a.resp.StatusCode, obs
	a.out.finalize(a.req, a.up)
}

// deliveryWatch notes when the transport has read the whole upstream body: at its last
// byte when its length is known (the transport may write those bytes before it reads on
// to the end), else at its end.
type deliveryWatch struct {
	io.ReadCloser
	unread    int64 // bytes to go, -1 when the length is not known
	delivered *atomic.Bool
}

func watchDelivery(body io.ReadCloser, length int64, delivered *atomic.Bool, opened *atomic.Pointer[deliveryWatch]) io.ReadCloser {
	d := &deliveryWatch{ReadCloser: body, unread: length, delivered: delivered}
	opened.Store(d)
	return d
}

func (d *deliveryWatch) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if d.unread >= 0 {
		d.unread -= int64(n)
	}
	if err == io.EOF || d.unread == 0 {
		d.delivered.Store(true)
	}
	return n, err
}

func firstByteLimit(c *routing.Candidate, streamed bool) limit {
	switch {
	case c.Timeouts.FirstByte > 0:
		return limit{"first_byte_timeout", c.Timeouts.FirstByte}
	case streamed:
		return limit{"first_byte_timeout", DefaultStreamFirstByte}
	}
	// A non-streamed answer's first byte comes when the generation is done: only the
	// header timeout bounds it.
	return limit{"header_timeout", headerTimeout(c)}
}

func headerTimeout(c *routing.Candidate) time.Duration {
	if c.Timeouts.Header > 0 {
		return c.Timeouts.Header
	}
	return DefaultHeaderTimeout
}

func firstEventLimit(c *routing.Candidate) limit {
	if c.Timeouts.FirstToken > 0 {
		return limit{"first_token_timeout", c.Timeouts.FirstToken}
	}
	return limit{"first_token_timeout", DefaultFirstToken}
}

func idleLimit(c *routing.Candidate) time.Duration {
	if c.Timeouts.Idle > 0 {
		return c.Timeouts.Idle
	}
	return DefaultIdleTimeout
}

func brokenOrTimedOut(clock *attemptClock, err error) routing.Reason {
	switch {
	case errors.Is(err, protocols.ErrTooLarge):
		return routing.ReasonBadResponse
	case clock.timedOut.Load():
		return routing.ReasonTimeout
	}
	return routing.ReasonBrokenBody
}

// commitHeader sends the status line and the headers a client may see. size is the exact
// body length, or -1 for a stream.
func commitHeader(w http.ResponseWriter, resp *http.Response, size int, scrub protocols.Scrubber) {
	h := w.Header()
	protocols.CopyResponseHeader(h, resp.Header)
	scrub.ScrubHeader(h)
	if size >= 0 {
		h.Set("Content-Length", strconv.Itoa(size))
	} else {
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
}

func isEventStream(mediaType string) bool { return strings.EqualFold(mediaType, "text/event-stream") }

// isJSON accepts application/json and the +json types some upstreams answer with.
func isJSON(mediaType string) bool {
	mt := strings.ToLower(mediaType)
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// mediaType is the type/subtype of a Content-Type, parameters left out; the comparisons
// ignore case, as media types do. It reads the header without allocating.
func mediaType(h http.Header) string {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.TrimSpace(ct)
}

// isDialError reports a failure to connect at all, which no client can cause.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
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
