package protocols

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// MaxEventSize bounds one server-sent event the gateway holds (a Responses
// response.completed carries the whole response, so it is generous). A larger one, complete
// or not, is not returned: the stream has overflowed.
const MaxEventSize = 8 << 20

// Event is one complete server-sent event as the upstream wrote it. Its slices point into
// the EventStream's buffer and are valid until the next Push.
type Event struct {
	Raw  []byte // the whole event, terminator included
	Name []byte // value of the `event:` line; nil when the event has none
	Data []byte // payload of the first `data:` line
	// dataAt is where Data starts inside Raw.
	dataAt int
}

// EventStream cuts an SSE byte stream into events and rewrites them one at a time. It
// holds back only the bytes of an event that is not complete yet, never a complete one.
type EventStream struct {
	kind Kind
	// modelLiteral is the service model id as a JSON string literal, spliced in place of
	// the upstream model wherever the event shape carries one.
	modelLiteral []byte
	// dropUsageChunk removes the chat usage-only chunk the gateway asked for itself.
	dropUsageChunk bool
	scrub          Scrubber

	buf []byte
	off int // start of the first unconsumed byte in buf
	// overflowed is set once an event exceeded MaxEventSize.
	overflowed bool

	// LastSequence is the highest Responses sequence_number seen, -1 before any.
	LastSequence int64
	// Usage is the raw JSON of the most recent usage object seen in the stream (chat usage
	// chunk, Responses terminal event, Family B message_start then message_delta).
	Usage []byte
	// StartUsage is Family B's message_start usage (input and cache counts).
	StartUsage []byte
	// OutputChars and ThinkingChars count the generated text the stream carried (answer
	// text and tool arguments; thinking and reasoning text), for estimating usage when a
	// stream ends before its usage arrives.
	OutputChars, ThinkingChars int64
	// Terminal is set once the stream's natural last event has been seen: [DONE],
	// response.completed/failed/incomplete, or message_stop.
	Terminal bool
}

// NewEventStream prepares the rewriting of one upstream stream for op.
func NewEventStream(kind Kind, serviceModel string, dropUsageChunk bool, scrub Scrubber) *EventStream {
	return &EventStream{
		kind:           kind,
		modelLiteral:   AppendJSONString(nil, serviceModel),
		dropUsageChunk: dropUsageChunk,
		scrub:          scrub,
		LastSequence:   -1,
		buf:            make([]byte, 0, 2048),
	}
}

// Push adds bytes read from the upstream.
func (s *EventStream) Push(p []byte) {
	if s.off > 0 {
		// Move the incomplete tail to the front before growing, so the buffer stays the
		// size of the largest event rather than of the whole stream.
		n := copy(s.buf, s.buf[s.off:])
		s.buf = s.buf[:n]
		s.off = 0
	}
	s.buf = append(s.buf, p...)
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

// Buffered is how many bytes of an event not complete yet are held.
func (s *EventStream) Buffered() int { return len(s.buf) - s.off }

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
	for pos := 0; pos < len(raw); {
		lineEnd := bytes.IndexAny(raw[pos:], "\r\n")
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

// IsError reports an in-band error event: Family B `event: error`, a Responses `error`
// or `response.failed` event, or a chat data frame whose JSON carries `error`.
func (s *EventStream) IsError(ev Event) bool {
	switch s.kind {
	case KindMessages:
		return string(ev.Name) == "error" || gjson.GetBytes(ev.Data, "type").Str == "error"
	case KindResponses:
		t := string(ev.Name)
		if t == "" {
			t = gjson.GetBytes(ev.Data, "type").Str
		}
		return t == "error" || t == "response.failed"
	}
	// As the SDKs read it: an `error` that is null or false is no error.
	e := gjson.GetBytes(ev.Data, "error")
	return string(ev.Name) == "error" || (e.Exists() && e.Type != gjson.Null && e.Type != gjson.False)
}

// AppendRewritten appends the event as the client must see it to dst. keep is false when
// the event must not reach the client at all (the usage chunk the gateway asked for).
func (s *EventStream) AppendRewritten(dst []byte, ev Event) (out []byte, keep bool) {
	if s.scrub.HasSecret(ev.Raw) {
		// Rare: parse the masked copy, whose slices stay valid for this call.
		ev = parseEvent(s.scrub.ScrubSecrets(ev.Raw))
	}
	if len(ev.Data) == 0 || ev.Data[0] != '{' {
		if string(ev.Data) == "[DONE]" {
			s.Terminal = true
		}
		return append(dst, ev.Raw...), true // [DONE], comments, pings without data
	}
	if s.kind == KindChat {
		return s.appendChatChunk(dst, ev)
	}
	path := s.observe(ev)
	// Every in-band error form IsError knows is scrubbed, including those an upstream
	// sends without an `event:` line, and an error is never dropped.
	if s.IsError(ev) {
		return s.appendScrubbed(dst, ev), true
	}
	if path != "" {
		if start, end, ok := ValueSpan(ev.Data, path); ok {
			at := ev.dataAt
			dst = append(dst, ev.Raw[:at+start]...)
			dst = append(dst, s.modelLiteral...)
			return append(dst, ev.Raw[at+end:]...), true
		}
	}
	return append(dst, ev.Raw...), true
}

// appendChatChunk is AppendRewritten for a chat chunk, the most frequent event there is:
// one pass over the chunk's top level finds the model, usage, choices and any error,
// where separate lookups would scan the chunk once each.
func (s *EventStream) appendChatChunk(dst []byte, ev Event) ([]byte, bool) {
	var model, usage, choices, errField gjson.Result
	gjson.Parse(view(ev.Data)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "model":
			if !model.Exists() {
				model = value
			}
		case "usage":
			usage = value
		case "choices":
			choices = value
		case "error":
			errField = value
		}
		return true
	})
	// As the SDKs read it: an `error` that is null or false is no error.
	if string(ev.Name) == "error" || errField.Exists() && errField.Type != gjson.Null && errField.Type != gjson.False {
		return s.appendScrubbed(dst, ev), true
	}
	if choices.IsArray() {
		d := gjson.GetMany(choices.Raw, "0.delta.content", "0.delta.tool_calls.0.function.arguments", "0.delta.reasoning_content")
		s.OutputChars += rawTextLen(d[0]) + rawTextLen(d[1])
		s.ThinkingChars += rawTextLen(d[2])
	}
	if usage.IsObject() {
		s.Usage = append(s.Usage[:0], usage.Raw...)
		if s.dropUsageChunk && choices.IsArray() && !choices.Get("0").Exists() {
			return dst, false // the usage-only chunk the gateway asked for itself
		}
	}
	if model.Type == gjson.String && model.Index > 0 {
		at := ev.dataAt + model.Index
		dst = append(dst, ev.Raw[:at]...)
		dst = append(dst, s.modelLiteral...)
		return append(dst, ev.Raw[at+len(model.Raw):]...), true
	}
	return append(dst, ev.Raw...), true
}

