package protocols

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// responses is the Responses shape (Family A, POST /v1/responses, and its stateless
// sub-operations input_tokens and compact).
//
//   - JSON answer: `model` and `usage` at the top level (input_tokens carries neither).
//   - Stream: named events with a `sequence_number`; lifecycle events (response.created,
//     response.completed, …) carry the whole response object, model and usage inside it;
//     the stream ends with response.completed, response.failed or response.incomplete.
//   - Usage: input_tokens (cached_tokens inside it), output_tokens (reasoning_tokens
//     inside it).
//   - In-band error: an `error` or `response.failed` event.
type responses struct{}

func (responses) Answer(kind Kind, body []byte) (gjson.Result, Observation) {
	if kind == KindResponsesInputTokens {
		return gjson.Result{}, Observation{Complete: true} // a token count: no model, nothing to bill
	}
	model, obs := answerFamilyA(body, responsesUsage)
	obs.FinishReason = responsesFinish(gjson.GetManyBytes(body, "incomplete_details.reason", "status"))
	return model, obs
}

// responsesFinish is why a response ended: its incomplete reason (max_output_tokens,
// content_filter), else its status.
func responsesFinish(f []gjson.Result) string {
	if f[0].Str != "" {
		return f[0].Str
	}
	return f[1].Str
}

// responsesUsage names the counts of a Responses usage object.
var responsesUsage = familyAUsage{"input_tokens", "input_tokens_details.cached_tokens",
	"input_tokens_details.cache_write_tokens", "output_tokens", "output_tokens_details.reasoning_tokens"}

// event reads every event's type, sequence_number and delta with the member walker in
// one pass over its top level; only lifecycle events, a few a stream, go on to gjson for
// the model and usage inside the response object they carry.
func (r responses) event(s *EventStream, ev Event) eventView {
	top := readResponsesEvent(ev.Data)
	typ := top.typ
	if responsesIsError(ev.Name, typ) {
		// A failed response still reports what it used, and that count is its last.
		if u := getView(ev.Data, "response.usage"); u.IsObject() {
			s.Obs.setFamilyAUsage(u, responsesUsage)
			s.Obs.UsageFinal = true
		}
		return eventView{isError: true}
	}
	if seq, ok := sequenceNumber(top.seq); ok {
		s.LastSequence = seq
	}
	terminal := false
	switch typ {
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		s.Obs.OutputChars += stringLen(top.delta)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		s.Obs.ThinkingChars += stringLen(top.delta)
	case "response.completed", "response.failed", "response.incomplete":
		s.Obs.Complete, terminal = true, true
		s.Obs.FinishReason = strings.Clone(responsesFinish(gjson.GetMany(view(ev.Data), "response.incomplete_details.reason", "response.status")))
	}
	if !responsesLifecycle(ev.Name, typ) {
		return eventView{}
	}
	// Only the terminal lifecycle events carry the final usage; earlier ones, when they
	// carry any, count so far.
	if u := getView(ev.Data, "response.usage"); u.IsObject() {
		s.Obs.setFamilyAUsage(u, responsesUsage)
		s.Obs.UsageFinal = terminal
	}
	return eventView{model: getView(ev.Data, "response.model")}
}

// responsesTop is the top-level members of a Responses event the shape reads, as written:
// the first of each, as gjson finds them; nil when absent. typ is the type's text.
type responsesTop struct {
	typ        string
	seq, delta []byte
}

// readResponsesEvent walks a Responses event's top level once. The walk ends as soon as
// nothing more it could find is needed: a delta only counts in the delta events.
func readResponsesEvent(data []byte) (t responsesTop) {
	w, ok := walkObject(data)
	if !ok {
		return t
	}
	typeSeen, needDelta := false, true
	for {
		key, start, end, ok := w.next()
		if !ok {
			return t
		}
		switch keyText(key) {
		case "type":
			if !typeSeen {
				typeSeen, t.typ = true, stringText(data[start:end])
				needDelta = strings.HasSuffix(t.typ, ".delta")
			}
		case "sequence_number":
			if t.seq == nil {
				t.seq = data[start:end]
			}
		case "delta":
			if t.delta == nil {
				t.delta = data[start:end]
			}
		}
		if typeSeen && t.seq != nil && (t.delta != nil || !needDelta) {
			return t
		}
	}
}

