package protocols

import (
	"net/http"

	"github.com/tidwall/sjson"
)

// Helpers the tests of this directory use; the gateway itself never needs them.

// SetString returns a copy of body with the string value at path set to value. Only that
// value's bytes change; the copy is sized once. A path that is absent is added by sjson.
func SetString(body []byte, path, value string) []byte {
	start, end, ok := ValueSpan(body, path)
	if !ok {
		out, err := sjson.SetBytes(body, path, value)
		if err != nil {
			return body
		}
		return out
	}
	out := make([]byte, 0, len(body)-(end-start)+len(value)+2)
	out = append(out, body[:start]...)
	out = AppendJSONString(out, value)
	return append(out, body[end:]...)
}

// PrepareRequestBody is ParsedRequest.Upstream for a body not parsed yet, joined into
// one slice.
func PrepareRequestBody(op Operation, body []byte, upstreamModel string) (out []byte, injectedUsage bool) {
	p, err := ParseRequest(op.Family, body)
	if err != nil {
		return body, false
	}
	up, injected := p.Upstream(op, upstreamModel, 0)
	return up.Bytes(), injected
}

// RequestModel checks that body is one JSON object with a non-empty string `model` and
// returns that model. It does not decode the rest of the body.
func RequestModel(family Family, body []byte) (string, *APIError) {
	p, err := ParseRequest(family, body)
	if err != nil {
		return "", err
	}
	return p.Model(family)
}

// Validate runs the family-specific checks for op on a body that RequestModel accepted.
func Validate(op Operation, body []byte, h http.Header) *APIError {
	p, err := ParseRequest(op.Family, body)
	if err != nil {
		return err
	}
	return p.Validate(op, h)
}

// ValueSpan locates the raw JSON value at path: body[start:end] is the value's bytes
// (quotes included for a string). ok is false when the path is absent.
func ValueSpan(body []byte, path string) (start, end int, ok bool) {
	r := getView(body, path)
	if !r.Exists() || r.Index <= 0 {
		return 0, 0, false
	}
	return r.Index, r.Index + len(r.Raw), true
}

// Buffered is how many bytes of an event not complete yet are held.
func (s *EventStream) Buffered() int { return len(s.buf) - s.off }

// Routed reports whether the operation carries a model in its body and goes to a candidate.
func (o Operation) Routed() bool {
	switch o.Kind {
	case KindChat, KindResponses, KindResponsesInputTokens, KindResponsesCompact,
		KindMessages, KindMessagesCountTokens:
		return true
	}
	return false
}

// shapeEvent reads one data event as the stream's shape does, without the stream's
// cutting and checks around it.
func shapeEvent(s *EventStream, ev Event) eventView { return s.stream.event(&s.Obs, ev) }