func (s *EventStream) appendScrubbed(dst []byte, ev Event) []byte {
	// Scrub before splicing: the service id may contain the upstream name ("acme/gpt-4o"
	// for "gpt-4o") and must not be rewritten a second time. Scrub never modifies its input.
	scrubbed := parseEvent(s.scrub.Scrub(ev.Raw))
	if path := s.modelPathFor(scrubbed); path != "" {
		if start, end, ok := ValueSpan(scrubbed.Data, path); ok {
			dst = append(dst, scrubbed.Raw[:scrubbed.dataAt+start]...)
			dst = append(dst, s.modelLiteral...)
			return append(dst, scrubbed.Raw[scrubbed.dataAt+end:]...)
		}
	}
	return append(dst, scrubbed.Raw...)
}

// observe records usage, text counts and sequence numbers of a Responses or Family B
// event, and returns the path of the model in its data ("" for none). Chat chunks are
// read by appendChatChunk.
func (s *EventStream) observe(ev Event) string {
	switch s.kind {
	case KindResponses:
		f := gjson.GetMany(view(ev.Data), "type", "sequence_number", "delta")
		if f[1].Type == gjson.Number {
			s.LastSequence = f[1].Int()
		}
		switch t := f[0].Str; t {
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
			s.OutputChars += rawTextLen(f[2])
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			s.ThinkingChars += rawTextLen(f[2])
		case "response.completed", "response.failed", "response.incomplete":
			s.Terminal = true
		}
		path := s.modelPathFor(ev)
		if path != "" {
			if u := getView(ev.Data, "response.usage"); u.IsObject() {
				s.Usage = append(s.Usage[:0], u.Raw...)
			}
		}
		return path
	case KindMessages:
		switch string(ev.Name) {
		case "message_start":
			if u := getView(ev.Data, "message.usage"); u.IsObject() {
				s.StartUsage = append(s.StartUsage[:0], u.Raw...)
			}
			return "message.model"
		case "content_block_delta":
			d := gjson.GetMany(view(ev.Data), "delta.text", "delta.partial_json", "delta.thinking")
			s.OutputChars += rawTextLen(d[0]) + rawTextLen(d[1])
			s.ThinkingChars += rawTextLen(d[2])
		case "message_delta":
			if u := getView(ev.Data, "usage"); u.IsObject() {
				s.Usage = append(s.Usage[:0], u.Raw...)
			}
		case "message_stop":
			s.Terminal = true
		}
	}
	return ""
}

// rawTextLen is the length of a JSON string value without its quotes: close enough to
// its character count for an estimate, and free of the copy unescaping would make.
func rawTextLen(r gjson.Result) int64 {
	if r.Type != gjson.String || len(r.Raw) < 2 {
		return 0
	}
	return int64(len(r.Raw) - 2)
}

// modelPathFor is where an event of the stream's shape carries the model, if it does.
func (s *EventStream) modelPathFor(ev Event) string {
	switch s.kind {
	case KindChat:
		return "model"
	case KindResponses:
		// Only lifecycle events (response.created, response.completed, …) carry the
		// response object; item and delta events have more dots in their names.
		name := ev.Name
		if name == nil {
			name = []byte(gjson.GetBytes(ev.Data, "type").Str)
		}
		if bytes.HasPrefix(name, []byte("response.")) && bytes.Count(name, []byte(".")) == 1 {
			return "response.model"
		}
	case KindMessages:
		if string(ev.Name) == "message_start" {
			return "message.model"
		}
	}
	return ""
}
