package metering

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// answered is what the shape of kind observes in a whole JSON answer.
func answered(kind protocols.Kind, body string) protocols.Observation {
	_, obs := protocols.ShapeOf(kind).Answer([]byte(body))
	return obs
}

// streamed is what the shape of kind observes in a stream of events.
func streamed(kind protocols.Kind, events ...string) protocols.Observation {
	s := protocols.NewEventStream(kind, "svc", false, protocols.Scrubber{})
	s.Push([]byte(strings.Join(events, "")))
	for ev, ok := s.Next(); ok; ev, ok = s.Next() {
		_, _ = s.AppendRewritten(nil, ev)
	}
	return s.Obs
}

func TestBillReadsEachShapesNativeUsage(t *testing.T) {
	text := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name string
		obs  protocols.Observation
		want Usage
	}{
		{
			name: "chat: cached inside prompt, reasoning inside completion",
			obs: answered(protocols.KindChat, `{"model":"m","usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,
				"prompt_tokens_details":{"cached_tokens":1000,"audio_tokens":0},
				"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`),
			want: Usage{Input: 1200, CachedInput: 1000, Output: 300, Reasoning: 256},
		},
		{
			name: "chat without detail objects",
			obs:  answered(protocols.KindChat, `{"model":"m","usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`),
			want: Usage{Input: 9, Output: 4},
		},
		{
			name: "responses: input_tokens_details and output_tokens_details",
			obs: answered(protocols.KindResponses, `{"model":"m","usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":4096,"cache_write_tokens":0},
				"output_tokens":900,"output_tokens_details":{"reasoning_tokens":700},"total_tokens":5900}}`),
			want: Usage{Input: 5000, CachedInput: 4096, Output: 900, Reasoning: 700},
		},
		{
			name: "messages: cache beside input, thinking split out",
			obs: answered(protocols.KindMessages, `{"model":"m","usage":{"input_tokens":12,"cache_creation_input_tokens":2000,"cache_read_input_tokens":30000,
				"output_tokens":480,"output_tokens_details":{"thinking_tokens":400}}}`),
			want: Usage{Input: 32012, CachedInput: 30000, CacheWrite: 2000, Output: 480, Reasoning: 400},
		},
		{
			name: "messages stream: input from message_start, output from the last message_delta",
			obs: streamed(protocols.KindMessages,
				"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n",
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":60}}\n\n",
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
			want: Usage{Input: 125, CachedInput: 100, Output: 60},
		},
		{
			name: "messages without the thinking split: derived from the thinking text, flagged",
			obs: answered(protocols.KindMessages, `{"model":"m","content":[{"type":"thinking","thinking":"`+text(400)+`"}],
				"usage":{"input_tokens":10,"output_tokens":150}}`),
			want: Usage{Input: 10, Output: 150, Reasoning: 100, Estimated: true},
		},
		{
			name: "a stream cut before its usage: what was forwarded, flagged",
			obs: streamed(protocols.KindChat,
				"data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\""+text(400)+"\"}}]}\n\n"),
			want: Usage{Output: 100, Estimated: true},
		},
		{
			name: "a Family B stream the client left: message_start input kept, output estimated",
			obs: streamed(protocols.KindMessages,
				"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n",
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\""+text(40)+"\"}}\n\n",
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\""+text(80)+"\"}}\n\n"),
			want: Usage{Input: 30, Output: 30, Reasoning: 10, Estimated: true},
		},
		{
			name: "token counts bill nothing",
			obs:  answered(protocols.KindMessagesCountTokens, `{"input_tokens":50}`),
			want: Usage{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Bill(c.obs, nil))
		})
	}
}

func TestBillEstimatesTheInputOfAnAnswerWithoutUsage(t *testing.T) {
	obs := streamed(protocols.KindChat, "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n")
	u := Bill(obs, func() int64 { return 400 })
	assert.Equal(t, int64(400), u.Input, "a processed prompt is never billed as nothing")
	assert.True(t, u.Estimated)

	complete := answered(protocols.KindChat, `{"model":"m","usage":{"prompt_tokens":7,"completion_tokens":1}}`)
	asked := false
	assert.Equal(t, int64(7), Bill(complete, func() int64 { asked = true; return 400 }).Input)
	assert.False(t, asked, "the request text is only measured when an estimate is needed")
}

func TestCostPricesEachKindOfTokenAtItsOwnPrice(t *testing.T) {
	// $3 input, $0.30 cached, $3.75 cache write, $15 output, $20 reasoning per million.
	p := routing.Prices{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000, Reasoning: 20_000_000}
	u := Usage{Input: 32012, CachedInput: 30000, CacheWrite: 2000, Output: 480, Reasoning: 400}
	// Uncached input 12 at $3, cached 30,000 at $0.30, cache write 2,000 at $3.75, visible
	// output 80 at $15, reasoning 400 at $20, per million tokens: 36 + 9,000 + 7,500 +
	// 1,200 + 8,000 = 25,736 micro-dollars.
	want := (12*3_000_000 + 30000*300_000 + 2000*3_750_000 + 80*15_000_000 + 400*20_000_000 + 500_000) / 1_000_000
	assert.Equal(t, int64(want), Cost(p, u))
	assert.Equal(t, int64(25736), Cost(p, u))

	// Reasoning at its own price: the same output costs more when it is reasoning.
	plain := Cost(p, Usage{Output: 1_000_000})
	reasoning := Cost(p, Usage{Output: 1_000_000, Reasoning: 1_000_000})
	assert.Equal(t, int64(15_000_000), plain)
	assert.Equal(t, int64(20_000_000), reasoning)

	// Unset cached prices fall back to the input price; rounding is half up, once.
	q := routing.Prices{Input: 1_250_000}
	assert.Equal(t, Cost(q, Usage{Input: 1000}), Cost(q, Usage{Input: 1000, CachedInput: 600, CacheWrite: 100}))
	assert.Equal(t, int64(1), Cost(routing.Prices{Input: 1_000_000}, Usage{Input: 1}), "1 token at $1/M is one micro-unit")
	assert.Equal(t, int64(0), Cost(routing.Prices{Input: 400_000}, Usage{Input: 1}), "0.4 rounds down")
	assert.Equal(t, int64(1), Cost(routing.Prices{Input: 500_000}, Usage{Input: 1}), "0.5 rounds up")
}

