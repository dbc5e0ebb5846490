package metering

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

func TestExtractReadsEachShapesNativeUsage(t *testing.T) {
	cases := []struct {
		name string
		kind protocols.Kind
		obs  Observed
		want Usage
	}{
		{
			name: "chat: cached inside prompt, reasoning inside completion",
			kind: protocols.KindChat,
			obs: Observed{Complete: true, Usage: []byte(`{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,
				"prompt_tokens_details":{"cached_tokens":1000,"audio_tokens":0},
				"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`)},
			want: Usage{Input: 1200, CachedInput: 1000, Output: 300, Reasoning: 256},
		},
		{
			name: "chat without detail objects",
			kind: protocols.KindChat,
			obs:  Observed{Complete: true, Usage: []byte(`{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}`)},
			want: Usage{Input: 9, Output: 4},
		},
		{
			name: "responses: input_tokens_details and output_tokens_details",
			kind: protocols.KindResponses,
			obs: Observed{Complete: true, Usage: []byte(`{"input_tokens":5000,"input_tokens_details":{"cached_tokens":4096,"cache_write_tokens":0},
				"output_tokens":900,"output_tokens_details":{"reasoning_tokens":700},"total_tokens":5900}`)},
			want: Usage{Input: 5000, CachedInput: 4096, Output: 900, Reasoning: 700},
		},
		{
			name: "messages: cache beside input, thinking split out",
			kind: protocols.KindMessages,
			obs: Observed{Complete: true, Usage: []byte(`{"input_tokens":12,"cache_creation_input_tokens":2000,"cache_read_input_tokens":30000,
				"output_tokens":480,"output_tokens_details":{"thinking_tokens":400}}`)},
			want: Usage{Input: 32012, CachedInput: 30000, CacheWrite: 2000, Output: 480, Reasoning: 400},
		},
		{
			name: "messages stream: input from message_start, output from the last message_delta",
			kind: protocols.KindMessages,
			obs: Observed{Complete: true,
				StartUsage: []byte(`{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":1}`),
				Usage:      []byte(`{"output_tokens":60}`)},
			want: Usage{Input: 125, CachedInput: 100, Output: 60},
		},
		{
			name: "messages without the thinking split: derived from the thinking text, flagged",
			kind: protocols.KindMessages,
			obs:  Observed{Complete: true, ThinkingChars: 400, Usage: []byte(`{"input_tokens":10,"output_tokens":150}`)},
			want: Usage{Input: 10, Output: 150, Reasoning: 100, Estimated: true},
		},
		{
			name: "a stream cut before its usage: what was forwarded, flagged",
			kind: protocols.KindChat,
			obs:  Observed{Complete: false, OutputChars: 400},
			want: Usage{Output: 100, Estimated: true},
		},
		{
			name: "a Family B stream the client left: message_start input kept, output estimated",
			kind: protocols.KindMessages,
			obs: Observed{Complete: false, OutputChars: 80, ThinkingChars: 40,
				StartUsage: []byte(`{"input_tokens":30,"output_tokens":1}`)},
			want: Usage{Input: 30, Output: 30, Reasoning: 10, Estimated: true},
		},
		{
			name: "token counts bill nothing",
			kind: protocols.KindMessagesCountTokens,
			obs:  Observed{Complete: true, Usage: []byte(`{"input_tokens":50}`)},
			want: Usage{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Extract(c.kind, c.obs))
		})
	}
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
