package bedrock

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newMessages(t *testing.T, endpoint string) *Channel {
	t.Helper()
	c, err := New(Config{Region: "us-east-1", Endpoint: endpoint, AccessKeyID: testAKID, SecretAccessKey: testSK, API: APIMessages})
	require.NoError(t, err)
	return c
}

func TestMessagesAPIKeepsTheAnthropicRequest(t *testing.T) {
	c := newMessages(t, "http://127.0.0.1:1/base/")
	body := `{"model":"` + profileID + `","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := c.NewRequest(context.Background(), messagesOp, []byte(body), true, clientHeader())
	require.NoError(t, err)

	uri, r, sent := wire(t, req)
	assert.Equal(t, "/base/anthropic/v1/messages", uri, "the model stays in the body, not the path")
	assert.JSONEq(t, body, string(sent), "the body goes as the client sent it")
	assert.Equal(t, "text/event-stream", r.Header.Get("Accept"))
	assert.Equal(t, "2023-06-01", r.Header.Get("Anthropic-Version"), "the client's version")
	assert.Equal(t, "interleaved-thinking-2025-05-14,context-1m-2025-08-07,fine-grained-tool-streaming-2025-05-14",
		r.Header.Get("Anthropic-Beta"), "betas stay a header, trimmed")
	for _, gone := range []string{"X-Api-Key", "Traceparent", "X-Forwarded-For", "X-Stainless-Retry-Count", "X-Amzn-Bedrock-Accept"} {
		assert.Empty(t, r.Header.Values(gone), gone)
	}
	auth := r.Header.Get("Authorization")
	assert.True(t, strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+testAKID+"/"), auth)
	assert.Contains(t, auth, "/us-east-1/bedrock/aws4_request")
	assert.Contains(t, auth, "anthropic-beta;anthropic-version", "the headers the endpoint reads are signed")
}

func TestMessagesAPIDefaultsTheVersionAndCountsTokens(t *testing.T) {
	c := newMessages(t, "")
	body := `{"model":"` + profileID + `","messages":[{"role":"user","content":"count me"}]}`
	req, err := c.NewRequest(context.Background(), countOp, []byte(body), true, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "https://bedrock-runtime.us-east-1.amazonaws.com/anthropic/v1/messages/count_tokens", req.URL.String())
	assert.Equal(t, "2023-06-01", req.Header.Get("Anthropic-Version"))
	assert.Equal(t, "application/json", req.Header.Get("Accept"), "count_tokens never streams")
	assert.Empty(t, req.Header.Values("Anthropic-Beta"))
	sent, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.JSONEq(t, body, string(sent), "no InvokeModel wrapping or max_tokens")
}

func TestMessagesAPIOnMantleSignsForMantle(t *testing.T) {
	c := newMessages(t, "https://bedrock-mantle.us-east-1.api.aws")
	req, err := c.NewRequest(context.Background(), messagesOp, []byte(`{"model":"`+profileID+`","max_tokens":1}`), false, http.Header{})
	require.NoError(t, err)
	assert.Contains(t, req.Header.Get("Authorization"), "/us-east-1/bedrock-mantle/aws4_request")
	assert.Equal(t, "application/json", req.Header.Get("Accept"))

	k, err := New(Config{Region: "us-east-1", APIKey: "ABSKexamplekey0123456789", API: APIMessages})
	require.NoError(t, err)
	req, err = k.NewRequest(context.Background(), messagesOp, []byte(`{"model":"`+profileID+`","max_tokens":1}`), false, http.Header{})
	require.NoError(t, err)
	assert.Equal(t, "Bearer ABSKexamplekey0123456789", req.Header.Get("Authorization"))
	assert.Empty(t, req.Header.Get("X-Amz-Date"))
}

func TestMessagesAPIRefusesAnUnknownAPI(t *testing.T) {
	_, err := New(Config{Region: "us-east-1", APIKey: "k", API: "converse"})
	require.Error(t, err)
	assert.Equal(t, "api: must be invoke or messages", err.Error())
}

func TestMessagesAPIAnswersPassAndErrorsAreMapped(t *testing.T) {
	c := newMessages(t, "")
	sse := "event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(sse))}
	c.Response(messagesOp, resp)
	got, _ := io.ReadAll(resp.Body)
	assert.Equal(t, sse, string(got))

	count := `{"input_tokens":12}`
	resp = &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(count))}
	c.Response(countOp, resp)
	got, _ = io.ReadAll(resp.Body)
	assert.Equal(t, count, string(got), "the Messages API's count is Anthropic's already")

	resp = &http.Response{StatusCode: 429, Header: http.Header{"Content-Type": {"application/json"},
		"X-Amzn-Errortype": {"ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"}},
		Body: io.NopCloser(strings.NewReader(`{"message":"Too many requests in us-east-1"}`))}
	c.Response(messagesOp, resp)
	got, _ = io.ReadAll(resp.Body)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Contains(t, string(got), `"type":"rate_limit_error"`)
}
