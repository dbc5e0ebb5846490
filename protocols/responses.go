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
type responses struct {
	kind Kind // KindResponses, or one of its sub-operations
}

func (r responses) Answer(body []byte) (gjson.Result, Observation) {
	if r.kind == KindResponsesInputTokens {
		return gjson.Result{}, Observation{Complete: true} // a token count: no model, nothing to bill
	}
	model, obs := answerFamilyA(body, responsesUsage)
	if output, ok := member(body, "output"); ok {
		obs.Usage.ToolUses = countResponsesToolCalls(output)
	}
	return model, obs
}

// FinishReason is why a response ended: its incomplete reason (max_output_tokens,
// content_filter), else its status.
func (responses) FinishReason(body []byte) string {
	f := gjson.GetManyBytes(body, "incomplete_details.reason", "status")
	return responsesFinishText(f[0].Str, f[1].Str)
}

func responsesFinishText(reason, status string) string {
	if reason != "" {
		return reason
	}
	return status
}

// responsesUsage names the counts of a Responses usage object.
var responsesUsage = familyAUsage{"input_tokens", "input_tokens_details.cached_tokens",
	"input_tokens_details.cache_write_tokens", "output_tokens", "output_tokens_details.reasoning_tokens"}

// responsesStream is what a Responses stream remembers: the number of its last event,
// which an error event the gateway ends it with must follow.
type responsesStream struct {
	sequence int64 // the highest sequence_number seen, -1 before any
}

func (responses) newStream(bool) *EventStream {
	return streamWith(responsesStream{sequence: -1})
}

func (r *responsesStream) lastSequence() int64 { return r.sequence }

// event reads every event's type, sequence_number and delta with the member walker in
// one pass over its top level; lifecycle events, and errors, then walk the response
// object they carry once for its model, usage and status.
func (r *responsesStream) event(obs *Observation, ev Event) eventView {
	top := readResponsesEvent(ev.Data)
	typ := top.typ
	if responsesIsError(ev.Name, typ) {
		// A failed response still reports what it used, and that count is its last.
		resp := readResponseObject(ev.Data)
		if u := resp.usageResult(); u.IsObject() {
			obs.setFamilyAUsage(u, responsesUsage)
			obs.UsageFinal = true
		}
		obs.takeToolCalls(resp.output)
		return eventView{isError: true}
	}
	if seq, ok := sequenceNumber(top.seq); ok {
		r.sequence = seq
	}
	terminal, read := false, false
	var resp responseFields
	switch typ {
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		obs.OutputChars += stringLen(top.delta)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		obs.ThinkingChars += stringLen(top.delta)
	case "response.output_item.done":
		// A server tool's call counts as its item ends: a stream cut before its terminal
		// event still bills the calls it carried.
		if item, ok := member(ev.Data, "item"); ok {
			if typ, ok := member(item, "type"); ok {
				if t, ok := responsesToolCall(stringText(typ)); ok {
					obs.Usage.ToolUses.add(t, 1)
				}
			}
		}
	case "response.completed", "response.failed", "response.incomplete":
		obs.Complete, terminal = true, true
		resp, read = readResponseObject(ev.Data), true
		obs.FinishReason = strings.Clone(responsesFinishText(stringText(resp.reason), stringText(resp.status)))
	}
	if !responsesLifecycle(ev.Name, typ) {
		return eventView{}
	}
	if !read {
		resp = readResponseObject(ev.Data)
	}
	// Only the terminal lifecycle events carry the final usage; earlier ones, when they
	// carry any, count so far.
	if u := resp.usageResult(); u.IsObject() {
		obs.setFamilyAUsage(u, responsesUsage)
		obs.UsageFinal = terminal
	}
	if terminal {
		obs.takeToolCalls(resp.output)
	}
	return eventView{model: resp.modelResult()}
}

// responseFields is what the shape reads of the response object a lifecycle event
// carries, as written: each the value gjson's "response.model" (and so on) finds, the
// first that any top-level `response` object holds, in order; nil when none does.
type responseFields struct {
	usage, model, status, reason, output []byte
	modelAt                              int // where model starts in the event's data
}

