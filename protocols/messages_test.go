package protocols_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

const messagesBody = `{"model":"acme-sonnet","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}`

func TestValidateMessagesVersionHeader(t *testing.T) {
	ok := []http.Header{nativeVersion, specVersion, newSDKVersion,
		{"Anthropic-Version": {"2023-06-01"}, "Family-B-Version": {"2023-06-01"}}}
	for _, h := range ok {
		assert.Nil(t, protocols.Validate(opMessages, []byte(messagesBody), h), "%v", h)
		assert.Nil(t, protocols.Validate(opCountTokens, []byte(`{"model":"acme-sonnet","messages":[{"role":"user","content":"Hello"}]}`), h), "%v", h)
	}

	bad := []struct {
		name string
		h    http.Header
	}{
		{"missing", noVersion},
		{"native header empty", http.Header{"Anthropic-Version": {""}}},
		{"native header not a date", http.Header{"Anthropic-Version": {"latest"}}},
		{"spec header not a date", http.Header{"Family-B-Version": {"v1"}}},
		{"unpadded date", http.Header{"Anthropic-Version": {"2023-6-1"}}},
		{"slashes", http.Header{"Family-B-Version": {"2023/06/01"}}},
		{"month 13", http.Header{"Anthropic-Version": {"2023-13-01"}}},
		{"day 00", http.Header{"Anthropic-Version": {"2023-06-00"}}},
		{"trailing text", http.Header{"Anthropic-Version": {"2023-06-01 "}}},
		// The native header wins when both are sent.
		{"native invalid, spec valid", http.Header{"Anthropic-Version": {"june"}, "Family-B-Version": {"2023-06-01"}}},
	}
	for _, tc := range bad {
		for _, op := range []protocols.Operation{opMessages, opCountTokens} {
			t.Run(tc.name+"/"+op.Kind.String(), func(t *testing.T) {
				e := protocols.Validate(op, []byte(messagesBody), tc.h)
				checkInvalid(t, e, protocols.FamilyB, "")
				assert.Contains(t, e.Message, "anthropic-version")
			})
		}
	}
}

