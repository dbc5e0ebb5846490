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

func TestVersionHeader(t *testing.T) {
	assert.Equal(t, "2023-06-01", protocols.VersionHeader(nativeVersion))
	assert.Equal(t, "2026-10-21", protocols.VersionHeader(specVersion))
	assert.Equal(t, "2023-06-01", protocols.VersionHeader(http.Header{"Anthropic-Version": {"2023-06-01"}, "Family-B-Version": {"2026-10-21"}}))
	assert.Equal(t, "", protocols.VersionHeader(noVersion))
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
