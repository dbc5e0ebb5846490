package protocols

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"sync"

	"github.com/tidwall/gjson"
)

// MaxEventSize bounds one server-sent event the gateway holds (a Responses
// response.completed carries the whole response, so it is generous). A larger one, complete
// or not, is not returned: the stream has overflowed.
const MaxEventSize = 8 << 20

// Event is one complete server-sent event as the upstream wrote it. Its slices point into
// the EventStream's buffer and are valid until the next Push, Fill or Release.
type Event struct {
	Raw  []byte // the whole event, terminator included
	Name []byte // value of the `event:` line; nil when the event has none
	Data []byte // payload of the first `data:` line
	// dataAt is where Data starts inside Raw.
	dataAt int
}

// EventStream cuts an SSE byte stream into events and rewrites them one at a time, asking
// the stream's shape what each event means. It holds back only the bytes of an event that
// is not complete yet, never a complete one.
type EventStream struct {
	shape Shape
	// stream is the shape's reader of this stream's events, with what it remembers.
	stream shapeStream
	// modelLiteral is the service model id as a JSON string literal, spliced in place of
	// the upstream model wherever the event shape carries one.
	modelLiteral []byte
	scrub        Scrubber
	secrets      secretFinder // the scrubber's secrets, searched per event
	// head is the start of the last event read whole, held only while it was free of
	// secrets: bytes a new event shares with it from its first byte need no secret search
	// (see holdsSecret), and no second check that they begin one JSON object (see
	// dataIsObject). headDataAt is where its data starts.
	head       []byte
	headDataAt int
	// check is the object check's place after reading checkLen bytes of the head's data:
	// an event whose data begins with those bytes resumes it there. checkLen is 0 when
	// there is none.
	check    scanMark
	checkLen int

	buf []byte // nil while no byte is held: it comes from eventBufs only while needed
	off int    // start of the first unconsumed byte in buf
	// probe is what a wait for the upstream reads into while nothing is held.
	probe [1]byte
	// overflowed is set once an event exceeded MaxEventSize; broken once an unreadable
	// event was kept from the client; errored once an in-band error event was passed on.
	overflowed, broken, errored bool

	// Obs is what the stream carried so far; Obs.Complete is set once the stream's
	// natural last event has been seen ([DONE], response.completed/failed/incomplete,
	// message_stop).
	Obs Observation
}

// NewEventStream prepares the rewriting of one upstream stream for op. dropUsageChunk
// removes the chat usage-only chunk the gateway asked for itself.
func NewEventStream(kind Kind, serviceModel string, dropUsageChunk bool, scrub Scrubber) *EventStream {
	shape := ShapeOf(kind)
	s := shape.newStream(dropUsageChunk)
	s.shape = shape
	s.modelLiteral = AppendJSONString(nil, serviceModel)
	s.scrub = scrub
	s.secrets = newSecretFinder(scrub.Secrets)
	s.Obs = Observation{Billable: kind.generates()}
	return s
}

// Event buffers are shared: a stream holds one only while it has bytes of an event in
// hand, so ten thousand streams waiting on their upstreams hold none, and each read can
// still take everything the upstream connection has buffered.
var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, eventBufSize); return &b }}

const (
	eventBufSize = 8 << 10
	// maxPooledEventBuf is the largest buffer given back; one grown for a huge event is
	// left to the garbage collector.
	maxPooledEventBuf = 64 << 10
)

func (s *EventStream) holdBuffer() {
	if s.buf == nil {
		s.buf = (*eventBufs.Get().(*[]byte))[:0]
	}
}

// Release gives the stream's buffer back when it holds no unread byte; Events taken
// before are no longer valid. The relay calls it when the stream ends.
func (s *EventStream) Release() {
	if s.buf == nil || s.off < len(s.buf) {
		return
	}
	if cap(s.buf) <= maxPooledEventBuf {
		b := s.buf[:0]
		eventBufs.Put(&b)
	}
	s.buf, s.off = nil, 0
}

