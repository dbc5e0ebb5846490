package simulator

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
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
}

// writeStream sends events as an SSE stream, flushing each one, and applies the drip, stall
// and cut behaviours. It returns early when the client goes away.
func (c *call) writeStream(events []event) {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	ctx := c.r.Context()
	var buf bytes.Buffer
	for i, ev := range events {
		if i > 0 {
			switch {
			case c.beh.stall:
				<-ctx.Done()
				return
			case c.beh.cut && i == 3:
				panic(http.ErrAbortHandler)
			}
			if !sleep(ctx, c.beh.drip) {
				return
			}
		}
		buf.Reset()
		if ev.name != "" {
			buf.WriteString("event: ")
			buf.WriteString(ev.name)
			buf.WriteByte('\n')
		}
		buf.WriteString("data: ")
		buf.Write(ev.data)
		buf.WriteString("\n\n")
		if _, err := c.w.Write(buf.Bytes()); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// writeInbandError answers a stream request with 200 and a native error as the only event.
func (c *call) writeInbandError(ep endpoint) {
	msg := "The server had an error while processing your request (simulated, model " + c.model + ")."
	var ev event
	switch ep {
	case epMessages:
		ev = event{"error", mustJSON(obj{
			{"type", "error"},
			{"error", obj{{"type", "overloaded_error"}, {"message", "Overloaded (simulated)"}}},
		})}
	case epResponses:
		ev = event{"error", mustJSON(obj{
			{"type", "error"}, {"code", "server_error"}, {"message", msg}, {"param", nil}, {"sequence_number", 0},
		})}
	default:
		ev = event{"", mustJSON(obj{{"error", obj{
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
