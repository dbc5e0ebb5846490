package protocols_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// A request asking for more output than the model's declared cap is refused in its
// family's envelope, naming the field it sent; at or under the cap, or with no cap
// declared, it passes.
func TestCheckOutputCap(t *testing.T) {
	const limit = 8192
	refused := []struct {
		name  string
		op    protocols.Operation
		body  string
		field string
	}{
		{"chat max_completion_tokens", opChat, `{"model":"m","messages":[],"max_completion_tokens":8193}`, "max_completion_tokens"},
		{"chat legacy max_tokens", opChat, `{"model":"m","messages":[],"max_tokens":100000}`, "max_tokens"},
		{"chat fraction above", opChat, `{"model":"m","messages":[],"max_tokens":8192.5}`, "max_tokens"},
		{"chat exponent above", opChat, `{"model":"m","messages":[],"max_completion_tokens":1e6}`, "max_completion_tokens"},
		{"responses max_output_tokens", opResponses, `{"model":"m","input":"hi","max_output_tokens":9000}`, "max_output_tokens"},
		{"compact max_output_tokens", opCompact, `{"model":"m","input":[],"max_output_tokens":9000}`, "max_output_tokens"},
		{"messages max_tokens", opMessages, `{"model":"m","messages":[],"max_tokens":32000}`, "max_tokens"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			p, err := protocols.ParseRequest(c.op.Family, []byte(c.body))
			require.Nil(t, err)
			e := p.CheckOutputCap(c.op, "m", limit)
			checkInvalid(t, e, c.op.Family, c.field)
			assert.Contains(t, e.Message, "8192", "the message names the cap")
			assert.Contains(t, e.Message, "'m'", "the message names the model")
		})
	}

	passed := []struct {
		name string
		op   protocols.Operation
		body string
	}{
		{"chat at the cap", opChat, `{"model":"m","messages":[],"max_completion_tokens":8192}`},
		{"chat without a cap field", opChat, `{"model":"m","messages":[]}`},
		{"responses under", opResponses, `{"model":"m","input":"hi","max_output_tokens":100}`},
		{"messages at the cap", opMessages, `{"model":"m","messages":[],"max_tokens":8192}`},
		// Each operation reads only its own field: these are not output caps there.
		{"responses ignores max_tokens", opResponses, `{"model":"m","input":"hi","max_tokens":99999}`},
		{"messages ignores max_output_tokens", opMessages, `{"model":"m","messages":[],"max_tokens":10,"max_output_tokens":99999}`},
		{"count tokens is no generation", opCountTokens, `{"model":"m","messages":[],"max_tokens":99999}`},
		{"input tokens is no generation", opInputTokens, `{"model":"m","input":"hi","max_output_tokens":99999}`},
		// Not a number: the family's own validation or the upstream answers it.
		{"string value", opChat, `{"model":"m","messages":[],"max_tokens":"99999"}`},
		{"null value", opResponses, `{"model":"m","input":"hi","max_output_tokens":null}`},
	}
	for _, c := range passed {
		t.Run(c.name, func(t *testing.T) {
			p, err := protocols.ParseRequest(c.op.Family, []byte(c.body))
			require.Nil(t, err)
			assert.Nil(t, p.CheckOutputCap(c.op, "m", limit))
		})
	}

	t.Run("no cap declared", func(t *testing.T) {
		p, err := protocols.ParseRequest(protocols.FamilyB, []byte(`{"model":"m","messages":[],"max_tokens":10000000}`))
		require.Nil(t, err)
		assert.Nil(t, p.CheckOutputCap(opMessages, "m", 0))
	})
}

// The new cap fields are read by the gateway, so a key that differs from one of them only
// in case is refused like any other such key: a case-insensitive parser upstream would
// act on the value the gateway did not check.
func TestOutputCapFieldsRefuseCaseVariants(t *testing.T) {
	for _, c := range []struct {
		family protocols.Family
		body   string
		key    string
	}{
		{protocols.FamilyA, `{"model":"m","messages":[],"Max_Completion_Tokens":999999}`, "Max_Completion_Tokens"},
		{protocols.FamilyA, `{"model":"m","input":"hi","MAX_OUTPUT_TOKENS":999999}`, "MAX_OUTPUT_TOKENS"},
	} {
		_, err := protocols.ParseRequest(c.family, []byte(c.body))
		checkInvalid(t, err, c.family, c.key)
	}
}

// Validate refuses two caps that disagree; a body it was not run on reserves the larger,
// which an upstream that prefers either one stays within.
func TestOutputCapIsTheLargestCapTheRequestSets(t *testing.T) {
	chat := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	for _, c := range []struct {
		body string
		want int64
		ok   bool
	}{
		{`{"model":"m","messages":[]}`, 0, false},
		{`{"model":"m","max_tokens":500,"messages":[]}`, 500, true},
		{`{"model":"m","max_tokens":500,"max_completion_tokens":300,"messages":[]}`, 500, true},
		{`{"model":"m","max_completion_tokens":"lots","messages":[]}`, 0, false},
		{`{"model":"m","max_completion_tokens":0.5,"messages":[]}`, 0, false},
	} {
		p, apiErr := protocols.ParseRequest(protocols.FamilyA, []byte(c.body))
		require.Nil(t, apiErr)
		got, ok := p.OutputCap(chat)
		assert.Equal(t, c.ok, ok, c.body)
		assert.Equal(t, c.want, got, c.body)
	}
	p, _ := protocols.ParseRequest(protocols.FamilyB, []byte(`{"model":"m","max_tokens":64,"messages":[]}`))
	got, ok := p.OutputCap(protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages})
	assert.True(t, ok)
	assert.Equal(t, int64(64), got)
	p, _ = protocols.ParseRequest(protocols.FamilyA, []byte(`{"model":"m","max_output_tokens":77,"input":"x"}`))
	got, _ = p.OutputCap(protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses})
	assert.Equal(t, int64(77), got)
}

// A cap beyond what an int64 holds asks for more than anything: it must not read as no
// cap (which reserves only a default) or wrap into a negative one.
func TestOutputCapBeyondInt64IsTheLargest(t *testing.T) {
	chat := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	for _, cap := range []string{"9223372036854775807", "9223372036854775808", "1e30", "1e400"} {
		p, apiErr := protocols.ParseRequest(protocols.FamilyA, []byte(`{"model":"m","max_tokens":`+cap+`,"messages":[]}`))
		require.Nil(t, apiErr)
		got, ok := p.OutputCap(chat)
		assert.True(t, ok, cap)
		assert.Equal(t, int64(math.MaxInt64), got, cap)
	}
}
