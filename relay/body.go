package relay

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/switchyard-gw/switchyard/protocols"
)

// Body is the client's request body as a request's attempts send it: read whole (a small
// body, or a large one that was not forwarded), or still arriving and forwarded as it
// comes. Both keep their bytes in memory taken from the gateway's BodyMemory; a large
// one's buffer is pooled, and held by every upstream body made from it until the
// transport closes that body.
type Body interface {
	// Parsed is the whole body with its top-level fields located: at once for a body
	// read whole, and for one still arriving once Wait has returned it (an attempt begun
	// before goes on forwarding it).
	Parsed() *protocols.ParsedRequest
	// Wait blocks until the whole body has been read and judged, and gives the verdict.
	Wait() (*protocols.ParsedRequest, *protocols.APIError)
	// Open is the body of one attempt on a candidate that calls the model
	// upstreamModel, whose declared output cap is declaredCap (zero for none).
	Open(upstreamModel string, declaredCap int64) Upload
	// Release is the handler's word that it is done with the body and with everything
	// read from it; reusable says that nothing it keeps points into the body. It waits
	// for the reading of a body still arriving to be over.
	Release(reusable bool)

	// failed is the body's error once it is known to be bad, without waiting.
	failed() *protocols.APIError
	// whenPassed calls f with the whole body once it has passed every check.
	whenPassed(f func(*protocols.ParsedRequest))
	// memory is the account the body's bytes are taken from (nil: no ceiling).
	memory() *BodyShare
}

// Upload is one attempt's upstream body, as the transport reads it.
type Upload interface {
	io.ReadCloser
	// Length is the body's length in bytes, or -1 while it is not known.
	Length() int64
	// early reports whether the upstream may not have had the whole body yet: it was
	// sent while the client still sent it, and not all of it went.
	early() bool
	// sendWholeAgain reports that the attempt is to be made again, on the same
	// candidate, with the whole body once it is in.
	sendWholeAgain() bool
	// usageInjected reports whether the body asked for usage on the client's behalf;
	// known once the whole body passed.
	usageInjected() bool
}

// BodyLimits bound what ReadBody reads: at most Max bytes, taken from Memory on the
// account of the request's Key.
type BodyLimits struct {
	Max    int64
	Memory *BodyMemory
	Key    string
}

// ReadBody reads the client's body for op from r (which must stop at limits.Max, as
// http.MaxBytesReader does), declared contentLength bytes long (-1 when unknown). A large
// body is read until its model is known; when forward accepts that model, the Body is
// returned still arriving, read on beside the relay and judged at its end by the check
// forward gave (the checks a whole body gets after its scan). Any other body is read
// whole and scanned. A body refused is its client error, and holds nothing.
func ReadBody(op protocols.Operation, r io.Reader, contentLength int64, limits BodyLimits,
	forward func(model string) (check func(*protocols.ParsedRequest) *protocols.APIError, ok bool)) (Body, *protocols.APIError) {
	if contentLength > limits.Max {
		// Refused on its declared length, before a byte is read: net/http sends
		// `100 Continue` only once the body is read, so a client that asked for it never
		// sends a body that would be thrown away.
		return nil, protocols.ErrBodyTooLarge(op.Family, limits.Max)
	}
	if contentLength >= ForwardWhileArrivingMin && contentLength <= limits.Max {
		arriving, apiErr := NewArrivingBodyWithin(op, int(contentLength), limits.Memory.For(limits.Key))
		if apiErr != nil {
			return nil, apiErr
		}
		if model, ok := arriving.ReadUntilModel(r); ok && forward != nil {
			if check, ok := forward(model); ok {
				arriving.FinishWhileForwarding(r, check)
				return arriving, nil
			}
		}
		if _, apiErr := arriving.Finish(r); apiErr != nil {
			arriving.Release(false)
			return nil, apiErr
		}
		return arriving, nil
	}
	// A small body's account lives in the body itself: one allocation a request fewer.
	whole := &wholeBody{op: op}
	share := limits.Memory.forInto(&whole.share, limits.Key)
	body, held, err := protocols.ReadBoundedWithin(r, contentLength, int(limits.Max)+1, share)
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return nil, protocols.ErrBodyTooLarge(op.Family, limits.Max)
		case errors.Is(err, protocols.ErrNoBodyMemory):
			return nil, share.Refusal(op.Family)
		}
		return nil, protocols.ErrBodyRead(op.Family, err)
	}
	parsed, apiErr := protocols.ParseRequest(op.Family, body)
	if apiErr != nil {
		share.Give(held)
		return nil, apiErr
	}
	whole.parsed, whole.mem, whole.held = parsed, share, held
	return whole, nil
}

