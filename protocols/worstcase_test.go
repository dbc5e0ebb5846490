package protocols_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// parseValid parses and validates a Family A body, failing the test on a refusal.
func parseValid(t *testing.T, op protocols.Operation, body string) *protocols.ParsedRequest {
	t.Helper()
	p, err := protocols.ParseRequest(op.Family, []byte(body))
	require.Nil(t, err, body)
	require.Nil(t, p.Validate(op, familyAHeaders), body)
	return p
}

// refusal is the error ParseRequest or Validate answers a body with.
func refusal(op protocols.Operation, body string) *protocols.APIError {
	p, err := protocols.ParseRequest(op.Family, []byte(body))
	if err != nil {
		return err
	}
	return p.Validate(op, familyAHeaders)
}

// Every Family A output cap is a positive integer when it is set: lenient upstreams read
// "100000" as 100000, so a cap the gateway cannot read is refused, not skipped.
func TestFamilyAOutputCapsMustBePositiveIntegers(t *testing.T) {
	bad := []string{`"100000"`, `[100000]`, `{"v":1}`, `true`, `1.5`, `100.0`, `1e5`, `0`, `-0`, `-5`}
	for _, c := range []struct {
		op          protocols.Operation
		field, body string
	}{
		{opChat, "max_tokens", `{"model":"m","messages":[],"max_tokens":%s}`},
		{opChat, "max_completion_tokens", `{"model":"m","messages":[],"max_completion_tokens":%s}`},
		{opResponses, "max_output_tokens", `{"model":"m","input":"hi","max_output_tokens":%s}`},
		{opCompact, "max_output_tokens", `{"model":"m","input":[],"max_output_tokens":%s}`},
	} {
		for _, v := range bad {
			body := strings.Replace(c.body, "%s", v, 1)
			t.Run(body, func(t *testing.T) { checkInvalid(t, refusal(c.op, body), protocols.FamilyA, c.field) })
		}
		for v, want := range map[string]int64{`1`: 1, `4096`: 4096, `99999999999999999999`: math.MaxInt64} {
			got, ok := parseValid(t, c.op, strings.Replace(c.body, "%s", v, 1)).OutputCap(c.op)
			assert.True(t, ok, v)
			assert.Equal(t, want, got, v)
		}
		_, ok := parseValid(t, c.op, strings.Replace(c.body, "%s", "null", 1)).OutputCap(c.op)
		assert.False(t, ok, "null sets no cap")
	}
	// A huge cap is still refused against a model's declared one.
	p := parseValid(t, opChat, `{"model":"m","messages":[],"max_tokens":99999999999999999999}`)
	checkInvalid(t, p.CheckOutputCap(opChat, "m", 8192), protocols.FamilyA, "max_tokens")
}

// Go's encoding/json matches a field name under simple Unicode case folding, at any
// length: every key it would read as a field the gateway reads is refused, whatever its
// byte length.
func TestKeysThatFoldToAReadFieldAreRefused(t *testing.T) {
	type readByGo struct {
		N                   int `json:"n"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
		MaxTokens           int `json:"max_tokens"`
		Stream              int `json:"stream"`
	}
	for _, key := range []string{
		"max_completion_token\u017f", // long s (2 bytes) for s: 22 bytes
		"max_completion_to\u212aens", // Kelvin sign (3 bytes) for k
		"MAX_TO\u212aEN\u017f",
		"\u017ftream",
		"N",
		`max_completion_token\u017f`, // the same, escaped in the body
	} {
		body := `{"model":"m","messages":[],"` + key + `":5}`
		var got readByGo
		require.NoError(t, json.Unmarshal([]byte(body), &got), key)
		require.NotEqual(t, readByGo{}, got, "encoding/json reads %q as a field", key)
		_, err := protocols.ParseRequest(protocols.FamilyA, []byte(body))
		require.NotNil(t, err, key)
		assert.Equal(t, 400, err.Status, key)
		assert.Contains(t, err.Message, "case", key)
	}
	// Names that only look alike pass.
	for _, key := range []string{"max_completion_tokens_", "nn", "max_completion_tokenss", "\u017f"} {
		_, err := protocols.ParseRequest(protocols.FamilyA, []byte(`{"model":"m","messages":[],"`+key+`":5}`))
		assert.Nil(t, err, key)
	}
}
