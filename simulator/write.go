package simulator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"
)

// field is one key of an obj.
type field struct {
	k string
	v any
}

// obj is a JSON object that keeps its keys in the written order, so replies read like the
// real APIs' (type and id first).
type obj []field

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.k)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// list is a JSON array.
type list = []any

// mustJSON encodes a reply built by this package. The only raw JSON in replies is copied from
// a request body that passed json.Valid, so an error here is a programming error.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("simulator: encoding a reply: " + err.Error())
	}
	return b
}

// echo returns the request's JSON at path as raw JSON, or def when it is absent or null.
func (c *call) echo(path string, def any) any {
	res := gjson.GetBytes(c.body, path)
	if !res.Exists() || res.Type == gjson.Null {
		return def
	}
	return json.RawMessage(res.Raw)
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// writeJSON sends a 200 JSON reply; with the cut behaviour it sends half and aborts.
func (c *call) writeJSON(v any) {
	b := mustJSON(v)
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	c.w.WriteHeader(http.StatusOK)
	if c.beh.cut {
		_, _ = c.w.Write(b[:len(b)/2])
		_ = http.NewResponseController(c.w).Flush()
		panic(http.ErrAbortHandler)
	}
	_, _ = c.w.Write(b)
}

// apiError is an error reply; it is rendered in the envelope of the call's family.
type apiError struct {
	status  int
	message string
	code    string // OpenAI error.code; "" is null
	param   string // OpenAI error.param; "" is null
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (c *call) writeError(e apiError) {
	if c.beh.accountHeaders {
		e.message += " (" + c.whoAmI() + ")"
	}
	if c.fam == familyBedrock {
		c.writeBedrockError(e)
		return
	}
	var body obj
	if c.fam == familyAnthropic {
		body = obj{
			{"type", "error"},
			{"error", obj{{"type", anthropicErrorType(e.status)}, {"message", e.message}}},
			{"request_id", c.reqID},
		}
	} else {
		body = obj{{"error", obj{
			{"message", e.message},
			{"type", openAIErrorType(e.status)},
			{"param", nullable(e.param)},
			{"code", nullable(e.code)},
		}}}
	}
	b := mustJSON(body)
	c.w.Header().Set("Content-Type", "application/json")
	c.w.WriteHeader(e.status)
	_, _ = c.w.Write(b)
}

func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func anthropicErrorType(status int) string {
	switch status {
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 409:
		return "conflict_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// event is one SSE frame; an empty name writes a data-only frame.
type event struct {
	name string
	data []byte
	// final marks the event that carries the answer's final usage (see usage-delay).
	final bool
}

// appendFrame appends ev as an SSE frame, ended by a blank line unless unterminated.
func appendFrame(b []byte, ev event, unterminated bool) []byte {
	if ev.name != "" {
		b = append(b, "event: "...)
		b = append(b, ev.name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, ev.data...)
	b = append(b, '\n')
	if !unterminated {
		b = append(b, '\n')
	}
	return b
}

// keepAlive is the comment frame the comments behaviour sends.
const keepAlive = ": keep-alive\n\n"

// padded returns a JSON object event's data with a padding field that makes it longer
// than HugeEventSize; other data is returned as is.
func padded(data []byte) []byte {
	if len(data) < 2 || data[0] != '{' {
		return data
	}
	out := make([]byte, 0, len(data)+HugeEventSize+32)
	out = append(out, `{"x_padding":"`...)
	out = append(out, bytes.Repeat([]byte{'a'}, HugeEventSize)...)
	out = append(out, '"')
	if data[1] != '}' {
		out = append(out, ',')
	}
	return append(out, data[1:]...)
}

// writeStream sends events as an SSE stream, flushing each one, and applies the stream
// behaviours (slow first event, drip, stall, cut, comments, oversized and malformed events,
// framing, usage delay). It
// returns early when the client goes away.
func (c *call) writeStream(events []event) {
	if c.fam == familyBedrock {
		c.writeEventStream(events)
		return
	}
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if c.beh.hugeFirstEvent && len(events) > 0 {
		events[0].data = padded(events[0].data)
	}
	if c.beh.hugeEvent && len(events) > 1 {
		events[1].data = padded(events[1].data)
	}
	if c.beh.malformedEvent && len(events) > 1 {
		events = slices.Insert(events, 1, c.malformedEvent(events[1].name))
	}
	if c.beh.tailAtOnce {
		c.writeTailAtOnce(events)
		return
	}
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	ctx := c.r.Context()
	if c.beh.comments {
		for range 2 {
			if _, err := c.w.Write([]byte(keepAlive)); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}
	if c.beh.slowFirstEvent > 0 {
		_ = rc.Flush() // the status and headers (and comments) go now; the events wait
		if !sleep(ctx, c.beh.slowFirstEvent) {
			return
		}
	}
	var buf []byte
	for i, ev := range events {
		if !c.pace(ctx, i, ev) {
			return
		}
		buf = appendFrame(buf[:0], ev, c.beh.noTerminator && i == len(events)-1)
		if _, err := c.w.Write(buf); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// writeTailAtOnce sends the stream with its length declared: the first event (after the
// comments, if any) in one flushed write, then every other event in a single write.
func (c *call) writeTailAtOnce(events []event) {
	var head, tail []byte
	if c.beh.comments {
		head = append(head, keepAlive+keepAlive...)
	}
	for i, ev := range events {
		last := c.beh.noTerminator && i == len(events)-1
		if i == 0 {
			head = appendFrame(head, ev, last)
		} else {
			tail = appendFrame(tail, ev, last)
		}
	}
	c.w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(tail)))
	c.w.WriteHeader(http.StatusOK)
	if c.beh.slowFirstEvent > 0 {
		_ = http.NewResponseController(c.w).Flush()
		if !sleep(c.r.Context(), c.beh.slowFirstEvent) {
			return
		}
	}
	if _, err := c.w.Write(head); err != nil {
		return
	}
	_ = http.NewResponseController(c.w).Flush()
	if len(tail) > 0 {
		_, _ = c.w.Write(tail)
	}
}

// writeInbandError answers a stream request with 200 and a native error as the only event.
func (c *call) writeInbandError(ep endpoint) {
	msg := "The server had an error while processing your request (simulated, model " + c.model + ")."
	var ev event
	switch ep {
	case epMessages:
		ev = event{name: "error", data: mustJSON(obj{
			{"type", "error"},
			{"error", obj{{"type", "overloaded_error"}, {"message", "Overloaded (simulated)"}}},
		})}
	case epResponses:
		ev = event{name: "error", data: mustJSON(obj{
			{"type", "error"}, {"code", "server_error"}, {"message", msg}, {"param", nil}, {"sequence_number", 0},
		})}
	default:
		ev = event{data: mustJSON(obj{{"error", obj{
			{"message", msg}, {"type", "server_error"}, {"param", nil}, {"code", nil},
		}}})}
	}
	c.writeStream([]event{ev})
}

// pieces splits s into chunks of about size bytes (at least one chunk), for streamed deltas.
func pieces(s string, size int) []string {
	if len(s) <= size {
		return []string{s}
	}
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// words splits text into deltas of n words each; every delta keeps its leading space.
func words(s string, n int) []string {
	var out []string
	start, seen := 0, 0
	for i := 1; i < len(s); i++ {
		if s[i] == ' ' {
			if seen++; seen == n {
				out = append(out, s[start:i])
				start, seen = i, 0
			}
		}
	}
	return append(out, s[start:])
}

// pace holds event i of a stream back as the stream behaviours ask (stall, cut, drip,
// usage delay); false: the client left, or the stream is to say nothing more.
func (c *call) pace(ctx context.Context, i int, ev event) bool {
	if i > 0 {
		switch {
		case c.beh.stall:
			<-ctx.Done()
			return false
		case c.beh.cut && i == 3:
			panic(http.ErrAbortHandler)
		}
		if !sleep(ctx, c.beh.drip) {
			return false
		}
	}
	return !ev.final || sleep(ctx, c.beh.usageDelay)
}
