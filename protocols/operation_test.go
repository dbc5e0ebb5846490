package protocols_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestClassify(t *testing.T) {
	type want struct {
		known, methodOK bool
		family          protocols.Family
		kind            protocols.Kind
		modelID         string
	}
	a, b := protocols.FamilyA, protocols.FamilyB
	cases := []struct {
		name      string
		method    string
		path      string
		websocket bool
		want      want
	}{
		// Served operations, each with its one right method.
		{"chat", "POST", "/v1/chat/completions", false, want{true, true, a, protocols.KindChat, ""}},
		{"responses", "POST", "/v1/responses", false, want{true, true, a, protocols.KindResponses, ""}},
		{"responses input_tokens", "POST", "/v1/responses/input_tokens", false, want{true, true, a, protocols.KindResponsesInputTokens, ""}},
		{"responses compact", "POST", "/v1/responses/compact", false, want{true, true, a, protocols.KindResponsesCompact, ""}},
		{"messages", "POST", "/v1/messages", false, want{true, true, b, protocols.KindMessages, ""}},
		{"messages count_tokens", "POST", "/v1/messages/count_tokens", false, want{true, true, b, protocols.KindMessagesCountTokens, ""}},
		{"models list", "GET", "/v1/models", false, want{true, true, a, protocols.KindModels, ""}},
		{"models list HEAD", "HEAD", "/v1/models", false, want{true, true, a, protocols.KindModels, ""}},
		{"one model", "GET", "/v1/models/acme-chat", false, want{true, true, a, protocols.KindModels, "acme-chat"}},
		{"one model with a slash in its id", "GET", "/v1/models/acme/chat-large", false, want{true, true, a, protocols.KindModels, "acme/chat-large"}},
		{"one model with two slashes", "GET", "/v1/models/vendor/family/v2", false, want{true, true, a, protocols.KindModels, "vendor/family/v2"}},

		// Only the exact path names an operation: what the gateway classifies is what
		// the upstream is asked for.
		{"chat trailing slash", "POST", "/v1/chat/completions/", false, want{}},
		{"responses trailing slash", "POST", "/v1/responses/", false, want{}},
		{"messages trailing slash", "POST", "/v1/messages/", false, want{}},
		{"count_tokens trailing slash", "POST", "/v1/messages/count_tokens/", false, want{}},
		{"chat with an encoded slash", "POST", "/v1/chat%2Fcompletions", false, want{}},
		{"count_tokens with an encoded slash", "POST", "/v1/messages%2Fcount_tokens", false, want{}},
		{"messages with an encoded letter", "POST", "/v1/m%65ssages", false, want{}},
		{"messages with a dot segment", "POST", "/v1/./messages", false, want{}},
		{"chat with a dot-dot segment", "POST", "/v1/chat/../chat/completions", false, want{}},
		{"messages with a double slash", "POST", "//v1/messages", false, want{}},
		{"models trailing slash", "GET", "/v1/models/", false, want{}},
		{"one model trailing slash", "GET", "/v1/models/acme/chat/", false, want{}},
		{"one model with an escaped slash", "GET", "/v1/models/acme%2Fchat", false, want{true, true, a, protocols.KindModels, "acme/chat"}},

		// Stateful Responses operations: known (answered 501), whatever the method.
		{"retrieve", "GET", "/v1/responses/resp_68a1f0c2e7b88190a3", false, want{true, true, a, protocols.KindStatefulResponses, ""}},
		{"delete", "DELETE", "/v1/responses/resp_68a1f0c2e7b88190a3", false, want{true, true, a, protocols.KindStatefulResponses, ""}},
		{"cancel", "POST", "/v1/responses/resp_68a1f0c2e7b88190a3/cancel", false, want{true, true, a, protocols.KindStatefulResponses, ""}},
		{"input_items", "GET", "/v1/responses/resp_68a1f0c2e7b88190a3/input_items", false, want{true, true, a, protocols.KindStatefulResponses, ""}},
		{"retrieve trailing slash", "GET", "/v1/responses/resp_1/", false, want{}},
		{"compact trailing slash", "POST", "/v1/responses/compact/", false, want{}},
		{"input_tokens with a dot segment", "POST", "/v1/responses/./input_tokens", false, want{}},
		{"responses with an encoded slash", "POST", "/v1/responses/compact%2F", false, want{}},

		// WebSocket upgrade on GET /v1/responses is recognised so it can be refused.
		{"websocket upgrade", "GET", "/v1/responses", true, want{true, true, a, protocols.KindResponsesWebSocket, ""}},
		{"upgrade header on POST is plain responses", "POST", "/v1/responses", true, want{true, true, a, protocols.KindResponses, ""}},

		// Known path, wrong method: the family is still known so 405 uses its envelope.
		{"GET chat", "GET", "/v1/chat/completions", false, want{true, false, a, protocols.KindChat, ""}},
		{"GET responses without upgrade", "GET", "/v1/responses", false, want{true, false, a, protocols.KindResponses, ""}},
		{"PUT responses", "PUT", "/v1/responses", false, want{true, false, a, protocols.KindResponses, ""}},
		{"GET input_tokens", "GET", "/v1/responses/input_tokens", false, want{true, false, a, protocols.KindResponsesInputTokens, ""}},
		{"GET compact", "GET", "/v1/responses/compact", false, want{true, false, a, protocols.KindResponsesCompact, ""}},
		{"GET messages", "GET", "/v1/messages", false, want{true, false, b, protocols.KindMessages, ""}},
		{"GET count_tokens", "GET", "/v1/messages/count_tokens", false, want{true, false, b, protocols.KindMessagesCountTokens, ""}},
		{"POST models", "POST", "/v1/models", false, want{true, false, a, protocols.KindModels, ""}},
		{"DELETE one model", "DELETE", "/v1/models/acme/chat", false, want{true, false, a, protocols.KindModels, "acme/chat"}},

		// Paths the gateway does not serve.
		{"root", "GET", "/", false, want{}},
		{"empty", "GET", "", false, want{}},
		{"v1 alone", "GET", "/v1", false, want{}},
		{"legacy completions", "POST", "/v1/completions", false, want{}},
		{"embeddings", "POST", "/v1/embeddings", false, want{}},
		{"message batches", "POST", "/v1/messages/batches", false, want{}},
		{"below chat", "POST", "/v1/chat/completions/abc", false, want{}},
		{"other version", "POST", "/v2/chat/completions", false, want{}},
		{"no version", "POST", "/chat/completions", false, want{}},
		{"case differs", "POST", "/V1/Chat/Completions", false, want{}},
		{"prefix lookalike", "POST", "/v1/responsesx", false, want{}},
		{"models lookalike", "GET", "/v1/modelsx", false, want{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op, known, methodOK := protocols.Classify(tc.method, tc.path, tc.websocket)
			assert.Equal(t, tc.want.known, known, "known")
			assert.Equal(t, tc.want.methodOK, methodOK, "methodOK")
			if !tc.want.known {
				assert.Equal(t, protocols.KindUnknown, op.Kind)
				return
			}
			assert.Equal(t, tc.want.family, op.Family, "family")
			assert.Equal(t, tc.want.kind, op.Kind, "kind %s", op.Kind)
			assert.Equal(t, tc.want.modelID, op.ModelID, "model id")
		})
	}
}