// readResponseObject walks the top level of a lifecycle event and each `response` object
// in it once, however long the instructions or output it echoes.
func readResponseObject(data []byte) (f responseFields) {
	w, ok := walkObject(data)
	if !ok {
		return f
	}
	for {
		key, start, ok := w.nextKey()
		if !ok {
			return f
		}
		var end int
		if keyText(key) == "response" && start < len(data) && data[start] == '{' {
			end = f.read(data, start)
		} else {
			end = skipJSONValue(data, start)
		}
		if end < 0 {
			return f
		}
		w.resume(end)
	}
}

// read takes the members of the response object at b[start] that no earlier one
// supplied, and returns where it ends (-1 when it is broken).
func (f *responseFields) read(b []byte, start int) int {
	w := memberWalk{b: b, i: start + 1}
	for {
		key, s, e, ok := w.next()
		if !ok {
			return w.objectEnd()
		}
		switch keyText(key) {
		case "usage":
			if f.usage == nil {
				f.usage = b[s:e]
			}
		case "model":
			if f.model == nil {
				f.model, f.modelAt = b[s:e], s
			}
		case "status":
			if f.status == nil {
				f.status = b[s:e]
			}
		case "output":
			if f.output == nil {
				f.output = b[s:e]
			}
		case "incomplete_details":
			if f.reason == nil {
				f.reason, _ = member(b[s:e], "reason") // nil unless an object with a reason
			}
		}
	}
}

// usageResult is the usage object as setFamilyAUsage reads it; not an object otherwise.
func (f responseFields) usageResult() gjson.Result {
	if len(f.usage) == 0 || f.usage[0] != '{' {
		return gjson.Result{}
	}
	return gjson.Result{Type: gjson.JSON, Raw: view(f.usage)}
}

// modelResult is the model value, of whatever type, as the splice takes it: gjson's Raw
// and Index for it.
func (f responseFields) modelResult() gjson.Result {
	if len(f.model) == 0 {
		return gjson.Result{}
	}
	r := gjson.Result{Raw: view(f.model), Index: f.modelAt}
	switch f.model[0] {
	case '"':
		r.Type = gjson.String
	case '{', '[':
		r.Type = gjson.JSON
	case 't':
		r.Type = gjson.True
	case 'f':
		r.Type = gjson.False
	case 'n':
		r.Type = gjson.Null
	default:
		r.Type = gjson.Number
	}
	return r
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
func (r responses) Validate(p *ParsedRequest, _ http.Header) *APIError {
	if e := optionalBool(FamilyA, p.get(fieldStream), "stream"); e != nil {
		return e
	}
	if r.kind == KindResponses && p.get(fieldBackground).Type == gjson.True {
		return InvalidParam(FamilyA, "background", "'background' responses are not supported: this gateway keeps no server-side response state; send the request without 'background'")
	}
	if present(p.get(fieldPreviousResponseID)) {
		return InvalidParam(FamilyA, "previous_response_id", "'previous_response_id' is not supported: this gateway keeps no server-side response state; send the full conversation in 'input' instead")
	}
	if present(p.get(fieldConversation)) {
		return InvalidParam(FamilyA, "conversation", "'conversation' is not supported: this gateway keeps no server-side conversation state; send the full conversation in 'input' instead")
	}
	if _, e := p.serverTools(r.kind, 0); e != nil {
		return e // max_tool_calls, which admission reserves by
	}
	return checkOutputCaps(r.outputCaps(p))
}

// requestBody is the client's body as sent.
func (responses) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	return p.Body, p.get(fieldModel), false
}

// outputCaps: max_output_tokens, for responses and compaction (input_tokens generates nothing).
func (r responses) outputCaps(p *ParsedRequest) []capField {
	if r.kind == KindResponsesInputTokens {
		return nil
	}
	return []capField{{"max_output_tokens", p.get(fieldMaxOutputTokens)}}
}

// takeToolCalls counts the server tool calls of a terminal event's whole output: of them
// and the items seen end, the larger count of each tool stands (an item's done event
// may have been missed, and the output repeats the items that were seen).
func (o *Observation) takeToolCalls(output []byte) {
	if output == nil {
		return
	}
	all := countResponsesToolCalls(output)
	for t := range all {
		o.Usage.ToolUses[t] = max(o.Usage.ToolUses[t], all[t])
	}
}
