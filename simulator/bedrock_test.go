package simulator

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel/bedrock"
	"github.com/switchyard-gw/switchyard/protocols"
)

const (
	simAKID   = "AKIDSIMULATED0001"
	simSecret = "simulated/secret+key0123456789"
	simAPIKey = "ABSKsimulatedbedrockkey01"
	simARN    = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"
)

var bedrockOp = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessages}

func bedrockSim(t *testing.T) string {
	return start(t, Config{APIKey: simAPIKey, BedrockAccessKeyID: simAKID, BedrockSecretKey: simSecret}).URL
}

// bedrockCall sends a Messages body for model through a bedrock channel built from cfg
// (its endpoint defaulted to base) and returns the answer.
func bedrockCall(t *testing.T, cfg bedrock.Config, model string, stream bool) *http.Response {
	t.Helper()
	ch, err := bedrock.New(cfg)
	require.NoError(t, err)
	body := `{"model":` + string(mustJSON(model)) + `,"max_tokens":32,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
		`,"messages":[{"role":"user","content":"hi"}]}`
	h := http.Header{}
	h.Set("Anthropic-Beta", "thinking-token-count-2025")
	req, err := ch.NewRequest(context.Background(), bedrockOp, []byte(body), stream, h)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func signed(base string) bedrock.Config {
	return bedrock.Config{Region: "us-east-1", Endpoint: base, AccessKeyID: simAKID, SecretAccessKey: simSecret}
}

func bedrockError(t *testing.T, resp *http.Response) (string, string) {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	name, _, _ := strings.Cut(resp.Header.Get("x-amzn-ErrorType"), ":")
	return name, gjson.GetBytes(b, "message").String()
}

func TestBedrockAcceptsWhatTheChannelSigns(t *testing.T) {
	base := bedrockSim(t)
	var seenPath string
	for _, model := range []string{"us.anthropic.claude-sonnet-4-20250514-v1:0", simARN} {
		resp := bedrockCall(t, signed(base+"/some+prefix"), model, false)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		assert.Equal(t, "message", gjson.GetBytes(b, "type").String())
		assert.Equal(t, model, gjson.GetBytes(b, "model").String(), "the path's model id is the model")
		assert.Equal(t, ReplyText, gjson.GetBytes(b, "content.0.text").String())
		assert.Positive(t, gjson.GetBytes(b, "usage.input_tokens").Int())
		assert.NotEmpty(t, resp.Header.Get("x-amzn-RequestId"))
		seenPath = resp.Request.URL.EscapedPath()
	}
	assert.Contains(t, seenPath, "inference-profile%2Fus.")

	// A session token is signed too.
	cfg := signed(base)
	cfg.SessionToken = "FwoGZXIvYXdzEXAMPLE"
	assert.Equal(t, http.StatusOK, bedrockCall(t, cfg, "m", false).StatusCode)

	// The API key, unsigned.
	assert.Equal(t, http.StatusOK, bedrockCall(t, bedrock.Config{Region: "us-east-1", Endpoint: base, APIKey: simAPIKey}, "m", false).StatusCode)
}

func TestBedrockRefusesBadSignaturesAndKeys(t *testing.T) {
	base := bedrockSim(t)
	for name, cfg := range map[string]bedrock.Config{
		"wrong secret":  {Region: "us-east-1", Endpoint: base, AccessKeyID: simAKID, SecretAccessKey: "not-the-secret"},
		"wrong key id":  {Region: "us-east-1", Endpoint: base, AccessKeyID: "AKIDOTHER", SecretAccessKey: simSecret},
		"wrong api key": {Region: "us-east-1", Endpoint: base, APIKey: "ABSKnotthekey"},
	} {
		resp := bedrockCall(t, cfg, "m", false)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		exc, msg := bedrockError(t, resp)
		assert.Equal(t, "InvalidSignatureException", exc, name)
		assert.NotEmpty(t, msg, name)
	}

	// A body changed after signing no longer matches the signature.
	ch, err := bedrock.New(signed(base))
	require.NoError(t, err)
	req, err := ch.NewRequest(context.Background(), bedrockOp, []byte(`{"model":"m","max_tokens":1,"messages":[]}`), false, http.Header{})
	require.NoError(t, err)
	body, _ := io.ReadAll(req.Body)
	tampered := strings.Replace(string(body), `"max_tokens":1`, `"max_tokens":9`, 1)
	req.Body = io.NopCloser(strings.NewReader(tampered))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	exc, msg := bedrockError(t, resp)
	assert.Equal(t, "InvalidSignatureException", exc)
	assert.Contains(t, msg, "signature we calculated does not match")

	// So does a header added after signing that the signature names.
	req, err = ch.NewRequest(context.Background(), bedrockOp, []byte(`{"model":"m","max_tokens":1,"messages":[]}`), false, http.Header{})
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/plain")
	resp2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp2.StatusCode)
}

func TestBedrockValidatesTheBody(t *testing.T) {
	base := bedrockSim(t)
	for name, tc := range map[string]struct{ body, want string }{
		"model left in":   {`{"model":"m","anthropic_version":"bedrock-2023-05-31","max_tokens":1}`, "extraneous key [model]"},
		"stream left in":  {`{"stream":true,"anthropic_version":"bedrock-2023-05-31","max_tokens":1}`, "extraneous key [stream]"},
		"no version":      {`{"max_tokens":1}`, "required key [anthropic_version]"},
		"no max_tokens":   {`{"anthropic_version":"bedrock-2023-05-31"}`, "required key [max_tokens]"},
		"first-party ver": {`{"anthropic_version":"2023-06-01","max_tokens":1}`, "anthropic_version"},
	} {
		req, err := http.NewRequest(http.MethodPost, base+"/model/m/invoke", strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+simAPIKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		exc, msg := bedrockError(t, resp)
		resp.Body.Close()
		assert.Equal(t, "ValidationException", exc, name)
		assert.Contains(t, msg, tc.want, name)
	}
}

func TestBedrockThrottlingAndFailures(t *testing.T) {
	base := bedrockSim(t)
	resp := bedrockCall(t, signed(base), "us.anthropic.claude+rate-limit", false)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("retry-after"), "Bedrock does not say when")
	exc, msg := bedrockError(t, resp)
	assert.Equal(t, "ThrottlingException", exc)
	assert.Equal(t, "Too many requests, please wait before trying again.", msg)

	resp = bedrockCall(t, signed(base+"/down+fail-503"), "m", true)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "tokens in the endpoint's path apply")
	exc, _ = bedrockError(t, resp)
	assert.Equal(t, "ServiceUnavailableException", exc)
}

// frames reads a whole Bedrock event stream.
func frames(t *testing.T, r io.Reader) []eventstream.Message {
	t.Helper()
	dec := eventstream.NewDecoder()
	var out []eventstream.Message
	for {
		m, err := dec.Decode(r, nil)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, m.Clone())
	}
}

func header(m eventstream.Message, name string) string {
	if v := m.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

func TestBedrockStreamIsEventStreamOfMessagesEvents(t *testing.T) {
	base := bedrockSim(t)
	resp := bedrockCall(t, signed(base), simARN, true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/vnd.amazon.eventstream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "application/json", resp.Header.Get("X-Amzn-Bedrock-Content-Type"))

	var types []string
	var text string
	var last gjson.Result
	for _, m := range frames(t, resp.Body) {
		require.Equal(t, "event", header(m, ":message-type"))
		require.Equal(t, "chunk", header(m, ":event-type"))
		require.Equal(t, "application/json", header(m, ":content-type"))
		raw, err := base64.StdEncoding.DecodeString(gjson.GetBytes(m.Payload, "bytes").String())
		require.NoError(t, err)
		assert.NotEmpty(t, gjson.GetBytes(m.Payload, "p").String(), "padding beside the bytes")
		last = gjson.ParseBytes(raw)
		types = append(types, last.Get("type").String())
		text += last.Get("delta.text").String()
	}
	assert.Equal(t, "message_start", types[0])
	assert.Equal(t, "message_stop", types[len(types)-1])
	assert.Contains(t, types, "message_delta")
	assert.Equal(t, ReplyText, text)
	assert.Equal(t, int64(10), last.Get("amazon-bedrock-invocationMetrics.outputTokenCount").Int())
	assert.Positive(t, last.Get("amazon-bedrock-invocationMetrics.inputTokenCount").Int())
}

func TestBedrockInbandErrorIsAnExceptionFrame(t *testing.T) {
	base := bedrockSim(t)
	resp := bedrockCall(t, signed(base), "m+inband-error", true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	fs := frames(t, resp.Body)
	require.Len(t, fs, 1)
	assert.Equal(t, "exception", header(fs[0], ":message-type"))
	assert.Equal(t, "modelStreamErrorException", header(fs[0], ":exception-type"))
	assert.Equal(t, int64(529), gjson.GetBytes(fs[0].Payload, "originalStatusCode").Int())
}

var bedrockCountOp = protocols.Operation{Family: protocols.FamilyB, Kind: protocols.KindMessagesCountTokens}

// bedrockCount sends a count_tokens body through a bedrock channel built from cfg and
// returns Bedrock's answer and the InvokeModel body the request carried.
func bedrockCount(t *testing.T, cfg bedrock.Config, body string) (*http.Response, []byte) {
	t.Helper()
	ch, err := bedrock.New(cfg)
	require.NoError(t, err)
	req, err := ch.NewRequest(context.Background(), bedrockCountOp, []byte(body), false, http.Header{})
	require.NoError(t, err)
	sent, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	req.Body = io.NopCloser(strings.NewReader(string(sent)))
	inner, err := base64.StdEncoding.DecodeString(gjson.GetBytes(sent, "input.invokeModel.body").String())
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp, inner
}

func TestBedrockCountTokens(t *testing.T) {
	base := bedrockSim(t)
	const body = `{"model":"us.anthropic.claude-sonnet-4-20250514-v1:0","system":"be brief","messages":[{"role":"user","content":"count me"}]}`
	for name, cfg := range map[string]bedrock.Config{
		"signed":  signed(base + "/some+prefix"),
		"api key": {Region: "us-east-1", Endpoint: base, APIKey: simAPIKey},
	} {
		resp, inner := bedrockCount(t, cfg, body)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, b)
		assert.JSONEq(t, `{"inputTokens":`+strconv.Itoa(tokens(len(inner)))+`}`, string(b), name)
		assert.Equal(t, strconv.Itoa(len(b)), resp.Header.Get("Content-Length"), name)
	}

	// Through the channel's Response, the client gets count_tokens' own answer.
	resp, inner := bedrockCount(t, signed(base), body)
	bedrock.Respond(bedrockCountOp, resp)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"input_tokens":`+strconv.Itoa(tokens(len(inner)))+`}`, string(b))

	// Throttling and failures answer as on invoke.
	resp, _ = bedrockCount(t, signed(base), `{"model":"c+rate-limit","messages":[]}`)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	exc, _ := bedrockError(t, resp)
	assert.Equal(t, "ThrottlingException", exc)
	resp, _ = bedrockCount(t, signed(base+"/down+fail-503"), body)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	// A wrong key is refused before anything is counted.
	resp, _ = bedrockCount(t, bedrock.Config{Region: "us-east-1", Endpoint: base, AccessKeyID: simAKID, SecretAccessKey: "nope"}, body)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestBedrockCountTokensValidatesTheWrappedBody(t *testing.T) {
	base := bedrockSim(t)
	wrap := func(inner string) string {
		return `{"input":{"invokeModel":{"body":"` + base64.StdEncoding.EncodeToString([]byte(inner)) + `"}}}`
	}
	for name, tc := range map[string]struct{ body, want string }{
		"not wrapped":    {`{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}`, "input.invokeModel.body"},
		"not base64":     {`{"input":{"invokeModel":{"body":"{not base64}"}}}`, "base64"},
		"model left in":  {wrap(`{"model":"m","anthropic_version":"bedrock-2023-05-31","max_tokens":1}`), "extraneous key [model]"},
		"no max_tokens":  {wrap(`{"anthropic_version":"bedrock-2023-05-31","messages":[]}`), "required key [max_tokens]"},
		"no version":     {wrap(`{"max_tokens":1,"messages":[]}`), "required key [anthropic_version]"},
		"inner not JSON": {wrap(`hello`), "not a JSON object"},
	} {
		req, err := http.NewRequest(http.MethodPost, base+"/model/m/count-tokens", strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+simAPIKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		exc, msg := bedrockError(t, resp)
		resp.Body.Close()
		assert.Equal(t, "ValidationException", exc, name)
		assert.Contains(t, msg, tc.want, name)
	}
}
