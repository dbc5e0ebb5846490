package simulator

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

const azureKey = "azure-sim-key-42"

type azureSeen struct {
	mu    sync.Mutex
	paths []string
}

func startAzure(t *testing.T) (*httptest.Server, *azureSeen) {
	t.Helper()
	seen := &azureSeen{}
	srv := httptest.NewServer(NewAzure(AzureConfig{APIKey: azureKey, Observe: func(r *http.Request, _ []byte) {
		seen.mu.Lock()
		seen.paths = append(seen.paths, r.URL.Path)
		seen.mu.Unlock()
	}}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func readJSON(t *testing.T, resp *http.Response) gjson.Result {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, gjson.ValidBytes(b), "not JSON: %s", b)
	return gjson.ParseBytes(b)
}

const azureChatBody = `{"model":"ignored","messages":[{"role":"user","content":"hi"}]}`

func TestAzureClassicNeedsItsKeyAndVersionAndAnswersAsTheDeployment(t *testing.T) {
	srv, seen := startAzure(t)
	path := "/openai/deployments/gpt4o-prod/chat/completions"
	resp := post(t, context.Background(), srv, path+"?api-version=2024-10-21", azureChatBody, "Authorization", "Bearer "+azureKey)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a bearer key is not Azure's api-key")
	assert.Equal(t, "401", readJSON(t, resp).Get("error.code").Str)

	resp = post(t, context.Background(), srv, path, azureChatBody, "api-key", azureKey)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "no api-version")

	resp = post(t, context.Background(), srv, path+"?api-version=2024-10-21", azureChatBody, "api-key", azureKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got := readJSON(t, resp)
	assert.Equal(t, "gpt4o-prod", got.Get("model").Str, "the deployment is the model")
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").Str)
	assert.True(t, got.Get("prompt_filter_results").IsArray())
	assert.True(t, got.Get("choices.0.content_filter_results").IsObject())
	assert.Equal(t, AzureRegion, resp.Header.Get("x-ms-region"))
	assert.Empty(t, resp.Header.Get("openai-organization"))
	seen.mu.Lock()
	assert.Contains(t, seen.paths, path)
	seen.mu.Unlock()
}

func TestAzureChatStreamsCarryTheFilterChunks(t *testing.T) {
	srv, _ := startAzure(t)
	_, frames := streamCall(t, srv, "/openai/v1/chat/completions",
		`{"model":"dep-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "api-key", azureKey)
	first := frames[0].json()
	assert.Empty(t, first.Get("choices").Array(), "Azure's first chunk has no choices")
	assert.Empty(t, first.Get("id").Str)
	assert.True(t, first.Get("prompt_filter_results").IsArray())
	var text strings.Builder
	async := 0
	for _, f := range frames[1:] {
		if f.data == "[DONE]" {
			continue
		}
		j := f.json()
		if j.Get("id").Str == "" {
			async++
			assert.False(t, j.Get("choices.0.delta").Exists())
			continue
		}
		text.WriteString(j.Get("choices.0.delta.content").Str)
		if len(j.Get("choices").Array()) > 0 {
			assert.True(t, j.Get("choices.0.content_filter_results").IsObject())
		}
	}
	assert.Equal(t, ReplyText, text.String())
	assert.Equal(t, 1, async, "one asynchronous-filter chunk after the finish")
	assert.Equal(t, "[DONE]", frames[len(frames)-1].data)
}

func TestAzureV1ResponsesAndFoundryMessages(t *testing.T) {
	srv, _ := startAzure(t)
	resp, got := jsonCall(t, srv, "/openai/v1/responses", `{"model":"dep-2","input":"hi"}`, "api-key", azureKey)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "dep-2", got.Get("model").Str)

	msg := `{"model":"claude-dep","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	resp = post(t, context.Background(), srv, "/anthropic/v1/messages", msg, "api-key", azureKey, "anthropic-version", "2023-06-01")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "Foundry takes x-api-key")
	assert.Equal(t, "authentication_error", readJSON(t, resp).Get("error.type").Str)
	resp, got = jsonCall(t, srv, "/anthropic/v1/messages", msg, "x-api-key", azureKey, "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "message", got.Get("type").Str)
	assert.Equal(t, ReplyText, got.Get("content.0.text").Str)

	resp = post(t, context.Background(), srv, "/openai/v1/embeddings", `{"model":"x"}`, "api-key", azureKey)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestAzureErrorsAreAzures(t *testing.T) {
	srv, _ := startAzure(t)
	chatAs := func(model string) *http.Response {
		return post(t, context.Background(), srv, "/openai/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, "api-key", azureKey)
	}
	resp := chatAs("dep+rate-limit")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
	e := readJSON(t, resp).Get("error")
	assert.Equal(t, gjson.String, e.Get("code").Type)
	assert.Equal(t, "429", e.Get("code").Str)
	assert.Contains(t, e.Get("message").Str, "Please retry after 2 seconds")
	assert.False(t, e.Get("type").Exists())

	resp = chatAs("dep+rate-limit+retry-after-9s+retry-in-message")
	assert.Empty(t, resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("Retry-After-Ms"))
	assert.Contains(t, readJSON(t, resp).Get("error.message").Str, "Please retry after 9 seconds")

	resp = chatAs("dep+content-policy")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	e = readJSON(t, resp).Get("error")
	assert.Equal(t, "content_filter", e.Get("code").Str)
	assert.Equal(t, "ResponsibleAIPolicyViolation", e.Get("innererror.code").Str)

	resp = chatAs("dep+fail-503")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "503", readJSON(t, resp).Get("error.code").Str)
}