// Push adds bytes read from the upstream.
func (s *EventStream) Push(p []byte) {
	s.holdBuffer()
	s.compact()
	s.buf = append(s.buf, p...)
}

// minRead is the least room Fill reads into: the upstream connection's reader holds up to
// 4 KiB, and taking all of it at once means one write to the client for all of it.
const minRead = 4 << 10

// Fill reads what the upstream has sent straight into the stream's buffer, sparing the
// relay a read buffer of its own and a copy of every byte. Events taken before are no
// longer valid.
//
// When no byte of an event is held, it first waits for one byte without holding a
// buffer, then takes one and reads whatever else has arrived. That second read can only
// wait when the bytes in hand complete no event, so no complete event is held back by it.
func (s *EventStream) Fill(r io.Reader) (int, error) {
	s.Release()
	if s.buf == nil {
		n, err := r.Read(s.probe[:])
		if n == 0 {
			return 0, err
		}
		s.holdBuffer()
		s.buf = append(s.buf, s.probe[0])
		if err != nil || eventEnd(s.buf) >= 0 {
			return n, err
		}
		m, err := s.readMore(r)
		return n + m, err
	}
	s.compact()
	return s.readMore(r)
}

// readMore reads once into the buffer's free room, growing it when an incomplete event
// leaves less than minRead free.
func (s *EventStream) readMore(r io.Reader) (int, error) {
	if cap(s.buf)-len(s.buf) < minRead {
		s.buf = slices.Grow(s.buf, max(cap(s.buf), minRead))
	}
	n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf = s.buf[:len(s.buf)+n]
	return n, err
}

// compact moves the incomplete tail to the front before the buffer grows, so that it
// stays the size of the largest event rather than of the whole stream.
func (s *EventStream) compact() {
	if s.off > 0 {
		n := copy(s.buf, s.buf[s.off:])
		s.buf = s.buf[:n]
		s.off = 0
	}
}

// Next returns the next complete event, if one is buffered.
func (s *EventStream) Next() (Event, bool) {
	rest := s.buf[s.off:]
	if s.overflowed {
		return Event{}, false
	}
	end := eventEnd(rest)
	if end < 0 {
		s.overflowed = len(rest) > MaxEventSize
		return Event{}, false
	}
	if end > MaxEventSize {
		s.overflowed = true
		return Event{}, false
	}
	raw := rest[:end]
	s.off += end
	return parseEvent(raw), true
}

// Overflowed reports an event over MaxEventSize: the stream cannot go on.
func (s *EventStream) Overflowed() bool { return s.overflowed }

// Unreadable reports an event whose data is neither one JSON object nor the [DONE]
// marker: the shape cannot find its model to splice or read its usage, so whatever it
// holds (the upstream's model name, say) would reach the client as the upstream wrote it.
// It is the candidate's failure.
func (s *EventStream) Unreadable(ev Event) bool {
	return len(ev.Data) > 0 && string(ev.Data) != "[DONE]" && !ValidJSONObject(ev.Data)
}

// Broken reports that an unreadable event came, and was kept from the client: the stream
// must end there.
func (s *EventStream) Broken() bool { return s.broken }

// Unterminated returns, once the upstream has ended, the last event if the upstream ended
// it without a blank line, so that it is observed and passed on exactly as sent.
func (s *EventStream) Unterminated() (Event, bool) {
	rest := s.buf[s.off:]
	s.off = len(s.buf)
	if len(bytes.TrimSpace(rest)) == 0 {
		return Event{Raw: rest}, len(rest) > 0
	}
	return parseEvent(rest), true
}

// eventEnd finds the end of the first event in b (just after its blank line), or -1.
// Upstreams end lines with LF or CRLF; the CRLF search stops at the first LF blank line,
// so a buffer of many LF events is not rescanned for each one.
func eventEnd(b []byte) int {
	limit := len(b)
	lf := bytes.Index(b, lfBlank)
	if lf >= 0 {
		limit = lf + len(lfBlank)
	}
	if crlf := bytes.Index(b[:limit], crlfBlank); crlf >= 0 {
		return crlf + len(crlfBlank)
	}
	if lf >= 0 {
		return limit
	}
	return -1
}