// An upstream's final usage is billed as reported whether or not the stream's terminator
// follows; usage that is only partial (message_start, continuous chat usage before any
// finish_reason) leaves the answer estimated from its text.
func TestFinalUsageWinsWithoutATerminator(t *testing.T) {
	text := strings.Repeat("x", 372) // worth 93 tokens by the estimate
	chatChunk := func(content, finish, usage string) string {
		c := `{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":` + finish + `}]`
		if usage != "" {
			c += `,"usage":` + usage
		}
		return "data: " + c + "}\n\n"
	}
	const usage60 = `{"prompt_tokens":20,"completion_tokens":60,"total_tokens":80}`
	messagesStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n"
	messagesText := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n"
	responsesText := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"" + text + "\"}\n\n"
	cases := []struct {
		name string
		obs  protocols.Observation
		want Usage
	}{
		{
			name: "chat: finish_reason, then the usage chunk, no [DONE]",
			obs: streamed(protocols.KindChat, chatChunk(text, "null", ""), chatChunk("", `"stop"`, ""),
				"data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[],\"usage\":"+usage60+"}\n\n"),
			want: Usage{Input: 20, Output: 60},
		},
		{
			name: "chat: continuous usage, the last on the finishing chunk, no [DONE]",
			obs: streamed(protocols.KindChat, chatChunk(text, "null", `{"prompt_tokens":20,"completion_tokens":30}`),
				chatChunk("", `"length"`, usage60)),
			want: Usage{Input: 20, Output: 60},
		},
		{
			name: "chat: continuous usage cut before any finish_reason",
			obs:  streamed(protocols.KindChat, chatChunk(text, "null", `{"prompt_tokens":20,"completion_tokens":60}`)),
			want: Usage{Input: 20, Output: 93, Estimated: true},
		},
		{
			name: "messages: message_delta's usage, no message_stop",
			obs: streamed(protocols.KindMessages, messagesStart, messagesText,
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":60}}\n\n"),
			want: Usage{Input: 20, Output: 60},
		},
		{
			name: "messages: only message_start's usage, then cut",
			obs:  streamed(protocols.KindMessages, messagesStart, messagesText),
			want: Usage{Input: 20, Output: 93, Estimated: true},
		},
		{
			name: "messages: message_start's usage and message_stop, no message_delta",
			obs: streamed(protocols.KindMessages, messagesStart, messagesText,
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
			want: Usage{Input: 20, Output: 93, Estimated: true},
		},
		{
			name: "responses: response.failed with its usage",
			obs: streamed(protocols.KindResponses, responsesText,
				"event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":2,\"response\":{\"model\":\"m\",\"usage\":{\"input_tokens\":20,\"output_tokens\":60}}}\n\n"),
			want: Usage{Input: 20, Output: 60},
		},
		{
			name: "responses: usage on a lifecycle event before the terminal one, then cut",
			obs: streamed(protocols.KindResponses, responsesText,
				"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":2,\"response\":{\"model\":\"m\",\"usage\":{\"input_tokens\":20,\"output_tokens\":60}}}\n\n"),
			want: Usage{Input: 20, Output: 93, Estimated: true},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Bill(c.obs, nil))
		})
	}
}

// An attempt the gateway gave up on after its upstream had the whole request is billed
// its input, estimated: on its own (nothing came) and on top of another candidate's
// answer that then served the request.
func TestAbandonedAttemptsAreBilledTheirInput(t *testing.T) {
	prices := routing.Prices{Input: 2_000_000, Output: 8_000_000}
	input := func() int64 { return 400 }

	alone := NewRecord(Answer{Obs: protocols.Observation{Billable: true}, RequestInputTokens: input, Prices: prices}, time.Now())
	assert.Equal(t, int64(400), alone.Usage.Input)
	assert.Zero(t, alone.Usage.Output)
	assert.True(t, alone.Usage.Estimated)
	assert.Equal(t, int64(800), alone.CostMicros)

	served := answered(protocols.KindChat, `{"model":"m","usage":{"prompt_tokens":7,"completion_tokens":1}}`)
	after := NewRecord(Answer{Obs: served, RequestInputTokens: input, Prices: prices, Abandoned: 2}, time.Now())
	assert.Equal(t, int64(7+2*400), after.Usage.Input, "the answer's own input and each abandoned attempt's")
	assert.Equal(t, int64(1), after.Usage.Output)
	assert.True(t, after.Usage.Estimated)

	plain := NewRecord(Answer{Obs: served, RequestInputTokens: input, Prices: prices}, time.Now())
	assert.Equal(t, int64(7), plain.Usage.Input)
	assert.False(t, plain.Usage.Estimated)
}
