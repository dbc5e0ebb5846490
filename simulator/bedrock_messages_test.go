package simulator

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel/bedrock"
	"github.com/switchyard-gw/switchyard/protocols"
)

// messagesRequest builds a request of the bedrock channel with `api messages`.
func messagesRequest(t *testing.T, cfg bedrock.Config, op protocols.Operation, body string, stream bool) *http.Request {
	t.Helper()
	cfg.API = bedrock.APIMessages
	ch, err := bedrock.New(cfg)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("Anthropic-Version", "2023-06-01")
	req, err := ch.NewRequest(context.Background(), op, []byte(body), stream, h)
	require.NoError(t, err)
	return req
}

func doCall(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

const msgModel = "us.anthropic.claude-opus-4-7"

func TestBedrockMessagesAnswersAsTheMessagesAPI(t *testing.T) {
	base := bedrockSim(t)
	plain := `{"model":"` + msgModel + `","max_tokens":32,"messages":[{"role":"user","content":"hi"}]}`
	resp, b := doCall(t, messagesRequest(t, signed(base+"/pre"), bedrockOp, plain, false))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, "/pre/anthropic/v1/messages", resp.Request.URL.Path)
	assert.Equal(t, "message", gjson.GetBytes(b, "type").String())
	assert.Equal(t, msgModel, gjson.GetBytes(b, "model").String())
	assert.Equal(t, ReplyText, gjson.GetBytes(b, "content.0.text").String())
	assert.NotEmpty(t, resp.Header.Get("x-amzn-RequestId"))

	streamed := strings.Replace(plain, `"max_tokens":32`, `"max_tokens":32,"stream":true`, 1)
	resp, b = doCall(t, messagesRequest(t, signed(base), bedrockOp, streamed, true))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"), "SSE, not an AWS event stream")
	assert.True(t, strings.HasPrefix(string(b), "event: message_start\n"), string(b))
	assert.Contains(t, string(b), "event: message_stop\n")

	count := `{"model":"` + msgModel + `","messages":[{"role":"user","content":"count me"}]}`
	resp, b = doCall(t, messagesRequest(t, bedrock.Config{Region: "us-east-1", Endpoint: base, APIKey: simAPIKey}, bedrockCountOp, count, false))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, "/anthropic/v1/messages/count_tokens", resp.Request.URL.Path)
	assert.Positive(t, gjson.GetBytes(b, "input_tokens").Int(), string(b))
	assert.False(t, gjson.GetBytes(b, "inputTokens").Exists())
}

func TestBedrockMessagesChecksTheSignatureAndItsService(t *testing.T) {
	base := bedrockSim(t)
	body := `{"model":"` + msgModel + `","max_tokens":1,"messages":[]}`

	bad := signed(base)
	bad.SecretAccessKey = "not-the-secret"
	resp, b := doCall(t, messagesRequest(t, bad, bedrockOp, body, false))
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("x-amzn-ErrorType"), "InvalidSignatureException:"), string(b))

	// A mantle host wants signatures for bedrock-mantle: the channel signs so for its
	// mantle endpoint, and a runtime signature is refused there.
	mantle := signed("https://bedrock-mantle.us-east-1.api.aws")
	req := messagesRequest(t, mantle, bedrockOp, body, false)
	req.Host = req.URL.Host
	req.URL.Scheme, req.URL.Host = "http", strings.TrimPrefix(base, "http://")
	resp, b = doCall(t, req)
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(b))

	req = messagesRequest(t, signed(base), bedrockOp, body, false)
	req.Host = "bedrock-mantle.us-east-1.api.aws"
	resp, b = doCall(t, req)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, gjson.GetBytes(b, "message").String(), "'bedrock-mantle'")
}

func TestBedrockMessagesRefusesInvokeModelBodies(t *testing.T) {
	base := bedrockSim(t)
	for _, body := range []string{
		`{"model":"m","anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}`,
		`{"model":"m","anthropic_beta":["context-1m-2025-08-07"],"max_tokens":1,"messages":[]}`,
	} {
		resp, b := doCall(t, messagesRequest(t, bedrock.Config{Region: "us-east-1", Endpoint: base, APIKey: simAPIKey}, bedrockOp, body, false))
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
		assert.Equal(t, "invalid_request_error", gjson.GetBytes(b, "error.type").String(), string(b))
		assert.Contains(t, gjson.GetBytes(b, "error.message").String(), "Extra inputs are not permitted")
	}

	req, err := http.NewRequest(http.MethodPost, base+"/anthropic/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+simAPIKey)
	resp, b := doCall(t, req)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(b), "anthropic-version")
}
