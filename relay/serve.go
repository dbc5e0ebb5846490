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
	Path     string
	RawQuery string
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
	// StreamError is set when a committed stream failed before its natural end.
	StreamError error
	// ClientGone is set when the client went away before the answer was complete.
	ClientGone bool
	// Usage is the raw usage JSON of the answer (for streams, the last one seen);
	// StartUsage is Family B's message_start usage.
	Usage, StartUsage []byte
}

var (
	readBufs    = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	scratchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}
)

// Serve tries the upstreams in order until one commits an answer to w. It returns an
// APIError, with nothing written, when none could; the caller renders it.
func Serve(ctx context.Context, w http.ResponseWriter, req *Request, upstreams []*Upstream) (*Outcome, *protocols.APIError) {
	start := time.Now()
	out := &Outcome{Attempts: make([]Attempt, 0, len(upstreams))}
	for _, up := range upstreams {
		if ctx.Err() != nil {
			out.ClientGone = true
			return out, nil
		}
		attemptStart := time.Now()
		att := Attempt{Candidate: up.Candidate.Name}
		committed := try(ctx, w, req, up, out, &att, start)
		att.Duration = time.Since(attemptStart)
		out.Attempts = append(out.Attempts, att)
		if committed {
			out.Served = up
			return out, nil
		}
		if ctx.Err() != nil {
			out.ClientGone = true
			return out, nil
		}
	}
	return out, noChannel(req, out.Attempts)
}

// noChannel is the answer when no candidate could serve: 503 with a Retry-After that is
// the soonest any upstream said it would be ready again (at least one second).
func noChannel(req *Request, attempts []Attempt) *protocols.APIError {
	retry := math.Inf(1)
	for _, a := range attempts {
		if a.RetryAfter > 0 && a.RetryAfter < retry {
			retry = a.RetryAfter
		}
	}
	seconds := 1
	if !math.IsInf(retry, 1) {
		seconds = max(1, int(math.Ceil(retry)))
	}
	e := protocols.Errorf(req.Op.Family, http.StatusServiceUnavailable, protocols.CodeNoChannel,
		"model '%s' has no candidate available to serve this request right now; retry later", req.ServiceModel)
	e.RetryAfter = seconds
	return e
}

// try makes one attempt and reports whether it committed an answer to the client.
func try(ctx context.Context, w http.ResponseWriter, req *Request, up *Upstream, out *Outcome, att *Attempt, start time.Time) bool {
	cand := up.Candidate
	body, injectedUsage := req.Parsed.Upstream(req.Op, cand.UpstreamModel)
	attemptCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	upReq := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: up.scheme, Host: up.host, Path: up.basePath + req.Op.UpstreamPath(req.Path), RawQuery: req.RawQuery},
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
		att.Reason = classifyTransportError(err)
		return false
	}
	defer resp.Body.Close()
	att.Status = resp.StatusCode

	scrub := protocols.Scrubber{UpstreamModel: cand.UpstreamModel, ServiceModel: req.ServiceModel, Secrets: up.secrets}

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

	if resp.StatusCode >= 400 {
		// The client's own mistake (400, 413, 422, …): pass it back, mapping hidden.
		b, err := ReadAll(resp.Body, resp.ContentLength, maxErrorBody)
		if err != nil && !errors.Is(err, errTooLarge) {
			att.Reason = routing.ReasonBrokenBody
			return false
		}
		b = scrub.Scrub(b)
		commitHeader(w, resp, len(b))
		out.Status, out.TimeToFirstByte = resp.StatusCode, time.Since(start)
		_, _ = w.Write(b)
		return true
	}

	if isEventStream(resp.Header) {
		return relayStream(ctx, w, req, resp, injectedUsage, scrub, out, att, start)
	}
	return relayJSON(w, req, resp, out, att, start)
}

// relayJSON reads a whole JSON answer, then sends it with the service model spliced in.
// A body that breaks off before its end is a failed attempt the client never sees.
func relayJSON(w http.ResponseWriter, req *Request, resp *http.Response, out *Outcome, att *Attempt, start time.Time) bool {
	b, err := ReadAll(resp.Body, resp.ContentLength, maxJSONBody)
	if err != nil {
		att.Reason = routing.ReasonBrokenBody
		return false
	}
	literal := protocols.AppendJSONString(nil, req.ServiceModel)
	s, e, found := 0, 0, false
	if path := protocols.ResponseModelPath(req.Op); path != "" {
		s, e, found = protocols.ValueSpan(b, path)
	}
	size := len(b)
	if found {
		size += len(literal) - (e - s)
	}
	commitHeader(w, resp, size)
	out.Status, out.TimeToFirstByte = resp.StatusCode, time.Since(start)
	if found {
		_, _ = w.Write(b[:s])
		_, _ = w.Write(literal)
		_, _ = w.Write(b[e:])
	} else {
		_, _ = w.Write(b)
	}
	if u := gjsonUsage(b); u != nil {
		out.Usage = u
	}
	return true
}

// relayStream holds the answer until the first event has arrived, fails over if that
// event is an error, and otherwise relays every event as soon as it is complete.
func relayStream(ctx context.Context, w http.ResponseWriter, req *Request, resp *http.Response, injectedUsage bool,
	scrub protocols.Scrubber, out *Outcome, att *Attempt, start time.Time) bool {
	events := protocols.NewEventStream(req.Op.Kind, req.ServiceModel, injectedUsage, scrub)
	bufp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bufp)
	buf := *bufp

	// The gate: nothing is committed until the first complete event is in hand.
	var first protocols.Event
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			events.Push(buf[:n])
			if ev, ok := events.Next(); ok {
				first = ev
				break
			}
		}
		if err != nil {
			att.Reason = routing.ReasonBrokenBody
			return false
		}
	}
	if events.IsError(first) {
		att.Reason = routing.ReasonInBand
		return false
	}

	commitHeader(w, resp, -1)
	out.Status, out.Stream = resp.StatusCode, true
	flush := flusher(w)
	scratchp := scratchBufs.Get().(*[]byte)
	defer func() { scratchBufs.Put(scratchp) }()
	pending := *scratchp

	emit := func(ev protocols.Event) {
		pending, _ = events.AppendRewritten(pending, ev)
	}
	emit(first)
	for {
		for ev, ok := events.Next(); ok; ev, ok = events.Next() {
			emit(ev)
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
					emit(ev)
				}
				_, _ = w.Write(pending)
				flush()
			}
			break
		}
		if ctx.Err() != nil {
			out.ClientGone = true
			break
		}
		// The upstream failed after the client saw the start of the answer: no failover
		// is possible any more, so end the stream the way the family ends a failed one.
		out.StreamError = err
		apiErr := protocols.Errorf(req.Op.Family, http.StatusBadGateway, "", "the upstream stream was interrupted before it completed")
		_, _ = w.Write(protocols.StreamErrorEvent(req.Op.Kind, apiErr, events.LastSequence+1))
		flush()
		break
	}
	*scratchp = pending[:0]
	out.Usage, out.StartUsage = events.Usage, events.StartUsage
	return true
}

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

// ReadAll reads a body into one buffer sized from Content-Length when the upstream gave it.
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
func classifyTransportError(err error) routing.Reason {
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

// gjsonUsage copies the top-level usage object of a JSON answer, where all three
// generation shapes keep it.
func gjsonUsage(b []byte) []byte {
	if u := gjson.GetBytes(b, "usage"); u.IsObject() {
		return []byte(u.Raw)
	}
	return nil
}