// sequenceNumber reads a sequence_number as gjson reads a number's Int; ok is false for
// any other value. A plain integer of up to 15 digits, every one in practice, is exact
// in a float64 and read directly.
func sequenceNumber(v []byte) (n int64, ok bool) {
	if len(v) == 0 || len(v) > 15 {
		return gjsonNumber(v)
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return gjsonNumber(v)
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func gjsonNumber(v []byte) (int64, bool) {
	r := gjson.Parse(view(v))
	return r.Int(), r.Type == gjson.Number
}

// responsesIsError: the event's name says, or its type when it has no name.
func responsesIsError(name []byte, typ string) bool {
	t := string(name)
	if t == "" {
		t = typ
	}
	return t == "error" || t == "response.failed"
}

// responsesLifecycle: only lifecycle events (response.created, response.completed, …)
// carry the response object; item and delta events have more dots in their names. The
// event's name says, or its type when it has none.
func responsesLifecycle(name []byte, typ string) bool {
	t := typ
	if name != nil {
		t = string(name)
	}
	rest, ok := strings.CutPrefix(t, "response.")
	return ok && strings.IndexByte(rest, '.') < 0
}

func (responses) IsError(ev Event) bool {
	return responsesIsError(ev.Name, readResponsesEvent(ev.Data).typ)
}

func (responses) eventModelPath(ev Event) string {
	if responsesLifecycle(ev.Name, readResponsesEvent(ev.Data).typ) {
		return "response.model"
	}
	return ""
}

// ErrorEvent is an `error` event numbered after the last event the client saw.
func (responses) ErrorEvent(e *APIError, nextSequence int64) []byte {
	ev, _ := json.Marshal(struct {
		Type     string  `json:"type"`
		Code     string  `json:"code"`
		Message  string  `json:"message"`
		Param    *string `json:"param"`
		Sequence int64   `json:"sequence_number"`
	}{"error", e.nativeType(), e.Message, nil, nextSequence})
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", ev)
}

// Validate: `stream` a boolean; no `background`, `previous_response_id` or
// `conversation`, which need server-side state the gateway does not keep;
// `max_output_tokens` a positive integer when set.
func (responses) Validate(p *ParsedRequest, op Operation, _ http.Header) *APIError {
	if e := optionalBool(FamilyA, p.get(fieldStream), "stream"); e != nil {
		return e
	}
	if op.Kind == KindResponses && p.get(fieldBackground).Type == gjson.True {
		return InvalidParam(FamilyA, "background", "'background' responses are not supported: this gateway keeps no server-side response state; send the request without 'background'")
	}
	if present(p.get(fieldPreviousResponseID)) {
		return InvalidParam(FamilyA, "previous_response_id", "'previous_response_id' is not supported: this gateway keeps no server-side response state; send the full conversation in 'input' instead")
	}
	if present(p.get(fieldConversation)) {
		return InvalidParam(FamilyA, "conversation", "'conversation' is not supported: this gateway keeps no server-side conversation state; send the full conversation in 'input' instead")
	}
	return checkOutputCaps(responses{}.outputCaps(p, op.Kind))
}

// requestBody is the client's body as sent.
func (responses) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	return p.Body, p.get(fieldModel), false
}

// outputCaps: max_output_tokens, for responses and compaction (input_tokens generates nothing).
func (responses) outputCaps(p *ParsedRequest, kind Kind) []capField {
	if kind == KindResponsesInputTokens {
		return nil
	}
	return []capField{{"max_output_tokens", p.get(fieldMaxOutputTokens)}}
}
