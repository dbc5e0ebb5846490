package relay

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
)

// ForwardWhileArrivingMin is the smallest declared body the gateway starts forwarding
// before all of it has arrived. Smaller bodies come in one or two reads: waiting for them
// costs nothing worth the bookkeeping.
const ForwardWhileArrivingMin = 64 << 10

// patience is how long an upstream is kept waiting on a body that the client is still
// sending. A forwarder gives up once no byte has come for stall, or once the body has
// taken longer than stall plus its length at minRate bytes a second. The attempt is then
// made again with the whole body once it is in, as for a small body: a slow client costs
// its own time, never a held upstream connection.
type patience struct {
	stall   time.Duration
	minRate int
}

var defaultPatience = patience{stall: time.Second, minRate: 1 << 20}

// giveUpAt is the latest a body of declared bytes that began to arrive at start may be
// whole: the stall limit plus its length at the minimum rate.
func (p patience) giveUpAt(start time.Time, declared int) time.Time {
	rate := int64(p.minRate)
	whole := time.Duration(int64(declared)/rate)*time.Second + time.Duration(int64(declared)%rate)*time.Second/time.Duration(rate)
	return start.Add(p.stall + whole)
}

// wait is how much longer, at now, a forwarder waits for more of a body whose last bytes
// came at lastAt and which must be whole by giveUpAt; zero or less: it gives up.
func (p patience) wait(now, lastAt, giveUpAt time.Time) time.Duration {
	return min(lastAt.Add(p.stall).Sub(now), giveUpAt.Sub(now))
}

// ArrivingBody is a request body that the gateway forwards while it is still coming in.
// It is read into a buffer that starts small and doubles as bytes arrive (up to its
// Content-Length), and is checked as it arrives by the scan every body gets
// (protocols.BodyScan). Each attempt on a candidate takes its own Forwarder, which gives
// the bytes known good so far, with the candidate's model spliced in, and the rest only
// once the whole body has passed every check. Until then the upstream holds a request it
// cannot act on: it lacks at least the object's closing brace. A body that fails ends the
// forwarding with an error, so the upstream never sees its end.
//
// The buffer is reused once nothing reads it any more. Whoever reads it holds it: the
// handler that made the body (until Release), the goroutine that finishes reading it, and
// every upstream body made from it (until the transport closes it, which may be after
// RoundTrip has returned). Only a body that passed every check, whose handler vouched
// that no view into it is left, goes back when the last holder lets go; any other
// buffer is left to the collector. So is every buffer the body outgrew: the scanner's
// state and the strings read from it may still point into one.
type ArrivingBody struct {
	op       protocols.Operation
	declared int     // the body's length as Content-Length gave it
	buf      []byte  // at most the declared length and one byte more, to see the end
	pooled   *[]byte // buf's pool entry
	// outgrown are the pool entries buf grew out of: they go back with it, under the same
	// rule, once nothing reads any of them.
	outgrown []*[]byte
	mem      *BodyShare
	charged  int64 // what buf and the buffers it outgrew took from mem
	holders  atomic.Int32
	reuse    atomic.Bool // the handler left no view into buf behind
	scan     *protocols.BodyScan
	// Only the reading goroutine touches these: how much of the body the scanner has
	// been given, and whether reading is over.
	fedAt int
	ended bool
	// Where the model value lies, as ReadUntilModel found it.
	modelAt, modelEnd int

	mu    sync.Mutex
	start time.Time // when reading began
	// patience bounds a forwarder's wait on this body, read on the clock now; recycle
	// gives its buffers back (all three replaced by tests only).
	patience patience
	now      func() time.Time
	recycle  func(bufs ...*[]byte)
	lastAt   time.Time // when the last bytes arrived
	arrived  int
	safe     int // buf[:safe] is known to begin a good body, short of its closing brace
	state    arrivalState
	err      *protocols.APIError
	parsed   *protocols.ParsedRequest
	changed  chan struct{} // closed, and replaced, at every change of the above
	onGood   []func(*protocols.ParsedRequest)
	done     chan struct{} // closed once the body has been read and judged
	// readingOn is set while a goroutine of its own reads the body; passed is the whole
	// body once Finish or Wait gave it.
	readingOn atomic.Bool
	passed    atomic.Pointer[protocols.ParsedRequest]
}

