package protocols_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestEventStreamSequence(t *testing.T) {
	s := protocols.NewEventStream(protocols.KindResponses, "acme", false, protocols.Scrubber{})
	assert.Equal(t, int64(-1), s.LastSequence())
	run(s, [][]byte{[]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":41,\"delta\":\"x\"}\n\n")})
	assert.Equal(t, int64(41), s.LastSequence())
	// The gateway's own closing error continues the sequence.
	ev := s.ErrorEvent(protocols.Errorf(protocols.FamilyA, 502, "", "interrupted"))
	assert.Contains(t, string(ev), `"sequence_number":42`)
}

func TestEventStreamResponsesWithoutEventLines(t *testing.T) {
	// Some compatible upstreams send Responses events as data-only frames; the type in the
	// JSON then decides where the model is.
	in := `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-5.1-codex","usage":null}}` + "\n\n" +
		`data: {"type":"response.output_text.delta","sequence_number":1,"delta":"{\"model\":\"gpt-5.1-codex\"}"}` + "\n\n" +
		`data: {"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","model":"gpt-5.1-codex","usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}` + "\n\n"
	want := `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"acme/codex","usage":null}}` + "\n\n" +
		`data: {"type":"response.output_text.delta","sequence_number":1,"delta":"{\"model\":\"gpt-5.1-codex\"}"}` + "\n\n" +
		`data: {"type":"response.completed","sequence_number":2,"response":{"id":"resp_1","model":"acme/codex","usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}` + "\n\n"
	s := protocols.NewEventStream(protocols.KindResponses, "acme/codex", false, protocols.Scrubber{})
	assert.Equal(t, want, string(run(s, [][]byte{[]byte(in)})))
	assert.Equal(t, protocols.Usage{Input: 3, Output: 1}, s.Obs.Usage)
	assert.Equal(t, int64(2), s.LastSequence())
}

func TestValidateResponses(t *testing.T) {
	ok := []string{
		`{"model":"acme-codex","input":"say hi"}`,
		`{"model":"acme-codex","input":"say hi","stream":true}`,
		`{"model":"acme-codex","input":"say hi","background":false}`,
		`{"model":"acme-codex","input":"say hi","background":null,"previous_response_id":null,"conversation":null}`,
		`{"model":"acme-codex","input":"say hi","previous_response_id":""}`,
		`{"model":"acme-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"store":false,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"high","summary":"auto"},"text":{"verbosity":"low"},"prompt_cache_key":"5f0c","client_metadata":{"x":1}}`,
	}
	for _, body := range ok {
		assert.Nil(t, protocols.Validate(opResponses, []byte(body), familyAHeaders), body)
	}
	bad := []struct {
		name, body, param string
	}{
		{"background true", `{"model":"acme-codex","input":"hi","background":true}`, "background"},
		{"previous_response_id", `{"model":"acme-codex","input":"hi","previous_response_id":"resp_68a1f0c2e7b88190"}`, "previous_response_id"},
		{"conversation id string", `{"model":"acme-codex","input":"hi","conversation":"conv_689667905b048191"}`, "conversation"},
		{"conversation object", `{"model":"acme-codex","input":"hi","conversation":{"id":"conv_689667905b048191"}}`, "conversation"},
		{"stream not bool", `{"model":"acme-codex","input":"hi","stream":"yes"}`, "stream"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			e := protocols.Validate(opResponses, []byte(tc.body), familyAHeaders)
			checkInvalid(t, e, protocols.FamilyA, tc.param)
			if tc.param != "stream" {
				// The client is told what to do instead.
				assert.Contains(t, e.Message, "state")
			}
			if tc.param == "previous_response_id" || tc.param == "conversation" {
				assert.Contains(t, e.Message, "send the full")
			}
		})
	}

	// The stateless sub-operations are validated like their parent, except that only the
	// primary operation has a background mode.
	for _, op := range []protocols.Operation{opInputTokens, opCompact} {
		assert.Nil(t, protocols.Validate(op, []byte(`{"model":"acme-codex","input":"hi","background":true}`), familyAHeaders))
		checkInvalid(t, protocols.Validate(op, []byte(`{"model":"acme-codex","input":"hi","previous_response_id":"resp_1"}`), familyAHeaders),
			protocols.FamilyA, "previous_response_id")
		checkInvalid(t, protocols.Validate(op, []byte(`{"model":"acme-codex","input":"hi","conversation":{"id":"conv_1"}}`), familyAHeaders),
			protocols.FamilyA, "conversation")
	}
}

// Streams of one shape relayed at the same time each number the error that ends them
// after their own last event: what a stream remembers is its own, not its shape's.
func TestResponsesStreamsNumberTheirOwnEvents(t *testing.T) {
	delta := func(seq int) [][]byte {
		return [][]byte{fmt.Appendf(nil, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"delta\":\"x\"}\n\n", seq)}
	}
	a := protocols.NewEventStream(protocols.KindResponses, "acme", false, protocols.Scrubber{})
	b := protocols.NewEventStream(protocols.KindResponses, "acme", false, protocols.Scrubber{})
	run(a, delta(7))
	run(b, delta(3))
	run(a, delta(8))
	cut := protocols.Errorf(protocols.FamilyA, 502, "", "interrupted")
	assert.Contains(t, string(a.ErrorEvent(cut)), `"sequence_number":9`)
	assert.Contains(t, string(b.ErrorEvent(cut)), `"sequence_number":4`)
}