// WholeBody is a body read and parsed whole by its caller, held against no ceiling.
func WholeBody(op protocols.Operation, parsed *protocols.ParsedRequest) Body {
	return &wholeBody{op: op, parsed: parsed}
}

// wholeBody is a small body, read whole into memory of its own. It has no pooled buffer
// to protect: an upstream body the transport closes late reads memory the collector
// keeps for it.
type wholeBody struct {
	op       protocols.Operation
	parsed   *protocols.ParsedRequest
	mem      *BodyShare
	share    BodyShare // where mem points when it is the body's own account
	held     int64     // what the body took from mem, counted until the request is over
	released atomic.Bool
}

func (b *wholeBody) Parsed() *protocols.ParsedRequest { return b.parsed }

func (b *wholeBody) Wait() (*protocols.ParsedRequest, *protocols.APIError) { return b.parsed, nil }

func (b *wholeBody) Open(upstreamModel string, declaredCap int64) Upload {
	whole, injected := b.parsed.Upstream(b.op, upstreamModel, declaredCap)
	return &wholeUpload{ReadCloser: io.NopCloser(whole.Reader()), length: int64(whole.Len()), injected: injected}
}

func (b *wholeBody) Release(bool) {
	if b.released.CompareAndSwap(false, true) {
		b.mem.Give(b.held)
	}
}

func (b *wholeBody) failed() *protocols.APIError { return nil }

func (b *wholeBody) whenPassed(f func(*protocols.ParsedRequest)) { f(b.parsed) }

func (b *wholeBody) memory() *BodyShare { return b.mem }

// wholeUpload is the upstream form of a whole body.
type wholeUpload struct {
	io.ReadCloser
	length   int64
	injected bool
}

func (u *wholeUpload) Length() int64        { return u.length }
func (u *wholeUpload) early() bool          { return false }
func (u *wholeUpload) sendWholeAgain() bool { return false }
func (u *wholeUpload) usageInjected() bool  { return u.injected }

// Parsed is the whole body once Finish or Wait gave it.
func (a *ArrivingBody) Parsed() *protocols.ParsedRequest { return a.passed.Load() }

// Open forwards the body as it arrives until Wait or Finish has given it whole; then it is
// the whole body's upstream form, read from the buffer it holds until the transport
// closes it, which may be after RoundTrip returns.
func (a *ArrivingBody) Open(upstreamModel string, declaredCap int64) Upload {
	if parsed := a.Parsed(); parsed != nil {
		whole, injected := parsed.Upstream(a.op, upstreamModel, declaredCap)
		return &wholeUpload{ReadCloser: a.Hold(whole.Reader()), length: int64(whole.Len()), injected: injected}
	}
	return a.Forward(upstreamModel, declaredCap)
}

func (a *ArrivingBody) failed() *protocols.APIError { return a.Failed() }

func (a *ArrivingBody) whenPassed(f func(*protocols.ParsedRequest)) { a.WhenGood(f) }

func (a *ArrivingBody) memory() *BodyShare { return a.mem }

func (f *Forwarder) early() bool          { return !f.Delivered() }
func (f *Forwarder) sendWholeAgain() bool { return f.SendWholeAgain() }

// usageInjected is InjectedUsage, or for a body not delivered whole, what the whole body
// would have asked for.
func (f *Forwarder) usageInjected() bool {
	if f.Delivered() {
		return f.InjectedUsage()
	}
	_, injected := f.a.parsed.Upstream(f.a.op, f.upstreamModel, f.declaredCap)
	return injected
}
