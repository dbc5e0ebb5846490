package protocols

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// messages is the Messages shape (Family B, POST /v1/messages and count_tokens).
//
//   - JSON answer: `model` and `usage` at the top level; thinking text in content blocks
//     of type "thinking" (count_tokens answers carry neither model nor billable usage).
//   - Stream: named events; message_start carries the message (model, and usage with
//     the input and cache counts), content_block_delta the text, thinking and tool
//     arguments, message_delta the final usage (output, and it may repeat the input
//     counts), message_stop ends it.
//   - Usage: input_tokens, with cache reads and writes counted beside it, not inside;
//     output_tokens with thinking inside, split out only in output_tokens_details.
//   - In-band error: an `error` event.
type messages struct {
	kind Kind // KindMessages or KindMessagesCountTokens
}

// minThinkingBudget is the smallest extended-thinking budget Family B accepts.
const minThinkingBudget = 1024

func (m messages) Answer(body []byte) (gjson.Result, Observation) {
	if m.kind == KindMessagesCountTokens {
		return gjson.Result{}, Observation{Complete: true} // a token count: no model, nothing to bill
	}
	obs := Observation{Complete: true, Billable: true}
	if u := getView(body, "usage"); u.IsObject() {
		obs.mergeMessagesUsage(u)
		obs.UsageFinal = true
	}
	// Thinking text, in case the upstream does not split thinking tokens out; and the
	// calls to MCP servers, which the usage does not count.
	content, _ := member(body, "content")
	eachElement(content, func(_ int, block []byte) bool {
		typ, _ := member(block, "type")
		switch stringText(typ) {
		case "thinking":
			t, _ := member(block, "thinking")
			obs.ThinkingChars += stringLen(t)
		case "mcp_tool_use":
			obs.Usage.ToolUses.add(ToolMCP, 1)
		}
		return true
	})
	return getView(body, "model"), obs
}

// mergeMessagesUsage takes the counts a usage object carries and keeps the earlier ones
// it leaves out: message_delta's usage may carry only output_tokens.
func (o *Observation) mergeMessagesUsage(u gjson.Result) {
	f := gjson.GetMany(u.Raw, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens",
		"output_tokens", "output_tokens_details.thinking_tokens")
	prev := o.Usage
	pick := func(r gjson.Result, earlier int64) int64 {
		if r.Exists() {
			return r.Int()
		}
		return earlier
	}
	input := pick(f[0], prev.Input-prev.CachedInput-prev.CacheWrite)
	read, write := pick(f[1], prev.CachedInput), pick(f[2], prev.CacheWrite)
	o.Usage = Usage{Input: input + read + write, CachedInput: read, CacheWrite: write, Output: pick(f[3], prev.Output), Reasoning: prev.Reasoning,
		ToolUses: prev.ToolUses}
	if f[4].Exists() {
		o.Usage.Reasoning, o.ReasoningReported = f[4].Int(), true
	}
	o.mergeMessagesToolUse(u)
	o.UsageReported = true
}

// messagesStream reads a Messages stream's events; it needs nothing from one event to
// the next but the observation.
type messagesStream struct{}

func (messages) newStream(bool) *EventStream { return &EventStream{stream: messagesStream{}} }

// lastSequence: Messages events are not numbered.
func (messagesStream) lastSequence() int64 { return -1 }

// event reads the frequent events (content_block_delta, and the start, stop and ping
// events around it) with the member walker in one pass over their top level; only the
// two that carry usage, once a stream each, are looked up with gjson.
func (messagesStream) event(obs *Observation, ev Event) eventView {
	isDelta := string(ev.Name) == "content_block_delta"
	typ, delta := readMessagesEvent(ev.Data, isDelta)
	if string(ev.Name) == "error" || stringText(typ) == "error" {
		return eventView{isError: true}
	}
	switch string(ev.Name) {
	case "message_start":
		if u := getView(ev.Data, "message.usage"); u.IsObject() {
			obs.mergeMessagesUsage(u)
		}
		return eventView{model: getView(ev.Data, "message.model")}
	case "content_block_start":
		// A call to an MCP server is a block of its own; the usage does not count them.
		if getView(ev.Data, "content_block.type").Str == "mcp_tool_use" {
			obs.Usage.ToolUses.add(ToolMCP, 1)
		}
	case "content_block_delta":
		obs.OutputChars += stringLen(delta.text) + stringLen(delta.partialJSON)
		obs.ThinkingChars += stringLen(delta.thinking)
	case "message_delta":
		// message_start's output count is a placeholder; message_delta's is the final one.
		f := gjson.GetMany(view(ev.Data), "usage", "delta.stop_reason")
		if f[0].IsObject() {
			obs.mergeMessagesUsage(f[0])
			obs.UsageFinal = true
		}
		if f[1].Str != "" {
			obs.FinishReason = strings.Clone(f[1].Str) // the event's buffer is reused
		}
	case "message_stop":
		obs.Complete = true
	}
	return eventView{}
}