type arrivalState uint8

const (
	stillArriving arrivalState = iota
	arrivedGood
	arrivedBad
)

// NewArrivingBody prepares to read a body of declared bytes for op, with no ceiling on
// its memory.
func NewArrivingBody(op protocols.Operation, declared int) *ArrivingBody {
	a, _ := NewArrivingBodyWithin(op, declared, nil)
	return a
}

// NewArrivingBodyWithin prepares to read a body of declared bytes for op, whose buffers
// are taken from mem. It is mem's refusal when mem has no room for the first buffer; the
// body is given back to mem once its last holder lets go.
func NewArrivingBodyWithin(op protocols.Operation, declared int, mem *BodyShare) (*ArrivingBody, *protocols.APIError) {
	size := min(declared+1, protocols.FirstBodyBuffer)
	charge := int64(bodyBufferSize(size))
	if !mem.Take(charge) {
		return nil, mem.Refusal(op.Family)
	}
	now := time.Now()
	pooled := takeBodyBuffer(size)
	a := &ArrivingBody{op: op, declared: declared, buf: *pooled, pooled: pooled, mem: mem, charged: charge,
		start: now, lastAt: now, changed: make(chan struct{}), done: make(chan struct{}),
		patience: defaultPatience, now: time.Now, recycle: recycleBodyBuffers}
	a.holders.Store(1)
	a.scan = protocols.NewBodyScan(op.Family)
	return a, nil
}

// Release is the handler's word that it is done with the body and with everything read
// from it. reusable says that nothing it keeps (a log field, an error still to be
// written) points into the body: only then may its buffer serve another request, once
// the upstream bodies made from it are closed too.
func (a *ArrivingBody) Release(reusable bool) {
	if a.readingOn.Load() {
		<-a.done // the reader given to FinishWhileForwarding is its caller's again
	}
	a.reuse.Store(reusable)
	a.release()
}

