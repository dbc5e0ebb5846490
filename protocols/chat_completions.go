package protocols

import (
	"fmt"
	"net/http"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// chatCompletions is the chat completions shape (Family A, POST /v1/chat/completions).
//
//   - JSON answer: `model` and `usage` at the top level.
//   - Stream: `data:` chunks without event names, ending with `data: [DONE]`; every chunk
//     carries `model`; usage comes in a last chunk with empty `choices`, only when the
//     request asked for it with stream_options.include_usage (the gateway asks itself
//     when the client did not, and drops that chunk before the client sees it).
//   - Usage: prompt_tokens (cached_tokens inside it), completion_tokens (reasoning_tokens
//     inside it).
//   - In-band error: a chunk whose JSON carries a non-null `error`.
type chatCompletions struct{}

func (chatCompletions) Answer(_ Kind, body []byte) (gjson.Result, Observation) {
	return answerFamilyA(body, chatUsage)
}

// chatUsage names the counts of a chat usage object.
var chatUsage = familyAUsage{"prompt_tokens", "prompt_tokens_details.cached_tokens",
	"prompt_tokens_details.cache_write_tokens", "completion_tokens", "completion_tokens_details.reasoning_tokens"}

// event reads a chat chunk, the most frequent event there is, in one pass over its top
// level: model, usage, choices and any error, where separate lookups would scan it once each.
func (chatCompletions) event(s *EventStream, ev Event) eventView {
	var (
		model                  gjson.Result // the first `model`, when it is a string
		modelSeen              bool
		usage, choices, errVal []byte
	)
	w, _ := walkObject(ev.Data)
	for {
		key, start, end, ok := w.next()
		if !ok {
			break
		}
		switch keyText(key) {
		case "model":
			if !modelSeen {
				modelSeen, model = true, stringResult(ev.Data, start, end)
			}
		case "usage":
			usage = ev.Data[start:end]
		case "choices":
			choices = ev.Data[start:end]
		case "error":
			errVal = ev.Data[start:end] // never empty: a value has at least one byte
		}
	}
	// As the SDKs read it: an `error` that is null or false is no error.
	if string(ev.Name) == "error" || errVal != nil && string(errVal) != "null" && string(errVal) != "false" {
		return eventView{isError: true}
	}
	isArray := len(choices) > 0 && choices[0] == '['
	first, hasFirst := firstElement(choices)
	if hasFirst {
		if delta, ok := member(first, "delta"); ok {
			content, _ := member(delta, "content")
			reasoning, _ := member(delta, "reasoning_content")
			var arguments []byte
			if calls, ok := member(delta, "tool_calls"); ok {
				if call, ok := firstElement(calls); ok {
					if fn, ok := member(call, "function"); ok {
						arguments, _ = member(fn, "arguments")
					}
				}
			}
			s.Obs.OutputChars += stringLen(content) + stringLen(arguments)
			s.Obs.ThinkingChars += stringLen(reasoning)
		}
	}
	if len(usage) > 0 && usage[0] == '{' {
		s.Obs.setFamilyAUsage(gjson.Result{Type: gjson.JSON, Raw: view(usage)}, chatUsage)
		if s.dropUsageChunk && isArray && !hasFirst {
			return eventView{drop: true} // the usage-only chunk the gateway asked for itself
		}
	}
	return eventView{model: model}
}

func (chatCompletions) IsError(ev Event) bool {
	// As the SDKs read it: an `error` that is null or false is no error.
	e := gjson.GetBytes(ev.Data, "error")
	return string(ev.Name) == "error" || (e.Exists() && e.Type != gjson.Null && e.Type != gjson.False)
}

func (chatCompletions) eventModelPath(Event) string { return "model" }

// ErrorEvent is a data frame carrying the Family A error object, as the SDKs read it.
func (chatCompletions) ErrorEvent(e *APIError, _ int64) []byte {
	return fmt.Appendf(nil, "data: %s\n\n", e.Body(""))
}

// Validate: `messages` is an array; `stream` a boolean; `stream_options` an object.
func (chatCompletions) Validate(p *ParsedRequest, _ Operation, _ http.Header) *APIError {
	if !p.messages.IsArray() {
		return InvalidParam(FamilyA, "messages", "'messages' is required and must be an array")
	}
	if e := optionalBool(FamilyA, p.stream, "stream"); e != nil {
		return e
	}
	if p.streamOptions.Exists() && p.streamOptions.Type != gjson.Null && !p.streamOptions.IsObject() {
		return InvalidParam(FamilyA, "stream_options", "'stream_options' must be an object")
	}
	return nil
}

// requestBody asks for usage in a streamed request that did not (metering needs it),
// reporting it so that the usage-only chunk is removed before the client sees it; that
// rare case costs one copy of the body.
func (chatCompletions) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	if !p.Streamed() || p.streamOptions.Get("include_usage").Type == gjson.True {
		return p.Body, p.model, false
	}
	withUsage, err := sjson.SetBytes(p.Body, "stream_options.include_usage", true)
	if err != nil {
		return p.Body, p.model, false
	}
	return withUsage, getView(withUsage, "model"), true
}

// outputCaps: max_completion_tokens, and the older max_tokens.
func (chatCompletions) outputCaps(p *ParsedRequest, _ Kind) []capField {
	return []capField{{"max_completion_tokens", p.maxCompletionTokens}, {"max_tokens", p.maxTokens}}
}