// messagesDelta is the text members of a content_block_delta's delta, as written.
type messagesDelta struct{ text, partialJSON, thinking []byte }

// readMessagesEvent finds the first top-level `type` of a Messages event and, when
// withDelta, its delta's text members. Each is the one gjson's "delta.text" (and so on)
// would find: the first that any `delta` object holds, in the order the deltas come.
// Without withDelta the walk ends at `type`, usually the first member.
func readMessagesEvent(data []byte, withDelta bool) (typ []byte, d messagesDelta) {
	w, ok := walkObject(data)
	if !ok {
		return nil, d
	}
	for {
		key, start, ok := w.nextKey()
		if !ok {
			return typ, d
		}
		var end int
		switch keyText(key) {
		case "type":
			end = skipJSONValue(data, start)
			if typ == nil && end >= 0 {
				typ = data[start:end]
				if !withDelta {
					return typ, d
				}
			}
		case "delta":
			if withDelta {
				end = d.read(data, start) // read where it lies, not skipped first
			} else {
				end = skipJSONValue(data, start)
			}
		default:
			end = skipJSONValue(data, start)
		}
		if end < 0 {
			return typ, d
		}
		w.resume(end)
	}
}

// read takes the text members of the delta value at b[start] that no earlier delta
// supplied, and returns where the value ends (-1 when it is broken).
func (d *messagesDelta) read(b []byte, start int) (end int) {
	if start >= len(b) || b[start] != '{' {
		return skipJSONValue(b, start)
	}
	w := memberWalk{b: b, i: start + 1}
	return w.keepFirst(messagesDeltaText, &d.text, &d.partialJSON, &d.thinking)
}

// messagesDeltaText are the members of a delta whose text the shape counts.
var messagesDeltaText = []string{"text", "partial_json", "thinking"}

// FinishReason is the message's stop_reason.
func (messages) FinishReason(body []byte) string { return gjson.GetBytes(body, "stop_reason").Str }

func (messages) IsError(ev Event) bool {
	if string(ev.Name) == "error" {
		return true
	}
	typ, _ := readMessagesEvent(ev.Data, false)
	return stringText(typ) == "error"
}

func (messages) eventModelPath(ev Event) string {
	if string(ev.Name) == "message_start" {
		return "message.model"
	}
	return ""
}

// ErrorEvent is an `error` event carrying the Family B error envelope.
func (messages) ErrorEvent(e *APIError, _ int64) []byte {
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", e.Body(""))
}

// Validate: the version header as a date; `messages` an array; for messages (not token
// counts) a positive integer `max_tokens`, `stream` a boolean, and an enabled thinking
// budget of at least 1024 and below max_tokens.
func (m messages) Validate(p *ParsedRequest, h http.Header) *APIError {
	version := VersionHeader(h)
	if version == "" {
		return InvalidParam(FamilyB, "", "the anthropic-version (or family-b-version) header is required, for example 'anthropic-version: 2023-06-01'")
	}
	if !isDate(version) {
		return InvalidParam(FamilyB, "", "the anthropic-version (or family-b-version) header must be a date in the form YYYY-MM-DD")
	}
	if !p.get(fieldMessages).IsArray() {
		return InvalidParam(FamilyB, "messages", "messages: field required and must be an array")
	}
	if m.kind == KindMessagesCountTokens {
		return nil
	}
	maxTokens, ok := positiveInt(p.get(fieldMaxTokens))
	if !ok {
		return InvalidParam(FamilyB, "max_tokens", "max_tokens: field required and must be a positive integer")
	}
	if e := optionalBool(FamilyB, p.get(fieldStream), "stream"); e != nil {
		return e
	}
	if _, e := p.serverTools(m.kind, 0); e != nil {
		return e // a server tool's max_uses, which admission reserves by
	}
	if thinking := p.get(fieldThinking); thinking.Get("type").Str == "enabled" {
		budget, ok := positiveInt(thinking.Get("budget_tokens"))
		switch {
		case !ok:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: required integer when thinking is enabled")
		case budget < minThinkingBudget:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: must be at least %d", minThinkingBudget)
		case budget >= maxTokens:
			return InvalidParam(FamilyB, "thinking.budget_tokens", "thinking.budget_tokens: must be less than max_tokens (%d)", maxTokens)
		}
	}
	return nil
}

// requestBody is the client's body as sent.
func (messages) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	return p.Body, p.get(fieldModel), false
}

// outputCaps: max_tokens, for messages (count_tokens generates nothing).
func (m messages) outputCaps(p *ParsedRequest) []capField {
	if m.kind == KindMessagesCountTokens {
		return nil
	}
	return []capField{{"max_tokens", p.get(fieldMaxTokens)}}
}
