package admission

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
)

// A chat completion with n answers reserves n output caps: the upstream writes and bills
// each of them. The product saturates instead of wrapping into a small ask.
func TestWorstCaseReservesEveryAnswer(t *testing.T) {
	chat := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	p := &Policy{}
	m := Model{ID: "m", MaxOutputTokens: 1000}
	output := func(body string) int64 {
		parsed, err := protocols.ParseRequest(protocols.FamilyA, []byte(body))
		require.Nil(t, err)
		tokens, _ := p.WorstCase(chat, parsed, m)
		if tokens == math.MaxInt64 {
			return tokens
		}
		return tokens - metering.EstimateInputTokens(parsed.Body)
	}
	assert.Equal(t, int64(1000), output(`{"model":"m","messages":[]}`))
	assert.Equal(t, int64(128*1000), output(`{"model":"m","messages":[],"n":128}`))
	assert.Equal(t, int64(3*50), output(`{"model":"m","messages":[],"n":3,"max_tokens":50}`))
	assert.Equal(t, int64(math.MaxInt64), output(`{"model":"m","messages":[],"n":2,"max_completion_tokens":9223372036854775000}`))
}