var (
	lfBlank   = []byte("\n\n")
	crlfBlank = []byte("\r\n\r\n")
)

func parseEvent(raw []byte) Event {
	ev := Event{Raw: raw}
	// Lines end with LF, CRLF or CR; most upstreams use LF alone, found faster on its own.
	hasCR := bytes.IndexByte(raw, '\r') >= 0
	for pos := 0; pos < len(raw); {
		var lineEnd int
		if hasCR {
			lineEnd = bytes.IndexAny(raw[pos:], "\r\n")
		} else {
			lineEnd = bytes.IndexByte(raw[pos:], '\n')
		}
		if lineEnd < 0 {
			lineEnd = len(raw) - pos
		}
		line := raw[pos : pos+lineEnd]
		if v, ok := fieldValue(line, "event"); ok && ev.Name == nil {
			ev.Name = v
		} else if v, ok := fieldValue(line, "data"); ok && ev.Data == nil {
			ev.Data = v
			ev.dataAt = pos + (len(line) - len(v))
		}
		pos += lineEnd + 1
	}
	return ev
}

// fieldValue returns the value of an SSE line "name: value" (one optional space).
func fieldValue(line []byte, name string) ([]byte, bool) {
	if len(line) < len(name)+1 || string(line[:len(name)]) != name || line[len(name)] != ':' {
		return nil, false
	}
	v := line[len(name)+1:]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return v, true
}

// Errored reports that AppendRewritten passed on an in-band error event of the upstream's:
// the stream, however it ends, carried a failure.
func (s *EventStream) Errored() bool { return s.errored }

// IsError reports an in-band error event of the stream's shape.
func (s *EventStream) IsError(ev Event) bool { return s.shape.IsError(ev) }

// ErrorEvent is the shape's native in-band error that ends a stream already started.
func (s *EventStream) ErrorEvent(e *APIError) []byte {
	return s.shape.ErrorEvent(e, s.LastSequence()+1)
}

// LastSequence is the highest sequence number the stream's events carried (Responses
// numbers its events), -1 before any.
func (s *EventStream) LastSequence() int64 { return s.stream.lastSequence() }

// AppendRewritten appends the event as the client must see it to dst. keep is false when
// the event must not reach the client at all (the usage chunk the gateway asked for).
func (s *EventStream) AppendRewritten(dst []byte, ev Event) (out []byte, keep bool) {
	// What ev shares with the head is measured once, for the secret search and the
	// object check alike.
	same := commonPrefix(ev.Raw, s.head)
	masked := s.holdsSecret(ev.Raw, same)
	if masked {
		// Rare: parse the masked copy, whose slices stay valid for this call.
		ev = parseEvent(s.scrub.ScrubSecrets(ev.Raw))
	}
	switch {
	case len(ev.Data) == 0:
		return append(dst, ev.Raw...), true // comments, pings without data
	case string(ev.Data) == "[DONE]":
		// The stream's end: the last usage it reported is its final one.
		s.Obs.Complete = true
		s.Obs.UsageFinal = s.Obs.UsageReported
		return append(dst, ev.Raw...), true
	case !s.dataIsObject(ev, !masked, same):
		// Neither spliced nor scrubbed as it should be: it never reaches the client.
		s.broken = true
		return dst, false
	}
	v := s.stream.event(&s.Obs, ev)
	switch {
	case v.isError:
		// Every in-band error form is scrubbed as an error, and never dropped.
		s.errored = true
		return s.appendScrubbed(dst, ev), true
	case v.drop:
		return dst, false
	}
	return s.appendSpliced(dst, ev, v.model), true
}