func TestValidateMessages(t *testing.T) {
	ok := []string{
		messagesBody,
		`{"model":"acme-sonnet","max_tokens":1,"messages":[]}`,
		`{"model":"acme-sonnet","max_tokens":64000,"messages":[{"role":"user","content":"Hello"}],"stream":true}`,
		`{"model":"acme-sonnet","max_tokens":64000,"messages":[{"role":"user","content":"Hello"}],"stream":false}`,
		`{"model":"acme-sonnet","max_tokens":2048,"messages":[{"role":"user","content":"Hello"}],"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"model":"acme-sonnet","max_tokens":2048,"messages":[{"role":"user","content":"Hello"}],"thinking":{"type":"enabled","budget_tokens":2047}}`,
		`{"model":"acme-sonnet","max_tokens":2048,"messages":[{"role":"user","content":"Hello"}],"thinking":{"type":"disabled"}}`,
		`{"model":"acme-sonnet","max_tokens":2048,"messages":[{"role":"user","content":"Hello"}],"thinking":{"type":"adaptive","display":"summarized"}}`,
		`{"model":"acme-sonnet","max_tokens":32000,"system":[{"type":"text","text":"You are a coding agent.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}],"tools":[],"metadata":{"user_id":"u_1"},"output_config":{"effort":"high"},"temperature":1}`,
	}
	for _, body := range ok {
		assert.Nil(t, protocols.Validate(opMessages, []byte(body), nativeVersion), body)
	}

	bad := []struct {
		name, body, param string
	}{
		{"messages missing", `{"model":"acme-sonnet","max_tokens":1024}`, "messages"},
		{"messages object", `{"model":"acme-sonnet","max_tokens":1024,"messages":{"role":"user"}}`, "messages"},
		{"max_tokens missing", `{"model":"acme-sonnet","messages":[]}`, "max_tokens"},
		{"max_tokens zero", `{"model":"acme-sonnet","max_tokens":0,"messages":[]}`, "max_tokens"},
		{"max_tokens negative", `{"model":"acme-sonnet","max_tokens":-5,"messages":[]}`, "max_tokens"},
		{"max_tokens float", `{"model":"acme-sonnet","max_tokens":1024.5,"messages":[]}`, "max_tokens"},
		{"max_tokens float with zero fraction", `{"model":"acme-sonnet","max_tokens":1024.0,"messages":[]}`, "max_tokens"},
		{"max_tokens exponent", `{"model":"acme-sonnet","max_tokens":1e3,"messages":[]}`, "max_tokens"},
		{"max_tokens string", `{"model":"acme-sonnet","max_tokens":"1024","messages":[]}`, "max_tokens"},
		{"max_tokens null", `{"model":"acme-sonnet","max_tokens":null,"messages":[]}`, "max_tokens"},
		{"stream string", `{"model":"acme-sonnet","max_tokens":1024,"messages":[],"stream":"true"}`, "stream"},
		{"stream number", `{"model":"acme-sonnet","max_tokens":1024,"messages":[],"stream":0}`, "stream"},
		{"thinking budget missing", `{"model":"acme-sonnet","max_tokens":4096,"messages":[],"thinking":{"type":"enabled"}}`, "thinking.budget_tokens"},
		{"thinking budget below 1024", `{"model":"acme-sonnet","max_tokens":4096,"messages":[],"thinking":{"type":"enabled","budget_tokens":1023}}`, "thinking.budget_tokens"},
		{"thinking budget zero", `{"model":"acme-sonnet","max_tokens":4096,"messages":[],"thinking":{"type":"enabled","budget_tokens":0}}`, "thinking.budget_tokens"},
		{"thinking budget float", `{"model":"acme-sonnet","max_tokens":4096,"messages":[],"thinking":{"type":"enabled","budget_tokens":2048.5}}`, "thinking.budget_tokens"},
		{"thinking budget string", `{"model":"acme-sonnet","max_tokens":4096,"messages":[],"thinking":{"type":"enabled","budget_tokens":"2048"}}`, "thinking.budget_tokens"},
		{"thinking budget equals max_tokens", `{"model":"acme-sonnet","max_tokens":2048,"messages":[],"thinking":{"type":"enabled","budget_tokens":2048}}`, "thinking.budget_tokens"},
		{"thinking budget above max_tokens", `{"model":"acme-sonnet","max_tokens":2048,"messages":[],"thinking":{"type":"enabled","budget_tokens":10000}}`, "thinking.budget_tokens"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			checkInvalid(t, protocols.Validate(opMessages, []byte(tc.body), nativeVersion), protocols.FamilyB, tc.param)
		})
	}

	t.Run("budget message names the cap", func(t *testing.T) {
		e := protocols.Validate(opMessages, []byte(`{"model":"acme-sonnet","max_tokens":2048,"messages":[],"thinking":{"type":"enabled","budget_tokens":4096}}`), nativeVersion)
		require.NotNil(t, e)
		assert.Contains(t, e.Message, "2048")
	})
}

func TestValidateCountTokens(t *testing.T) {
	// Token counting needs no output cap and no thinking budget check.
	ok := []string{
		`{"model":"acme-sonnet","messages":[{"role":"user","content":"Hello"}]}`,
		`{"model":"acme-sonnet","messages":[{"role":"user","content":"Hello"}],"system":"You are terse.","tools":[]}`,
		`{"model":"acme-sonnet","messages":[{"role":"user","content":"Hello"}],"thinking":{"type":"enabled","budget_tokens":2048}}`,
	}
	for _, body := range ok {
		assert.Nil(t, protocols.Validate(opCountTokens, []byte(body), nativeVersion), body)
	}
	checkInvalid(t, protocols.Validate(opCountTokens, []byte(`{"model":"acme-sonnet"}`), nativeVersion), protocols.FamilyB, "messages")
}