func TestOperationRoutedAndGenerates(t *testing.T) {
	cases := []struct {
		kind              protocols.Kind
		routed, generates bool
	}{
		{protocols.KindChat, true, true},
		{protocols.KindResponses, true, true},
		{protocols.KindResponsesCompact, true, true},
		{protocols.KindMessages, true, true},
		{protocols.KindResponsesInputTokens, true, false},
		{protocols.KindMessagesCountTokens, true, false},
		{protocols.KindModels, false, false},
		{protocols.KindStatefulResponses, false, false},
		{protocols.KindResponsesWebSocket, false, false},
		{protocols.KindUnknown, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.kind.String(), func(t *testing.T) {
			op := protocols.Operation{Kind: tc.kind}
			assert.Equal(t, tc.routed, op.Routed(), "routed")
			assert.Equal(t, tc.generates, op.Generates(), "generates")
		})
	}
}

func TestUpstreamPath(t *testing.T) {
	// Family A bases end in /v1, Family B bases do not.
	cases := []struct {
		method, path, want string
	}{
		{"POST", "/v1/chat/completions", "/chat/completions"},
		{"POST", "/v1/responses", "/responses"},
		{"POST", "/v1/responses/input_tokens", "/responses/input_tokens"},
		{"POST", "/v1/responses/compact", "/responses/compact"},
		{"POST", "/v1/messages", "/v1/messages"},
		{"POST", "/v1/messages/count_tokens", "/v1/messages/count_tokens"},
	}
	for _, tc := range cases {
		op, known, _ := protocols.Classify(tc.method, tc.path, false)
		assert.True(t, known, tc.path)
		assert.Equal(t, tc.want, op.UpstreamPath(), tc.path)
	}
}

func TestFamilyTokens(t *testing.T) {
	assert.Equal(t, "family_a", protocols.FamilyA.Token())
	assert.Equal(t, "family_b", protocols.FamilyB.Token())
	assert.Equal(t, "family_b", protocols.FamilyB.String())
	assert.Equal(t, "", protocols.Family(0).Token())

	for _, tok := range []string{"family_a", "family_b"} {
		f, ok := protocols.ParseFamily(tok)
		assert.True(t, ok, tok)
		assert.Equal(t, tok, f.Token())
	}
	// Tokens are exact: no case folding, no vendor names.
	for _, tok := range []string{"", "FAMILY_A", "family-a", "openai", "anthropic", "family_c"} {
		_, ok := protocols.ParseFamily(tok)
		assert.False(t, ok, tok)
	}
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "chat.completions", protocols.KindChat.String())
	assert.Equal(t, "messages.count_tokens", protocols.KindMessagesCountTokens.String())
	assert.Equal(t, "responses.websocket", protocols.KindResponsesWebSocket.String())
	assert.Equal(t, "unknown", protocols.Kind(200).String())
}
