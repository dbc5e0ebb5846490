package protocols

import (
	"net/http"

	"github.com/tidwall/gjson"
)

// Shape is one native wire format: chat completions, responses or messages, with its
// sub-operations. Everything the gateway knows about reading and rewriting a shape's
// answers is in the shape's own file (chat_completions.go, responses.go, messages.go);
// the relay and metering ask the shape and never switch on the kind themselves.
type Shape interface {
	// Validate checks a request body that passed the bounded scan against the shape's
	// rules for its operation (and the family's headers).
	Validate(p *ParsedRequest, h http.Header) *APIError
	// Answer reads a whole JSON answer: where its model value is (Index > 0 when found)
	// and what it reports.
	Answer(body []byte) (model gjson.Result, obs Observation)
	// FinishReason is why the model stopped, as a whole JSON answer says: one lookup
	// more over the body, made only for those who ask (a traced request).
	FinishReason(body []byte) string
	// IsError reports an in-band error event.
	IsError(ev Event) bool
	// ErrorEvent is the native in-band error event that ends a stream which already
	// started; nextSequence is for shapes that number their events.
	ErrorEvent(e *APIError, nextSequence int64) []byte

	// newStream is a new EventStream carrying the state one stream of the shape keeps
	// between its events; dropUsageChunk says the gateway asked for a chat usage chunk
	// the client must not see.
	newStream(dropUsageChunk bool) *EventStream
	// eventModelPath is where an event of the shape carries the model, "" for none.
	eventModelPath(ev Event) string
	// outputCaps are the request's fields that cap the output of the shape's operation
	// (none for token counts).
	outputCaps(p *ParsedRequest) []capField
	// requestBody is the body to send upstream before the model is spliced in, where
	// its model is, and whether the gateway added a request for usage.
	requestBody(p *ParsedRequest) (body []byte, model gjson.Result, injectedUsage bool)
}

// shapeStream is one stream's reader of a shape's events, holding what the shape
// remembers from one event to the next (a chat chunk head, a sequence number).
type shapeStream interface {
	// event observes one data event into obs and says where its model is.
	event(obs *Observation, ev Event) eventView
	// lastSequence is the highest sequence number the events carried, -1 before any
	// and for shapes that number none.
	lastSequence() int64
}

// streamWith allocates an EventStream together with the shape's state for it, so that
// a stream costs one allocation whatever its shape keeps.
func streamWith[T any, P interface {
	*T
	shapeStream
}](state T) *EventStream {
	both := &struct {
		s     EventStream
		state T
	}{state: state}
	both.s.stream = P(&both.state)
	return &both.s
}

// eventView is what a shape saw in one event.
type eventView struct {
	model   gjson.Result // the model value, Index relative to the event's data
	isError bool         // an in-band error: scrubbed as an error, never dropped
	drop    bool         // an event the client must not see (the usage chunk the gateway asked for)
}

// ShapeOf is the shape an operation's answers have; it knows the operation's kind (a
// token count's answers are read unlike a generation's).
func ShapeOf(kind Kind) Shape {
	switch kind {
	case KindChat:
		return chatCompletions{}
	case KindResponses, KindResponsesInputTokens, KindResponsesCompact:
		return responses{kind}
	case KindMessages, KindMessagesCountTokens:
		return messages{kind}
	}
	return noShape{}
}

// Usage is what one answer consumed, in the gateway's own terms.
type Usage struct {
	// Input counts every input token, cached ones included.
	Input int64 `json:"input"`
	// CachedInput is the part of Input read from the upstream's prompt cache.
	CachedInput int64 `json:"cached_input"`
	// CacheWrite is the part of Input written to the upstream's prompt cache.
	CacheWrite int64 `json:"cache_write"`
	// Output counts every output token, reasoning included.
	Output int64 `json:"output"`
	// Reasoning is the part of Output spent on reasoning or thinking.
	Reasoning int64 `json:"reasoning"`
	// Estimated says a count had to be derived rather than read from the upstream.
	Estimated bool `json:"estimated"`
	// ToolUses counts the uses of server-side tools the answer reported (web searches,
	// file searches, ...), each at most MaxToolUses; left out of JSON when none.
	ToolUses ToolUses `json:"tool_uses,omitzero"`
}

// Observation is what the gateway saw of one answer, in neutral terms, whatever its
// shape: the usage the upstream reported, how much text it carried, whether it ended
// naturally. Metering estimates and prices from it alone.
type Observation struct {
	// Usage is the usage as the upstream reported it so far (for a stream, the latest).
	Usage Usage
	// UsageReported says the upstream reported any usage.
	UsageReported bool
	// UsageFinal says the usage is the upstream's final count for the answer, not a
	// partial one (Messages' message_start, a chat chunk before any finish_reason): it
	// is billed as reported, whether or not the stream's terminator followed.
	UsageFinal bool
	// ReasoningReported says the upstream split reasoning tokens out of its output
	// count (or its shape always does); when not, they may be derived from ThinkingChars.
	ReasoningReported bool
	// OutputChars and ThinkingChars count the generated text carried (answer text and
	// tool arguments; thinking and reasoning text), for estimates.
	OutputChars, ThinkingChars int64
	// Complete says the answer reached its natural end.
	Complete bool
	// FinishReason is why the model stopped, as the upstream wrote it (the first
	// choice's finish_reason, Messages' stop_reason, a Responses answer's incomplete
	// reason or status); empty when it did not say. A stream's is observed as it
	// passes; a whole answer's only when asked for (Shape.FinishReason).
	FinishReason string
	// Billable says the operation generates output worth metering (token counts do not).
	Billable bool
}

// textLen is the length of a JSON string value without its quotes: close enough to its
// character count for an estimate, and free of the copy unescaping would make.
func textLen(r gjson.Result) int64 {
	if r.Type != gjson.String || len(r.Raw) < 2 {
		return 0
	}
	return int64(len(r.Raw) - 2)
}

// noShape is the shape of operations that are not relayed.
type noShape struct{}

func (noShape) Answer([]byte) (gjson.Result, Observation)      { return gjson.Result{}, Observation{} }
func (noShape) FinishReason([]byte) string                     { return "" }
func (noShape) IsError(Event) bool                             { return false }
func (noShape) ErrorEvent(e *APIError, _ int64) []byte         { return chatCompletions{}.ErrorEvent(e, 0) }
func (noShape) newStream(bool) *EventStream                    { return &EventStream{stream: noStream{}} }
func (noShape) eventModelPath(Event) string                    { return "" }
func (noShape) Validate(*ParsedRequest, http.Header) *APIError { return nil }
func (noShape) outputCaps(*ParsedRequest) []capField           { return nil }
func (noShape) requestBody(p *ParsedRequest) ([]byte, gjson.Result, bool) {
	return p.Body, p.get(fieldModel), false
}

// noStream reads nothing of the events of an operation that is not relayed.
type noStream struct{}

func (noStream) event(*Observation, Event) eventView { return eventView{} }
func (noStream) lastSequence() int64                 { return -1 }