// hold counts one more reader of the buffer; false once it has none left to share.
func (a *ArrivingBody) hold() bool {
	for {
		n := a.holders.Load()
		if n <= 0 {
			return false
		}
		if a.holders.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release ends one reader's hold; the last one gives a good body's buffer back.
func (a *ArrivingBody) release() {
	if a.holders.Add(-1) != 0 {
		return
	}
	a.mu.Lock()
	good := a.state == arrivedGood
	a.mu.Unlock()
	if good && a.reuse.Load() {
		// A reader that should not be left would now see no body rather than another
		// client's bytes (and the race detector would name it in tests).
		a.parsed.Body, a.buf = nil, nil
		a.recycle(append(a.outgrown, a.pooled)...)
	}
	a.mem.Give(a.charged)
}

// grow moves the body into a buffer twice as large (no larger than the declared length
// and a byte), taken from the ceiling first; false when the ceiling has no room. Only
// the reading goroutine calls it. The outgrown buffer stays charged and is pooled again
// only with the final one, when the last holder lets go of a body whose handler vouched
// for it: until then forwarders may still copy from it, and the scanner's keys may point
// into it.
func (a *ArrivingBody) grow() bool {
	size := min(2*len(a.buf), a.declared+1)
	charge := int64(bodyBufferSize(size))
	if !a.mem.Take(charge) {
		return false
	}
	pooled := takeBodyBuffer(size)
	copy(*pooled, a.buf[:a.arrived])
	a.mu.Lock()
	a.outgrown = append(a.outgrown, a.pooled)
	a.buf, a.pooled = *pooled, pooled
	a.mu.Unlock()
	a.charged += charge
	return true
}

// ReadUntilModel reads from r until the body's top-level model is known as a string, and
// returns it. ok is false when the body ended (or failed) first: then Finish gives the
// verdict on what was read.
func (a *ArrivingBody) ReadUntilModel(r io.Reader) (model string, ok bool) {
	for !a.ended && !a.scan.Doomed() {
		if m, at, end, ok := a.scan.Model(a.buf); ok {
			a.modelAt, a.modelEnd = at, end
			return m, true
		}
		a.readOnce(r)
	}
	return "", false
}

// Finish reads the rest of the body from r where the caller waits, and gives the verdict
// of the scan; the caller runs the other checks itself.
func (a *ArrivingBody) Finish(r io.Reader) (*protocols.ParsedRequest, *protocols.APIError) {
	for !a.ended {
		a.readOnce(r)
	}
	a.judge(nil)
	if a.err == nil {
		a.passed.Store(a.parsed)
	}
	return a.parsed, a.err
}

// FinishWhileForwarding reads the rest of the body from r on a goroutine of its own; once
// it is all there and scanned, check (the checks a whole body gets after its scan)
// decides whether it is good. The caller must Wait before it lets go of r.
func (a *ArrivingBody) FinishWhileForwarding(r io.Reader, check func(*protocols.ParsedRequest) *protocols.APIError) {
	a.hold() // the handler holds it still
	a.readingOn.Store(true)
	go func() {
		defer a.release()
		for !a.ended {
			a.readOnce(r)
		}
		a.judge(check)
	}()
}

// judge publishes the verdict on a body read to its end, runs the callbacks of a good one,
// and lets Wait return.
func (a *ArrivingBody) judge(check func(*protocols.ParsedRequest) *protocols.APIError) {
	defer close(a.done)
	a.mu.Lock()
	bad := a.state == arrivedBad
	a.mu.Unlock()
	if bad {
		return
	}
	if check != nil {
		if err := check(a.parsed); err != nil {
			a.fail(err)
			return
		}
	}
	a.mu.Lock()
	a.state = arrivedGood
	callbacks := a.onGood
	a.onGood = nil
	a.notify()
	a.mu.Unlock()
	for _, f := range callbacks {
		f(a.parsed)
	}
}

// readOnce reads once, scans what it can and publishes how far the body is good. Only
// the reading goroutine calls it; what the forwarders read changes under mu.
func (a *ArrivingBody) readOnce(r io.Reader) {
	declared := a.declared
	if a.arrived == len(a.buf) && !a.grow() {
		a.ended = true
		a.fail(a.mem.Refusal(a.op.Family))
		return
	}
	n, err := r.Read(a.buf[a.arrived:])
	arrived := a.arrived + n
	if arrived > declared || err != nil && (err != io.EOF || arrived < declared) {
		// A client that stopped sending or too slow (408), or one that sent more than
		// Content-Length said (net/http never lets that happen).
		a.ended = true
		a.fail(protocols.ErrBodyRead(a.op.Family, err))
		return
	}
	final := arrived == declared
	// The scanner reads a token cut at the end again: it is given more only once there is
	// at least as much new as it would read again, so a body that arrives a byte at a time
	// costs a bounded number of passes over it.
	if final || arrived-a.fedAt >= max(4<<10, a.fedAt-a.scan.Resumes()) {
		parsed, bad := a.scan.Read(a.buf[:arrived], final)
		a.fedAt = arrived
		if final {
			a.ended = true
			if bad != nil {
				a.fail(bad)
				return
			}
			a.parsed = parsed
		}
	}
	a.publish(arrived, a.scan.Safe(), stillArriving, nil)
}

// fail ends the body with the client's error; nothing more of it is forwarded.
func (a *ArrivingBody) fail(err *protocols.APIError) { a.publish(a.arrived, a.safe, arrivedBad, err) }

// publish records progress for the forwarders and wakes them.
func (a *ArrivingBody) publish(arrived, safe int, state arrivalState, err *protocols.APIError) {
	a.mu.Lock()
	if arrived > a.arrived {
		a.lastAt = a.now()
	}
	a.arrived, a.safe = arrived, max(a.safe, safe)
	if state != stillArriving {
		a.state, a.err = state, err
	}
	a.notify()
	a.mu.Unlock()
}

func (a *ArrivingBody) notify() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// WhenGood calls f with the whole body once it has passed every check, at once if it
// already has; never for a body that fails.
func (a *ArrivingBody) WhenGood(f func(*protocols.ParsedRequest)) {
	a.mu.Lock()
	if a.state == arrivedGood {
		a.mu.Unlock()
		f(a.parsed)
		return
	}
	a.onGood = append(a.onGood, f)
	a.mu.Unlock()
}

// Wait blocks until the whole body has been read and judged, and gives the verdict.
func (a *ArrivingBody) Wait() (*protocols.ParsedRequest, *protocols.APIError) {
	<-a.done
	if a.err == nil {
		a.passed.Store(a.parsed)
	}
	return a.parsed, a.err
}

// Failed is the body's error once it is known to be bad, without waiting.
func (a *ArrivingBody) Failed() *protocols.APIError {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state == arrivedBad {
		return a.err
	}
	return nil
}

// Forwarder is the body one attempt sends upstream while the client's body arrives.
type Forwarder struct {
	a             *ArrivingBody
	upstreamModel string
	declaredCap   int64
	value         []byte // the candidate's model as a JSON string
	modelAt, end  int    // where the client's model value lies in the body
	sent          int    // bytes given so far
	length        int64
	rest          *protocols.SpliceReader // the rest of the whole body's upstream form, once it passed
	injectedUsage bool
	giveUpAt      time.Time // the latest the body may be whole, at the client's slowest
	wholeAgain    atomic.Bool
	delivered     atomic.Bool
	closed        chan struct{}
	closeOnce     sync.Once
	hold          bufferHold
}

// Errors a Forwarder ends with; neither is the candidate's doing.
var (
	// ErrBodyRefused: the client's body failed its checks, or the client stopped sending.
	ErrBodyRefused = errors.New("the client's request body was refused")
	// ErrBodyRewritten: the whole body needs a change among the bytes already sent (a
	// chat stream's request for usage inside the client's own stream_options). The
	// attempt is made again with the whole body.
	ErrBodyRewritten = errors.New("the request body must be sent again whole")
	// ErrBodyStalled: the client sends too slowly to keep an upstream waiting on it. The
	// attempt is made again once the whole body is in.
	ErrBodyStalled   = errors.New("the client's body arrives too slowly to forward as it comes")
	errForwardClosed = errors.New("the forwarded body was closed")
)

// Forward starts the body of an attempt on a candidate that calls the model
// upstreamModel, whose declared output cap is declaredCap (zero for none): the body
// Upstream makes of the whole request. It must only be called after ReadUntilModel
// found the model.
func (a *ArrivingBody) Forward(upstreamModel string, declaredCap int64) *Forwarder {
	f := &Forwarder{a: a, upstreamModel: upstreamModel, declaredCap: declaredCap, value: protocols.AppendJSONString(nil, upstreamModel),
		modelAt: a.modelAt, end: a.modelEnd, closed: make(chan struct{}), hold: a.newHold()}
	f.giveUpAt = a.patience.giveUpAt(a.start, a.declared)
	f.length = -1
	// A chat stream's request for usage changes a body's length, and so does the declared
	// cap a Family A generation without one gets (Family B's max_tokens is required); any
	// other body is the client's bytes with the model replaced.
	mayGetCap := declaredCap > 0 && a.op.Generates() && a.op.Family == protocols.FamilyA
	if a.op.Kind != protocols.KindChat && !mayGetCap {
		f.length = int64(a.declared - (f.end - f.modelAt) + len(f.value))
	}
	return f
}

// Length is the body's length in bytes, or -1 while it is not known.
func (f *Forwarder) Length() int64 { return f.length }

// SendWholeAgain reports whether the forwarding ended with ErrBodyRewritten or
// ErrBodyStalled: the attempt is to be made again, on the same candidate, with the whole
// body once it is in.
func (f *Forwarder) SendWholeAgain() bool { return f.wholeAgain.Load() }

// Delivered reports whether the upstream was given the whole body.
func (f *Forwarder) Delivered() bool { return f.delivered.Load() }

// InjectedUsage reports whether the body sent asked for usage on the client's behalf;
// known once the whole body was given.
func (f *Forwarder) InjectedUsage() bool { return f.injectedUsage }

// Close ends a Read that waits for more of the body, and then the forwarder's hold on it.
func (f *Forwarder) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	f.hold.letGo()
	return nil
}

func (f *Forwarder) Read(p []byte) (int, error) { return f.hold.read(p, f.readHeld) }

// readHeld is Read while the forwarder holds the buffer.
func (f *Forwarder) readHeld(p []byte) (int, error) {
	for {
		if f.rest != nil {
			n, err := f.rest.Read(p)
			if err == io.EOF || f.rest.Empty() {
				f.delivered.Store(true)
			}
			return n, err
		}
		a := f.a
		a.mu.Lock()
		state, safe, changed, lastAt, buf := a.state, a.safe, a.changed, a.lastAt, a.buf
		a.mu.Unlock()
		switch state {
		case arrivedBad:
			return 0, ErrBodyRefused
		case arrivedGood:
			if err := f.takeWhole(); err != nil {
				return 0, err
			}
			continue
		}
		if n := f.copyKnownGood(p, buf, safe); n > 0 {
			return n, nil
		}
		wait := f.a.patience.wait(f.a.now(), lastAt, f.giveUpAt)
		if wait <= 0 {
			f.wholeAgain.Store(true)
			return 0, ErrBodyStalled
		}
		timer := time.NewTimer(wait)
		select {
		case <-changed:
		case <-timer.C:
		case <-f.closed:
			timer.Stop()
			return 0, errForwardClosed
		}
		timer.Stop()
	}
}

// parts are the upstream body's bytes in buf up to the client's byte limit: the body
// before the model, the candidate's model, the body after it.
func (f *Forwarder) parts(buf []byte, limit int) [3][]byte {
	return [3][]byte{buf[:f.modelAt], f.value, buf[f.end:max(f.end, limit)]}
}

// copyKnownGood copies into p what follows the bytes sent, up to the client's byte safe,
// from buf, the body's buffer when safe was read (a buffer the body outgrew since keeps
// the same bytes up to safe).
func (f *Forwarder) copyKnownGood(p, buf []byte, safe int) int {
	skip, n := f.sent, 0
	for _, part := range f.parts(buf, safe) {
		if skip >= len(part) {
			skip -= len(part)
			continue
		}
		c := copy(p[n:], part[skip:])
		skip = 0
		n += c
		if n == len(p) {
			break
		}
	}
	f.sent += n
	return n
}

// takeWhole switches to the body as the whole request has it, after checking that what
// was sent is its beginning.
func (f *Forwarder) takeWhole() error {
	whole, injected := f.a.parsed.Upstream(f.a.op, f.upstreamModel, f.declaredCap)
	if (f.length >= 0 && int64(whole.Len()) != f.length) || !f.sentBegins(whole) {
		f.wholeAgain.Store(true)
		return ErrBodyRewritten
	}
	f.injectedUsage = injected
	f.rest = whole.ReaderAfter(f.sent)
	return nil
}

// sentBegins reports whether the bytes sent are the beginning of whole.
func (f *Forwarder) sentBegins(whole protocols.Splice) bool {
	return whole.Begins(f.parts(f.a.buf, len(f.a.buf)), f.sent) // the whole body is in: buf grows no more
}

// Hold makes r, a reader of the body's buffer (the whole body's upstream form), an
// upstream body that holds the buffer until it is closed.
func (a *ArrivingBody) Hold(r io.Reader) io.ReadCloser {
	return &heldReader{r: r, hold: a.newHold()}
}

type heldReader struct {
	r    io.Reader
	hold bufferHold
}

func (h *heldReader) Read(p []byte) (int, error) { return h.hold.read(p, h.r.Read) }

func (h *heldReader) Close() error {
	h.hold.letGo()
	return nil
}

// bufferHold is an upstream body's hold on the buffer it reads. Reads run under its
// lock, so letting go waits for a Read under way: a transport may close a body while
// another goroutine reads it.
type bufferHold struct {
	mu   sync.Mutex
	a    *ArrivingBody
	held bool
}

func (a *ArrivingBody) newHold() bufferHold { return bufferHold{a: a, held: a.hold()} }

// read reads with readFrom while the buffer is held.
func (h *bufferHold) read(p []byte, readFrom func([]byte) (int, error)) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return 0, errForwardClosed
	}
	return readFrom(p)
}

// letGo ends the hold once no Read is under way; again, it does nothing.
func (h *bufferHold) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.held = false
		h.a.release()
	}
}
