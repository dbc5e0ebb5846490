package protocols_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

var (
	opChat         = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindChat}
	opResponses    = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses}
	opInputTokens  = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponsesInputTokens}
	opCompact      = protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponsesCompact}
	opMessages     = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}
	opCountTokens  = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}
	nativeVersion  = http.Header{"Anthropic-Version": {"2023-06-01"}}
	specVersion    = http.Header{"Family-B-Version": {"2026-10-21"}}
	noVersion      = http.Header{"Content-Type": {"application/json"}}
	newSDKVersion  = http.Header{"Anthropic-Version": {"2026-10-21"}, "Anthropic-Beta": {"interleaved-thinking-2025-05-14"}}
	familyAHeaders = http.Header{"Content-Type": {"application/json"}}
)

// checkInvalid asserts a 400 in the family's envelope that names the field.
func checkInvalid(t *testing.T, e *protocols.APIError, family protocols.Family, param string) {
	t.Helper()
	require.NotNil(t, e, "want a 400 naming %q", param)
	assert.Equal(t, family, e.Family, "family")
	assert.Equal(t, http.StatusBadRequest, e.Status, "status")
	assert.Equal(t, param, e.Param, "param")
	if param != "" {
		assert.Contains(t, e.Message, param, "the message names the field")
	}
	body := string(e.Body(""))
	assert.Contains(t, body, `"invalid_request_error"`)
	if family == protocols.FamilyB {
		assert.True(t, strings.HasPrefix(body, `{"type":"error","error":{`), body)
	} else if param != "" {
		assert.Contains(t, body, `"param":"`+param+`"`)
	}
}

func TestRequestModel(t *testing.T) {
	ok := []struct {
		name, body, want string
	}{
		{"js sdk order", `{"model":"acme/chat","messages":[{"role":"user","content":"hi"}]}`, "acme/chat"},
		{"python sdk order", `{"messages":[{"role":"user","content":"hi"}],"model":"acme-chat","stream":true}`, "acme-chat"},
		{"pretty printed with leading whitespace", "\n\t {\n  \"model\" : \"Acme-Chat\"\n}\n", "Acme-Chat"},
		{"nested model keys do not count", `{"metadata":{"model":"x"},"model":"real","tools":[{"model":"y"}]}`, "real"},
		{"model text inside a message does not count", `{"messages":[{"role":"user","content":"{\"model\":\"fake\"}"}],"model":"real"}`, "real"},
		{"unicode model id", `{"model":"modèle-\u00e9"}`, "modèle-é"},
		{"escaped slash in the id", `{"model":"acme\/chat"}`, "acme/chat"},
	}
	for _, family := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		for _, tc := range ok {
			t.Run(family.Token()+"/"+tc.name, func(t *testing.T) {
				got, err := protocols.RequestModel(family, []byte(tc.body))
				require.Nil(t, err)
				assert.Equal(t, tc.want, got)
			})
		}
	}

	bad := []struct {
		name, body, param string
	}{
		{"empty body", ``, ""},
		{"whitespace only", " \n", ""},
		{"not JSON", `model=acme-chat`, ""},
		{"truncated JSON", `{"model":"acme-chat","messages":[`, ""},
		{"trailing garbage", `{"model":"acme-chat"} {"model":"other"}`, ""},
		{"JSON array", `[{"model":"acme-chat"}]`, ""},
		{"JSON string", `"acme-chat"`, ""},
		{"JSON null", `null`, ""},
		{"missing model", `{"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{"model only nested", `{"metadata":{"model":"acme-chat"}}`, "model"},
		{"model null", `{"model":null}`, "model"},
		{"model number", `{"model":4}`, "model"},
		{"model empty string", `{"model":""}`, "model"},
		{"model object", `{"model":{"id":"acme-chat"}}`, "model"},
		{"model array", `{"model":["acme-chat"]}`, "model"},
		{"model bool", `{"model":true}`, "model"},
		// Upstreams (like most JSON decoders) keep the last of duplicate keys; routing on
		// the first one would let a client pick any upstream model behind the mapping.
		{"model twice", `{"model":"acme-chat","messages":[],"model":"gpt-4o"}`, "model"},
		{"model twice, second escaped", `{"model":"acme-chat","mod\u0065l":"gpt-4o"}`, "model"},
	}
	for _, family := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		for _, tc := range bad {
			t.Run(family.Token()+"/"+tc.name, func(t *testing.T) {
				got, err := protocols.RequestModel(family, []byte(tc.body))
				assert.Empty(t, got)
				checkInvalid(t, err, family, tc.param)
			})
		}
	}
}

func TestValidateChat(t *testing.T) {
	ok := []string{
		`{"model":"acme-chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"acme-chat","messages":[]}`,
		`{"model":"acme-chat","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"acme-chat","messages":[{"role":"user","content":"hi"}],"stream":false}`,
		`{"model":"acme-chat","messages":[{"role":"user","content":"hi"}],"stream_options":null}`,
		`{"model":"acme-chat","messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high","verbosity":"low","max_completion_tokens":4000}`,
	}
	for _, body := range ok {
		assert.Nil(t, protocols.Validate(opChat, []byte(body), familyAHeaders), body)
	}
	bad := []struct {
		name, body, param string
	}{
		{"messages missing", `{"model":"acme-chat"}`, "messages"},
		{"messages null", `{"model":"acme-chat","messages":null}`, "messages"},
		{"messages object", `{"model":"acme-chat","messages":{"role":"user"}}`, "messages"},
		{"messages string", `{"model":"acme-chat","messages":"hi"}`, "messages"},
		{"stream string", `{"model":"acme-chat","messages":[],"stream":"true"}`, "stream"},
		{"stream number", `{"model":"acme-chat","messages":[],"stream":1}`, "stream"},
		{"stream null", `{"model":"acme-chat","messages":[],"stream":null}`, "stream"},
		{"stream_options string", `{"model":"acme-chat","messages":[],"stream":true,"stream_options":"include_usage"}`, "stream_options"},
		{"stream_options array", `{"model":"acme-chat","messages":[],"stream":true,"stream_options":[]}`, "stream_options"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			checkInvalid(t, protocols.Validate(opChat, []byte(tc.body), familyAHeaders), protocols.FamilyA, tc.param)
		})
	}
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

func TestVersionHeader(t *testing.T) {
	assert.Equal(t, "2023-06-01", protocols.VersionHeader(nativeVersion))
	assert.Equal(t, "2026-10-21", protocols.VersionHeader(specVersion))
	assert.Equal(t, "2023-06-01", protocols.VersionHeader(http.Header{"Anthropic-Version": {"2023-06-01"}, "Family-B-Version": {"2026-10-21"}}))
	assert.Equal(t, "", protocols.VersionHeader(noVersion))
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

func TestValidateRejectsNonObjectBodies(t *testing.T) {
	for _, op := range []protocols.Operation{opChat, opResponses, opMessages, opCountTokens} {
		checkInvalid(t, protocols.Validate(op, []byte(`[1,2]`), nativeVersion), op.Family, "")
	}
	// The request rewrite leaves a body it cannot read untouched.
	out, injected := protocols.PrepareRequestBody(opChat, []byte(`not json`), "up")
	assert.Equal(t, "not json", string(out))
	assert.False(t, injected)
}
