package protocols_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
)

// A generation request without a cap is sent with the model's declared one, in its
// shape's own field, so the upstream stops where admission's reservation does; a request
// with a cap, a token count, or a model without a declared cap is sent as it came.
func TestARequestWithoutACapIsSentTheDeclaredOne(t *testing.T) {
	const declared = 4096
	cases := []struct {
		name string
		op   protocols.Operation
		body string
		// field is where the upstream must read declared; "" when the body keeps its own.
		field string
	}{
		{"chat", opChat, `{"model":"m","messages":[]}`, "max_completion_tokens"},
		{"chat, space before the brace", opChat, "{\"model\":\"m\",\"messages\":[] \n}\n", "max_completion_tokens"},
		{"chat, null cap", opChat, `{"max_completion_tokens":null,"model":"m","messages":[]}`, "max_completion_tokens"},
		{"chat, null legacy cap", opChat, `{"model":"m","max_tokens":null,"messages":[]}`, "max_completion_tokens"},
		{"chat stream, usage asked for too", opChat, `{"model":"m","messages":[],"stream":true}`, "max_completion_tokens"},
		{"chat stream, null cap, usage asked for too", opChat, `{"model":"m","stream":true,"max_completion_tokens":null,"messages":[]}`, "max_completion_tokens"},
		{"chat stream, usage asked for inside stream_options before a null cap", opChat,
			`{"model":"m","stream":true,"stream_options":{},"max_completion_tokens":null,"messages":[]}`, "max_completion_tokens"},
		{"chat, n answers", opChat, `{"model":"m","messages":[],"n":3}`, "max_completion_tokens"},
		{"responses", opResponses, `{"model":"m","input":"hi"}`, "max_output_tokens"},
		{"compact", opCompact, `{"model":"m","input":[]}`, "max_output_tokens"},
		{"chat with its own cap", opChat, `{"model":"m","messages":[],"max_tokens":10}`, ""},
		{"responses with its own cap", opResponses, `{"model":"m","input":"hi","max_output_tokens":10}`, ""},
		{"messages", opMessages, `{"model":"m","max_tokens":10,"messages":[]}`, ""},
		{"input tokens", opInputTokens, `{"model":"m","input":"hi"}`, ""},
		{"count tokens", opCountTokens, `{"model":"m","messages":[]}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := protocols.ParseRequest(c.op.Family, []byte(c.body))
			require.Nil(t, err)
			body, _ := p.Upstream(c.op, "up", declared)
			sent := body.Bytes()
			_, err = protocols.ParseRequest(c.op.Family, sent)
			require.Nil(t, err, "one JSON object, each key once: %s", sent)
			assert.Equal(t, "up", gjson.GetBytes(sent, "model").Str)
			if c.field == "" {
				unchanged, _ := p.Upstream(c.op, "up", 0)
				assert.Equal(t, string(unchanged.Bytes()), string(sent))
				return
			}
			assert.Equal(t, int64(declared), gjson.GetBytes(sent, c.field).Int(), "%s", sent)
			if p.Streamed() {
				assert.True(t, gjson.GetBytes(sent, "stream_options.include_usage").Bool())
			}
			// No cap declared: nothing added.
			plain, _ := p.Upstream(c.op, "up", 0)
			assert.False(t, gjson.GetBytes(plain.Bytes(), c.field).Int() > 0)
		})
	}
}
