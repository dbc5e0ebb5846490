package protocols

import (
	"io"
	"net/http"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// view reads body as a string without copying it. The gateway never modifies a request
// body after reading it, so results that point into it stay valid.
func view(body []byte) string { return unsafe.String(unsafe.SliceData(body), len(body)) }

// getView is gjson.GetBytes without its defensive copy of the value found: looking up
// `messages` in a 1 MB body must not copy the messages.
func getView(body []byte, path string) gjson.Result { return gjson.Get(view(body), path) }

// ParsedRequest is a request body whose top-level fields were located in one pass. The
// checks and the rewrite then read them without scanning the body again.
type ParsedRequest struct {
	Body []byte
	// Model is the raw `model` field; its Index locates it in Body.
	model, messages, stream, streamOptions, maxTokens, thinking gjson.Result
	background, previousResponseID, conversation                gjson.Result
	promptCacheKey                                              gjson.Result
}

// ParseRequest checks that body is one JSON object and locates the fields the gateway
// reads. It does not decode anything else.
func ParseRequest(family Family, body []byte) (*ParsedRequest, *APIError) {
	if !isJSONObject(body) {
		return nil, InvalidParam(family, "", "the request body must be a JSON object")
	}
	p := &ParsedRequest{Body: body}
	models := 0
	gjson.Parse(view(body)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "model":
			// Counted on the unescaped key, so "mod\u0065l" is a second model too.
			models++
			p.model = value
		case "messages":
			p.messages = value
		case "stream":
			p.stream = value
		case "stream_options":
			p.streamOptions = value
		case "max_tokens":
			p.maxTokens = value
		case "thinking":
			p.thinking = value
		case "background":
			p.background = value
		case "previous_response_id":
			p.previousResponseID = value
		case "conversation":
			p.conversation = value
		case "prompt_cache_key":
			p.promptCacheKey = value
		}
		return true
	})
	if models > 1 {
		// JSON parsers disagree on which duplicate wins; the gateway must not check one
		// model while the upstream runs another.
		return nil, InvalidParam(family, "model", "'model' appears more than once in the request body")
	}
	return p, nil
}

// Model returns the requested service model, or the 400 for a missing or malformed one.
func (p *ParsedRequest) Model(family Family) (string, *APIError) {
	switch m := p.model; {
	case !m.Exists():
		return "", InvalidParam(family, "model", "missing required field 'model'; see GET /v1/models for the models you can call")
	case m.Type != gjson.String || m.Str == "":
		return "", InvalidParam(family, "model", "'model' must be a non-empty string naming a model from GET /v1/models")
	default:
		// Str may point into the body; the id outlives the request in logs and metering.
		return string([]byte(m.Str)), nil
	}
}

// conversationHeaders carry a conversation id in what coding agents send: Claude Code's
// session header and Codex's session header (Codex also puts it in prompt_cache_key).
var conversationHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id"}

// ConversationID returns the id of the conversation a request belongs to, or "" when it
// carries none. extraHeader, when set, is checked first: an operator's own header.
func (p *ParsedRequest) ConversationID(h http.Header, extraHeader string) string {
	if extraHeader != "" {
		if v := h.Get(extraHeader); v != "" {
			return v
		}
	}
	for _, name := range conversationHeaders {
		if v := h.Get(name); v != "" {
			return v
		}
	}
	if p.promptCacheKey.Type == gjson.String && p.promptCacheKey.Str != "" {
		return "pck:" + p.promptCacheKey.Str
	}
	return ""
}

// Streamed reports whether the client asked for a stream.
func (p *ParsedRequest) Streamed() bool { return p.stream.Type == gjson.True }

// UpstreamBody is a request body with one value replaced, kept as three slices of which
// only the middle one is new, so that a large body is never copied to change its model.
type UpstreamBody struct {
	head, value, tail []byte
}

// Len is the body's length in bytes.
func (b UpstreamBody) Len() int { return len(b.head) + len(b.value) + len(b.tail) }

// Reader reads the body from its start; each attempt on a candidate takes a new one.
func (b UpstreamBody) Reader() io.Reader {
	return &partsReader{parts: [3][]byte{b.head, b.value, b.tail}}
}

// Bytes joins the body into one slice (for tests and small bodies).
func (b UpstreamBody) Bytes() []byte {
	out := make([]byte, 0, b.Len())
	return append(append(append(out, b.head...), b.value...), b.tail...)
}

type partsReader struct {
	parts [3][]byte
	i     int
}

func (r *partsReader) Read(p []byte) (int, error) {
	n := 0
	for r.i < len(r.parts) && n < len(p) {
		c := copy(p[n:], r.parts[r.i])
		r.parts[r.i] = r.parts[r.i][c:]
		n += c
		if len(r.parts[r.i]) == 0 {
			r.i++
		}
	}
	if n == 0 && r.i >= len(r.parts) {
		return 0, io.EOF
	}
	return n, nil
}

// WriteTo lets io.Copy hand the parts to the writer directly.
func (r *partsReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; r.i < len(r.parts); r.i++ {
		n, err := w.Write(r.parts[r.i])
		total += int64(n)
		if err != nil {
			r.parts[r.i] = r.parts[r.i][n:]
			return total, err
		}
	}
	return total, nil
}

// Upstream prepares the body an upstream receives: the client's bytes with only `model`
// set to the upstream name. For a streamed chat completion that did not ask for usage, it
// also asks for usage (metering needs it) and reports injectedUsage so that the
// usage-only chunk can be removed before the client sees it; that rare case costs one copy.
func (p *ParsedRequest) Upstream(op Operation, upstreamModel string) (body UpstreamBody, injectedUsage bool) {
	src := p.Body
	model := p.model
	if op.Kind == KindChat && p.Streamed() && p.streamOptions.Get("include_usage").Type != gjson.True {
		if withUsage, err := sjson.SetBytes(src, "stream_options.include_usage", true); err == nil {
			src, injectedUsage = withUsage, true
			model = getView(src, "model")
		}
	}
	value := AppendJSONString(nil, upstreamModel)
	if !model.Exists() || model.Index <= 0 {
		// Not reachable for a body that passed ParseRequest; kept so the body stays whole.
		out, err := sjson.SetBytes(src, "model", upstreamModel)
		if err != nil {
			return UpstreamBody{head: src}, injectedUsage
		}
		return UpstreamBody{head: out}, injectedUsage
	}
	return UpstreamBody{head: src[:model.Index], value: value, tail: src[model.Index+len(model.Raw):]}, injectedUsage
}
