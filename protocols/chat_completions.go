package protocols

import (
	"bytes"
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

func (chatCompletions) Answer(body []byte) (gjson.Result, Observation) {
	return answerFamilyA(body, chatUsage)
}

// FinishReason is the first choice's finish_reason.
func (chatCompletions) FinishReason(body []byte) string {
	return gjson.GetBytes(body, "choices.0.finish_reason").Str
}

// chatUsage names the counts of a chat usage object.
var chatUsage = familyAUsage{"prompt_tokens", "prompt_tokens_details.cached_tokens",
	"prompt_tokens_details.cache_write_tokens", "completion_tokens", "completion_tokens_details.reasoning_tokens"}

// chatStream is what a chat stream remembers from one chunk to the next.
type chatStream struct {
	// chunkHead lets a chunk skip what it repeats of the last.
	chunkHead chunkHead
	// chatFinished is set once a chunk carried a finish_reason: usage from then on is
	// final.
	chatFinished bool
	// dropUsageChunk removes the usage-only chunk the gateway asked for itself.
	dropUsageChunk bool
}

func (chatCompletions) newStream(dropUsageChunk bool) *EventStream {
	return streamWith(chatStream{dropUsageChunk: dropUsageChunk})
}

// lastSequence: chat chunks are not numbered.
func (*chatStream) lastSequence() int64 { return -1 }

// event reads a chat chunk, the most frequent event there is, in one pass: model, usage
// and any error at the top level, and the first choice's delta inside choices, where
// separate lookups would scan it once each.
//
// The members before choices (id, object, created, model, …) are the same bytes in
// nearly every chunk of a stream: once a chunk begins with exactly the bytes the last one
// had up to its choices, what those members say is known, and the walk starts at choices.
// Identical bytes read identically, so this changes no result.
func (c *chatStream) event(obs *Observation, ev Event) eventView {
	var (
		model                gjson.Result // the first `model`, when it is a string
		modelSeen            bool
		modelStart, modelEnd int
		usage, errVal        []byte
		choices              chatChoices
		choicesSeen          bool
	)
	data := ev.Data
	w, _ := walkObject(data)
	head := &c.chunkHead
	if len(head.prefix) > 0 && bytes.HasPrefix(data, head.prefix) {
		modelSeen = head.modelSeen
		if modelSeen {
			model = stringResult(data, head.modelStart, head.modelEnd)
		}
		end := 0
		choices, end = readChoices(data, len(head.prefix))
		choicesSeen = true
		w.resume(end)
	}
	for {
		key, start, ok := w.nextKey()
		if !ok {
			break
		}
		end := 0
		switch keyText(key) {
		case "model":
			end = skipJSONValue(data, start)
			if !modelSeen && end >= 0 {
				modelSeen, model = true, stringResult(data, start, end)
				modelStart, modelEnd = start, end
			}
		case "choices":
			if !choicesSeen && usage == nil && errVal == nil {
				// What comes before the first choices is the head the next chunks
				// probably repeat.
				head.remember(data[:start], modelSeen, modelStart, modelEnd)
			}
			choices, end = readChoices(data, start)
			choicesSeen = true
		case "usage":
			end = skipJSONValue(data, start)
			usage = data[start:max(start, end)]
		case "error":
			end = skipJSONValue(data, start)
			errVal = data[start:max(start, end)]
		default:
			end = skipJSONValue(data, start)
		}
		if end < 0 {
			break
		}
		w.resume(end)
	}
	// As the SDKs read it: an `error` that is null or false is no error.
	if string(ev.Name) == "error" || len(errVal) > 0 && string(errVal) != "null" && string(errVal) != "false" {
		return eventView{isError: true}
	}
	obs.OutputChars += stringLen(choices.content) + stringLen(choices.arguments)
	obs.ThinkingChars += stringLen(choices.reasoning)
	c.chatFinished = c.chatFinished || choices.finished
	if choices.finish != nil && obs.FinishReason == "" {
		obs.FinishReason = unquoted(choices.finish)
	}
	if len(usage) > 0 && usage[0] == '{' {
		obs.setFamilyAUsage(gjson.Result{Type: gjson.JSON, Raw: view(usage)}, chatUsage)
		// Some servers put usage in every chunk, counting so far: it is final only once
		// a choice has finished, in this chunk or before.
		obs.UsageFinal = c.chatFinished
		if c.dropUsageChunk && choices.isArray && !choices.hasFirst {
			return eventView{drop: true} // the usage-only chunk the gateway asked for itself
		}
	}
	return eventView{model: model}
}

// chunkHead is what a stream's chat chunks repeat before their choices, as the last full
// walk found it.
type chunkHead struct {
	prefix               []byte // the bytes up to where the choices value starts
	modelSeen            bool
	modelStart, modelEnd int // the model value, when the head has one
}

// maxChunkHead bounds the head a stream keeps; a longer one is not remembered.
const maxChunkHead = 512

func (h *chunkHead) remember(prefix []byte, modelSeen bool, modelStart, modelEnd int) {
	if len(prefix) > maxChunkHead {
		h.prefix = h.prefix[:0]
		return
	}
	h.prefix = append(h.prefix[:0], prefix...)
	h.modelSeen, h.modelStart, h.modelEnd = modelSeen, modelStart, modelEnd
}

// chatChoices is what a chunk's choices say to metering.
type chatChoices struct {
	isArray, hasFirst             bool
	content, reasoning, arguments []byte // the first choice's delta text, as written
	// finished says a choice carries a finish_reason; finish is the first choice's.
	finished bool
	finish   []byte
}

// isFinishReason reports a finish_reason value that says a choice ended: a non-empty
// string (null, or "" from some servers, while it goes on).
func isFinishReason(v []byte) bool { return stringLen(v) > 0 }

// readChoices reads the choices value starting at b[start] in one pass, and returns where
// it ends (-1 when it is broken).
func readChoices(b []byte, start int) (c chatChoices, end int) {
	if start >= len(b) || b[start] != '[' {
		return c, skipJSONValue(b, start)
	}
	c.isArray = true
	i := skipSpace(b, start+1)
	if i < len(b) && b[i] == ']' {
		return c, i + 1
	}
	c.hasFirst = i < len(b)
	if i < len(b) && b[i] == '{' {
		w := memberWalk{b: b, i: i + 1}
		var delta, finish []byte
		for {
			key, s, e, ok := w.next()
			if !ok {
				break
			}
			switch keyText(key) {
			case "delta":
				if delta == nil {
					delta = b[s:e]
				}
			case "finish_reason":
				if finish == nil {
					finish = b[s:e]
				}
			}
		}
		if end = w.objectEnd(); end < 0 {
			return chatChoices{}, -1
		}
		c.readDelta(delta)
		c.finished = isFinishReason(finish)
		if c.finished {
			c.finish = finish
		}
	} else if end = skipJSONValue(b, i); end < 0 {
		return chatChoices{}, -1
	}
	// The other choices, if any, are passed over.
	for i = skipSpace(b, end); i < len(b); i = skipSpace(b, end) {
		switch b[i] {
		case ']':
			return c, i + 1
		case ',':
			next := skipSpace(b, i+1)
			if end = skipJSONValue(b, next); end < 0 {
				return chatChoices{}, -1
			}
			if !c.finished {
				// With n > 1 a chunk may carry several choices; any one finishing counts.
				finish, _ := member(b[next:end], "finish_reason")
				c.finished = isFinishReason(finish)
			}
		default:
			return chatChoices{}, -1
		}
	}
	return chatChoices{}, -1
}

// readDelta takes the text members of a choice's delta in one pass over it.
func (c *chatChoices) readDelta(delta []byte) {
	w, ok := walkObject(delta)
	if !ok {
		return
	}
	var calls []byte
	w.keepFirst(chatDeltaText, &c.content, &c.reasoning, &calls)
	if call, ok := firstElement(calls); ok {
		if fn, ok := member(call, "function"); ok {
			c.arguments, _ = member(fn, "arguments")
		}
	}
}

// chatDeltaText are the members of a choice's delta whose text the shape counts.
var chatDeltaText = []string{"content", "reasoning_content", "tool_calls"}

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

// Validate: `messages` is an array; `stream` a boolean; `stream_options` an object;
// `n` 1..128; each output cap a positive integer, and both caps equal when both are set.
func (chatCompletions) Validate(p *ParsedRequest, _ http.Header) *APIError {
	if !p.get(fieldMessages).IsArray() {
		return InvalidParam(FamilyA, "messages", "'messages' is required and must be an array")
	}
	if e := optionalBool(FamilyA, p.get(fieldStream), "stream"); e != nil {
		return e
	}
	if o := p.get(fieldStreamOptions); o.Exists() && o.Type != gjson.Null && !o.IsObject() {
		return InvalidParam(FamilyA, "stream_options", "'stream_options' must be an object")
	}
	// The upstream writes n answers, each up to the cap: admission reserves them all.
	if _, _, e := positiveIntParam(p.get(fieldChoices), "n", MaxChoices); e != nil {
		return e
	}
	return checkOutputCaps(chatCompletions{}.outputCaps(p))
}

// requestBody asks for usage in a streamed request that did not (metering needs it),
// reporting it so that the usage-only chunk is removed before the client sees it; that
// rare case costs one copy of the body.
func (chatCompletions) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	if !p.Streamed() || p.get(fieldStreamOptions).Get("include_usage").Type == gjson.True {
		return p.Body, p.get(fieldModel), false
	}
	withUsage, err := sjson.SetBytes(p.Body, "stream_options.include_usage", true)
	if err != nil {
		return p.Body, p.get(fieldModel), false
	}
	return withUsage, getView(withUsage, "model"), true
}

// outputCaps: max_completion_tokens, and the older max_tokens.
func (chatCompletions) outputCaps(p *ParsedRequest) []capField {
	return []capField{{"max_completion_tokens", p.get(fieldMaxCompletionTokens)}, {"max_tokens", p.get(fieldMaxTokens)}}
}
