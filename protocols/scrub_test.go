package protocols_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestScrubber(t *testing.T) {
	s := protocols.Scrubber{
		UpstreamModel: "gpt-4o-2024-08-06",
		ServiceModel:  "acme/chat",
		Secrets:       []string{"api.upstream-a.example", "sk-up-9f8e7d6c5b4a", "", "ab"},
	}
	cases := []struct {
		name, in, want string
	}{
		{
			"upstream error body",
			`{"error":{"message":"The model ` + "`gpt-4o-2024-08-06`" + ` does not exist or you do not have access to it. Organization org-7Xq2LmNpQrStUv, project proj_Ab12Cd34Ef.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
			`{"error":{"message":"The model ` + "`acme/chat`" + ` does not exist or you do not have access to it. Organization [redacted], project [redacted].","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
		},
		{
			"host and key",
			`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key sk-up-9f8e7d6c5b4a for https://api.upstream-a.example/v1"}}`,
			`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key [redacted] for https://[redacted]/v1"}}`,
		},
		{
			"short secrets are ignored, nothing else changes",
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded ab"}}`,
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded ab"}}`,
		},
		{
			"words that merely start with org are kept",
			`organization, org-, org_abc, proj-x`,
			`organization, org-, org_abc, proj-x`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			assert.Equal(t, tc.want, string(s.Scrub(in)))
			assert.Equal(t, tc.in, string(in), "input untouched")
		})
	}

	t.Run("service model containing the upstream name", func(t *testing.T) {
		s := protocols.Scrubber{UpstreamModel: "gpt-4o", ServiceModel: "acme/gpt-4o"}
		assert.Equal(t, `model acme/gpt-4o and acme/gpt-4o-mini`, string(s.Scrub([]byte(`model gpt-4o and gpt-4o-mini`))))
	})
	t.Run("same name", func(t *testing.T) {
		s := protocols.Scrubber{UpstreamModel: "m", ServiceModel: "m"}
		assert.Equal(t, `model m`, string(s.Scrub([]byte(`model m`))))
	})
	t.Run("zero scrubber", func(t *testing.T) {
		assert.Equal(t, "plain text", string(protocols.Scrubber{}.Scrub([]byte("plain text"))))
	})
}

// An upstream can echo what it was sent in a header the client may see: the value is
// masked, the header kept; values without a secret are left as they are.
func TestScrubHeaderMasksSecretsInValues(t *testing.T) {
	s := protocols.Scrubber{Secrets: []string{"ya29.tok-123456", "ab"}}
	upstream := http.Header{
		"Cache-Control":  {"no-cache", "private, echo=ya29.tok-123456"},
		"X-Should-Retry": {"true"},
		"Content-Type":   {"application/json"},
	}
	h := http.Header{}
	protocols.CopyResponseHeader(h, upstream)
	s.ScrubHeader(h)
	assert.Equal(t, []string{"no-cache", "private, echo=[redacted]"}, h["Cache-Control"])
	assert.Equal(t, []string{"true"}, h["X-Should-Retry"])
	assert.Equal(t, "private, echo=ya29.tok-123456", upstream["Cache-Control"][1], "the upstream's header is not written to")
}

// A channel's error names the provider's request id (req_vrtx_… names the channel): the
// gateway's id stands in its place, in a body and in an error event alike. Other ids
// and a plain candidate's request_id are left alone.
func TestScrubReplacesAChannelsRequestID(t *testing.T) {
	s := protocols.Scrubber{HideRequestID: true, RequestID: "gw-42"}
	body := `{"type":"error","error":{"type":"invalid_request_error","message":"bad"},"request_id" : "req_vrtx_011CX6s\"Wn"}`
	assert.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"},"request_id":"gw-42"}`, string(s.Scrub([]byte(body))))
	event := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"req_vrtx_9\"}\n\n"
	assert.Equal(t, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"},\"request_id\":\"gw-42\"}\n\n", string(s.Scrub([]byte(event))))
	plain := protocols.Scrubber{RequestID: "gw-42"}
	assert.Equal(t, body, string(plain.Scrub([]byte(body))), "the family's own API's request id is its own to give")
}