// holdsSecret reports whether raw holds one of the candidate's secrets. Events of a stream
// mostly begin with the same bytes (a chat chunk's id, object, created and model): a
// secret that lay wholly within the bytes raw shares with the last clean event would have
// been in that event too, so the search starts where a secret could first end past them.
func (s *EventStream) holdsSecret(raw []byte, same int) bool {
	if len(s.secrets) == 0 {
		return false
	}
	from := max(0, same-s.secrets.longest()+1)
	if s.secrets.in(raw[from:]) {
		// The masked copy is read from scratch, and the next event compared with nothing.
		s.head, s.checkLen = s.head[:0], 0
		return true
	}
	return false
}

// maxHead bounds the copy of the last event a stream keeps.
const maxHead = 512

// minCheckStep is the least a checkpoint moves on by: a shorter step saves less than
// the copy of the scanner costs.
const minCheckStep = 16

// dataIsObject reports whether ev's data is exactly one JSON object, the verdict
// ValidJSONObject gives, and makes ev the head the next event is compared with. Events of
// a stream mostly begin with the same bytes (a chat chunk's id, object, created and model;
// a delta's type): the scanner's state after the bytes ev shares with the head depends on
// those bytes alone, so the check resumes from the state kept for them instead of reading
// them again, and keeps the state at the end of what the two share for the next event.
// A masked copy (remember unset) is checked from scratch and leaves no head: its bytes are
// not the upstream's. same is how many bytes the event as it came shares with the head.
func (s *EventStream) dataIsObject(ev Event, remember bool, same int) bool {
	data := ev.Data
	shared := 0 // what data shares with the head's data
	switch {
	case !remember || s.headDataAt >= len(s.head):
	case ev.dataAt == s.headDataAt && same >= ev.dataAt:
		shared = min(same-ev.dataAt, len(data))
	default:
		shared = commonPrefix(data, s.head[s.headDataAt:])
	}
	var sc objectScanner
	if s.checkLen > 0 && s.checkLen <= shared {
		sc.resume(s.check)
	} else {
		s.checkLen = 0
	}
	ok := true
	if shared >= s.checkLen+minCheckStep {
		// Stopped short of the end, the scan reports only faults that stay whatever
		// follows (too deep, too many members): the data is not an object either way.
		if _, f := sc.scan(data[:shared], false, nil); f != nil {
			ok = false
		} else if m, kept := sc.mark(); kept {
			s.check, s.checkLen = m, shared
		}
	}
	if ok {
		done, f := sc.scan(data, true, nil)
		ok = done && f == nil
	}
	if !remember {
		s.head, s.checkLen = s.head[:0], 0
		return ok
	}
	// ev's first checkLen data bytes are those the checkpoint read: it holds for ev too.
	// (Where the copy keeps fewer of them, the next event cannot share checkLen bytes.)
	if s.head == nil {
		s.head = make([]byte, 0, maxHead) // once, not grown by each longer event
	}
	// What the head already holds of ev is not copied again.
	s.head = append(s.head[:same], ev.Raw[same:min(len(ev.Raw), maxHead)]...)
	s.headDataAt = ev.dataAt
	return ok
}

// commonPrefix is how many bytes a and b share from their first.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(a[i:]) != binary.LittleEndian.Uint64(b[i:]) {
			break
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// appendSpliced appends ev with the model value found in its data replaced.
func (s *EventStream) appendSpliced(dst []byte, ev Event, model gjson.Result) []byte {
	if !model.Exists() || model.Index <= 0 {
		return append(dst, ev.Raw...)
	}
	at := ev.dataAt + model.Index
	return SpliceAt(ev.Raw, at, at+len(model.Raw), s.modelLiteral).AppendTo(dst)
}

func (s *EventStream) appendScrubbed(dst []byte, ev Event) []byte {
	// Scrub before splicing: the service id may contain the upstream name ("acme/gpt-4o"
	// for "gpt-4o") and must not be rewritten a second time. Scrub never modifies its input.
	scrubbed := parseEvent(s.scrub.Scrub(ev.Raw))
	var model gjson.Result
	if path := s.shape.eventModelPath(scrubbed); path != "" {
		model = getView(scrubbed.Data, path)
	}
	return s.appendSpliced(dst, scrubbed, model)
}
