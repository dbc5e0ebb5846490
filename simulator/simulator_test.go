package simulator

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// anthropicVersion is the header every Messages request in these tests carries.
var anthropicVersion = []string{"anthropic-version", "2023-06-01"}

func start(t *testing.T, cfg Config) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(cfg))
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to srv+path with header name/value pairs.
func post(t *testing.T, ctx context.Context, srv *httptest.Server, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// jsonCall posts and returns the status and parsed JSON body.
func jsonCall(t *testing.T, srv *httptest.Server, path, body string, header ...string) (*http.Response, gjson.Result) {
	t.Helper()
	resp := post(t, context.Background(), srv, path, body, header...)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, gjson.ValidBytes(b), "body is not JSON: %s", b)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	return resp, gjson.ParseBytes(b)
}

type frame struct {
	event string // "" for a data-only frame
	data  string
}

func (f frame) json() gjson.Result { return gjson.Parse(f.data) }

// nextFrame reads one SSE frame.
func nextFrame(br *bufio.Reader) (frame, error) {
	var f frame
	seen := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && seen {
				return f, io.ErrUnexpectedEOF
			}
			return f, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && seen:
			return f, nil
		case line == "":
		case strings.HasPrefix(line, "event: "):
			f.event, seen = line[len("event: "):], true
		case strings.HasPrefix(line, "data: "):
			f.data, seen = line[len("data: "):], true
		default:
			return f, errors.New("unexpected SSE line: " + line)
		}
	}
}

// readFrames reads frames until the stream ends; err is nil on a clean end.
func readFrames(body io.Reader) ([]frame, error) {
	br := bufio.NewReader(body)
	var frames []frame
	for {
		f, err := nextFrame(br)
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, f)
	}
}

// streamCall posts a stream request and returns its complete, cleanly ended frames.
func streamCall(t *testing.T, srv *httptest.Server, path, body string, header ...string) (*http.Response, []frame) {
	t.Helper()
	resp := post(t, context.Background(), srv, path, body, header...)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	frames, err := readFrames(resp.Body)
	require.NoError(t, err)
	require.NotEmpty(t, frames)
	return resp, frames
}

func eventNames(frames []frame) []string {
	var names []string
	for _, f := range frames {
		names = append(names, f.event)
	}
	return names
}

// squash collapses runs of one repeated name, so event orders read like their grammar.
func squash(names []string) []string {
	var out []string
	for _, n := range names {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

func inTokens(body string) int64 { return int64(len(body)/4 + 1) }

var replyTokens = int64(len(ReplyText)/4 + 1)

func assertLeakyHeaders(t *testing.T, h http.Header) {
	t.Helper()
	assert.Equal(t, "org-simsecret42", h.Get("openai-organization"))
	assert.Equal(t, "proj_simsecret42", h.Get("openai-project"))
	assert.Equal(t, "99", h.Get("x-ratelimit-remaining-requests"))
	assert.Equal(t, "5im-0rg-5ecret", h.Get("anthropic-organization-id"))
	assert.Equal(t, "99", h.Get("anthropic-ratelimit-requests-remaining"))
	assert.Equal(t, "sim=1", h.Get("set-cookie"))
}

// ---- Chat Completions ----

func TestChatJSON(t *testing.T) {
	srv := start(t, Config{})
	body := `{"model":"sim-basic","messages":[{"role":"user","content":"hi"}]}`
	resp, got := jsonCall(t, srv, "/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assertLeakyHeaders(t, resp.Header)
	assert.True(t, strings.HasPrefix(resp.Header.Get("x-request-id"), "req_"))
	assert.Empty(t, resp.Header.Get("request-id"))

	assert.Equal(t, "chat.completion", got.Get("object").String())
	assert.Equal(t, "sim-basic", got.Get("model").String())
	assert.Equal(t, "assistant", got.Get("choices.0.message.role").String())
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
	assert.Equal(t, "stop", got.Get("choices.0.finish_reason").String())
	u := got.Get("usage")
	assert.Equal(t, inTokens(body), u.Get("prompt_tokens").Int())
	assert.Equal(t, replyTokens, u.Get("completion_tokens").Int())
	assert.Equal(t, inTokens(body)+replyTokens, u.Get("total_tokens").Int())
	assert.True(t, u.Get("prompt_tokens_details.cached_tokens").Exists())
	assert.Equal(t, int64(0), u.Get("completion_tokens_details.reasoning_tokens").Int())
}

func TestChatStream(t *testing.T) {
	srv := start(t, Config{})
	for _, includeUsage := range []bool{false, true} {
		t.Run(map[bool]string{false: "no usage", true: "include_usage"}[includeUsage], func(t *testing.T) {
			body := `{"model":"gpt-upstream-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if includeUsage {
				body = `{"model":"gpt-upstream-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			resp, frames := streamCall(t, srv, "/v1/chat/completions", body)
			assertLeakyHeaders(t, resp.Header)

			require.Equal(t, "[DONE]", frames[len(frames)-1].data)
			chunks := frames[:len(frames)-1]
			var text strings.Builder
			id := chunks[0].json().Get("id").String()
			for i, f := range chunks {
				assert.Empty(t, f.event, "chat frames are data-only")
				c := f.json()
				assert.Equal(t, "chat.completion.chunk", c.Get("object").String())
				assert.Equal(t, "gpt-upstream-x", c.Get("model").String())
				assert.Equal(t, id, c.Get("id").String())
				if includeUsage && i < len(chunks)-1 {
					assert.True(t, c.Get("usage").Exists() && c.Get("usage").Type == gjson.Null, "chunk %d: usage must be null", i)
				}
				if !includeUsage {
					assert.False(t, c.Get("usage").Exists(), "chunk %d: no usage without include_usage", i)
				}
				text.WriteString(c.Get("choices.0.delta.content").String())
			}
			assert.Equal(t, "assistant", chunks[0].json().Get("choices.0.delta.role").String())
			assert.Equal(t, ReplyText, text.String())
			assert.Greater(t, len(chunks), 3, "the text comes in several deltas")

			finish := chunks[len(chunks)-1]
			if includeUsage {
				usage := finish.json()
				finish = chunks[len(chunks)-2]
				assert.Equal(t, "[]", usage.Get("choices").Raw)
				assert.Equal(t, inTokens(body), usage.Get("usage.prompt_tokens").Int())
				assert.Equal(t, replyTokens, usage.Get("usage.completion_tokens").Int())
				assert.Equal(t, inTokens(body)+replyTokens, usage.Get("usage.total_tokens").Int())
			}
			assert.Equal(t, "stop", finish.json().Get("choices.0.finish_reason").String())
		})
	}
}

func TestChatReasoningTokens(t *testing.T) {
	srv := start(t, Config{})
	_, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"o","reasoning_effort":"low","messages":[]}`)
	r := got.Get("usage.completion_tokens_details.reasoning_tokens").Int()
	assert.Equal(t, int64(reasoningTokens), r)
	assert.Equal(t, replyTokens+r, got.Get("usage.completion_tokens").Int(), "reasoning is inside completion_tokens")

	_, got = jsonCall(t, srv, "/v1/chat/completions", `{"model":"o","reasoning_effort":"none","messages":[]}`)
	assert.Equal(t, int64(0), got.Get("usage.completion_tokens_details.reasoning_tokens").Int())
	assert.Equal(t, replyTokens, got.Get("usage.completion_tokens").Int())
}

// ---- Responses ----

func TestResponsesJSON(t *testing.T) {
	srv := start(t, Config{})
	body := `{"model":"sim-r","input":"hi","instructions":"be brief","store":false}`
	resp, got := jsonCall(t, srv, "/v1/responses", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assertLeakyHeaders(t, resp.Header)
	assert.NotEmpty(t, resp.Header.Get("x-request-id"))

	assert.Equal(t, "response", got.Get("object").String())
	assert.Equal(t, "completed", got.Get("status").String())
	assert.Equal(t, "sim-r", got.Get("model").String())
	assert.Equal(t, "be brief", got.Get("instructions").String())
	assert.False(t, got.Get("store").Bool())
	require.Len(t, got.Get("output").Array(), 1)
	assert.Equal(t, "message", got.Get("output.0.type").String())
	assert.Equal(t, ReplyText, got.Get("output.0.content.0.text").String())
	u := got.Get("usage")
	assert.Equal(t, inTokens(body), u.Get("input_tokens").Int())
	assert.True(t, u.Get("input_tokens_details.cached_tokens").Exists())
	assert.Equal(t, replyTokens, u.Get("output_tokens").Int())
	assert.Equal(t, int64(0), u.Get("output_tokens_details.reasoning_tokens").Int())
	assert.Equal(t, inTokens(body)+replyTokens, u.Get("total_tokens").Int())
}

// checkResponsesFrames checks what every Responses stream shares: named events matching
// their type, sequence numbers counting from 0, the model echo, usage only at the end.
func checkResponsesFrames(t *testing.T, frames []frame, model string) gjson.Result {
	t.Helper()
	for i, f := range frames {
		d := f.json()
		assert.Equal(t, f.event, d.Get("type").String(), "frame %d", i)
		assert.Equal(t, int64(i), d.Get("sequence_number").Int(), "frame %d", i)
		assert.NotEqual(t, "[DONE]", f.data)
		if r := d.Get("response"); r.Exists() {
			assert.Equal(t, model, r.Get("model").String(), "frame %d", i)
			if f.event != "response.completed" {
				assert.Equal(t, gjson.Null, r.Get("usage").Type, "frame %d", i)
			}
		}
	}
	last := frames[len(frames)-1]
	require.Equal(t, "response.completed", last.event)
	return last.json().Get("response")
}

func TestResponsesStream(t *testing.T) {
	srv := start(t, Config{})
	body := `{"model":"sim-r","input":"hi","stream":true}`
	resp, frames := streamCall(t, srv, "/v1/responses", body)
	assertLeakyHeaders(t, resp.Header)
	assert.Equal(t, []string{
		"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed",
	}, squash(eventNames(frames)))
	final := checkResponsesFrames(t, frames, "sim-r")

	var text strings.Builder
	deltas := 0
	for _, f := range frames {
		if f.event == "response.output_text.delta" {
			deltas++
			text.WriteString(f.json().Get("delta").String())
		}
	}
	assert.Greater(t, deltas, 1)
	assert.Equal(t, ReplyText, text.String())
	assert.Equal(t, "completed", final.Get("status").String())
	assert.Equal(t, ReplyText, final.Get("output.0.content.0.text").String())
	assert.Equal(t, inTokens(body), final.Get("usage.input_tokens").Int())
	assert.Equal(t, replyTokens, final.Get("usage.output_tokens").Int())
}

func TestResponsesReasoning(t *testing.T) {
	srv := start(t, Config{})

	t.Run("stream with summary and encrypted content", func(t *testing.T) {
		body := `{"model":"codex-up","input":"hi","stream":true,"store":false,` +
			`"reasoning":{"effort":"low","summary":"auto"},"include":["reasoning.encrypted_content"]}`
		_, frames := streamCall(t, srv, "/v1/responses", body)
		assert.Equal(t, []string{
			"response.created", "response.in_progress",
			"response.output_item.added", "response.reasoning_summary_part.added",
			"response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
			"response.reasoning_summary_part.done", "response.output_item.done",
			"response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.done", "response.content_part.done",
			"response.output_item.done", "response.completed",
		}, squash(eventNames(frames)))
		final := checkResponsesFrames(t, frames, "codex-up")
		assert.Equal(t, "reasoning", frames[2].json().Get("item.type").String())

		rs := final.Get("output.0")
		assert.Equal(t, "reasoning", rs.Get("type").String())
		assert.Equal(t, reasoningSummary, rs.Get("summary.0.text").String())
		assert.NotEmpty(t, rs.Get("encrypted_content").String())
		assert.Equal(t, ReplyText, final.Get("output.1.content.0.text").String())
		r := final.Get("usage.output_tokens_details.reasoning_tokens").Int()
		assert.Equal(t, int64(reasoningTokens), r)
		assert.Equal(t, replyTokens+r, final.Get("usage.output_tokens").Int())
	})

	t.Run("json without summary", func(t *testing.T) {
		_, got := jsonCall(t, srv, "/v1/responses", `{"model":"m","input":"hi","reasoning":{"effort":"high"}}`)
		assert.Equal(t, "reasoning", got.Get("output.0.type").String())
		assert.Equal(t, "[]", got.Get("output.0.summary").Raw)
		assert.False(t, got.Get("output.0.encrypted_content").Exists())
		assert.Equal(t, int64(reasoningTokens), got.Get("usage.output_tokens_details.reasoning_tokens").Int())
	})

	t.Run("effort none", func(t *testing.T) {
		_, got := jsonCall(t, srv, "/v1/responses", `{"model":"m","input":"hi","reasoning":{"effort":"none"}}`)
		assert.Equal(t, "message", got.Get("output.0.type").String())
		assert.Equal(t, int64(0), got.Get("usage.output_tokens_details.reasoning_tokens").Int())
	})
}

// ---- Messages ----

func TestMessagesJSON(t *testing.T) {
	srv := start(t, Config{})
	body := `{"model":"claude-up","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	resp, got := jsonCall(t, srv, "/v1/messages?beta=true", body, anthropicVersion...)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assertLeakyHeaders(t, resp.Header)
	assert.True(t, strings.HasPrefix(resp.Header.Get("request-id"), "req_"))
	assert.Empty(t, resp.Header.Get("x-request-id"))

	assert.Equal(t, "message", got.Get("type").String())
	assert.Equal(t, "assistant", got.Get("role").String())
	assert.Equal(t, "claude-up", got.Get("model").String())
	assert.Equal(t, "end_turn", got.Get("stop_reason").String())
	require.Len(t, got.Get("content").Array(), 1)
	assert.Equal(t, "text", got.Get("content.0.type").String())
	assert.Equal(t, ReplyText, got.Get("content.0.text").String())
	u := got.Get("usage")
	assert.Equal(t, inTokens(body), u.Get("input_tokens").Int())
	assert.Equal(t, replyTokens, u.Get("output_tokens").Int())
	assert.True(t, u.Get("cache_read_input_tokens").Exists())
	assert.True(t, u.Get("cache_creation_input_tokens").Exists())
	assert.False(t, u.Get("output_tokens_details").Exists())
}

// checkMessagesFrames checks what every Messages stream shares and returns message_start's
// message and message_delta's usage.
func checkMessagesFrames(t *testing.T, frames []frame, model string) (start, finalUsage gjson.Result) {
	t.Helper()
	for i, f := range frames {
		require.NotEmpty(t, f.event, "frame %d has no event line", i)
		assert.Equal(t, f.event, f.json().Get("type").String(), "frame %d", i)
	}
	require.Equal(t, "message_start", frames[0].event)
	require.Equal(t, "message_stop", frames[len(frames)-1].event)
	require.Equal(t, "message_delta", frames[len(frames)-2].event)
	start = frames[0].json().Get("message")
	assert.Equal(t, model, start.Get("model").String())
	assert.Equal(t, "[]", start.Get("content").Raw)
	assert.Equal(t, gjson.Null, start.Get("stop_reason").Type)
	return start, frames[len(frames)-2].json().Get("usage")
}

func TestMessagesStream(t *testing.T) {
	srv := start(t, Config{})
	body := `{"model":"claude-up","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	resp, frames := streamCall(t, srv, "/v1/messages", body, anthropicVersion...)
	assertLeakyHeaders(t, resp.Header)
	assert.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, squash(eventNames(frames)))
	start, usage := checkMessagesFrames(t, frames, "claude-up")

	assert.Equal(t, inTokens(body), start.Get("usage.input_tokens").Int())
	assert.Less(t, start.Get("usage.output_tokens").Int(), replyTokens)
	assert.True(t, start.Get("usage.cache_read_input_tokens").Exists())
	assert.Equal(t, replyTokens, usage.Get("output_tokens").Int())
	assert.Equal(t, "end_turn", frames[len(frames)-2].json().Get("delta.stop_reason").String())

	var text strings.Builder
	for _, f := range frames {
		if f.event == "content_block_delta" {
			d := f.json()
			assert.Equal(t, "text_delta", d.Get("delta.type").String())
			text.WriteString(d.Get("delta.text").String())
		}
	}
	assert.Equal(t, ReplyText, text.String())
}

func TestMessagesThinking(t *testing.T) {
	srv := start(t, Config{})
	countBeta := []string{"anthropic-beta", "claude-code-20250219,thinking-token-count-2026-05-13"}

	t.Run("stream enabled with token-count beta", func(t *testing.T) {
		body := `{"model":"c","max_tokens":4096,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[]}`
		_, frames := streamCall(t, srv, "/v1/messages", body, append(anthropicVersion, countBeta...)...)
		_, usage := checkMessagesFrames(t, frames, "c")
		assert.Equal(t, "thinking", frames[2].json().Get("content_block.type").String())
		var thinking, signature string
		textBlock := int64(-1)
		for _, f := range frames {
			d := f.json()
			switch d.Get("delta.type").String() {
			case "thinking_delta":
				assert.Equal(t, int64(0), d.Get("index").Int())
				thinking += d.Get("delta.thinking").String()
			case "signature_delta":
				signature = d.Get("delta.signature").String()
			case "text_delta":
				textBlock = d.Get("index").Int()
			}
		}
		assert.Equal(t, thinkingText, thinking)
		assert.NotEmpty(t, signature)
		assert.Equal(t, int64(1), textBlock)
		assert.Equal(t, replyTokens+reasoningTokens, usage.Get("output_tokens").Int())
		assert.Equal(t, int64(reasoningTokens), usage.Get("output_tokens_details.thinking_tokens").Int())
	})

	t.Run("json adaptive without beta", func(t *testing.T) {
		_, got := jsonCall(t, srv, "/v1/messages", `{"model":"c","max_tokens":4096,"thinking":{"type":"adaptive"},"messages":[]}`,
			anthropicVersion...)
		assert.Equal(t, "thinking", got.Get("content.0.type").String())
		assert.Equal(t, thinkingText, got.Get("content.0.thinking").String())
		assert.NotEmpty(t, got.Get("content.0.signature").String())
		assert.Equal(t, ReplyText, got.Get("content.1.text").String())
		assert.Equal(t, replyTokens+reasoningTokens, got.Get("usage.output_tokens").Int())
		assert.False(t, got.Get("usage.output_tokens_details").Exists())
	})

	t.Run("display omitted", func(t *testing.T) {
		_, got := jsonCall(t, srv, "/v1/messages", `{"model":"c","max_tokens":4096,"thinking":{"type":"adaptive","display":"omitted"},"messages":[]}`,
			anthropicVersion...)
		assert.Equal(t, "thinking", got.Get("content.0.type").String())
		assert.Equal(t, "", got.Get("content.0.thinking").String())
		assert.NotEmpty(t, got.Get("content.0.signature").String())
	})

	t.Run("disabled", func(t *testing.T) {
		_, got := jsonCall(t, srv, "/v1/messages", `{"model":"c","max_tokens":10,"thinking":{"type":"disabled"},"messages":[]}`,
			append(anthropicVersion, countBeta...)...)
		assert.Equal(t, "text", got.Get("content.0.type").String())
		assert.Equal(t, replyTokens, got.Get("usage.output_tokens").Int())
		assert.Equal(t, int64(0), got.Get("usage.output_tokens_details.thinking_tokens").Int())
	})
}

// ---- Side endpoints ----

func TestSideEndpoints(t *testing.T) {
	srv := start(t, Config{})

	body := `{"model":"c","messages":[{"role":"user","content":"hi"}]}`
	resp, got := jsonCall(t, srv, "/v1/messages/count_tokens", body, anthropicVersion...)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"input_tokens":`+got.Get("input_tokens").Raw+`}`, got.Raw, "count_tokens has only input_tokens")
	assert.Equal(t, inTokens(body), got.Get("input_tokens").Int())
	assert.NotEmpty(t, resp.Header.Get("request-id"))

	body = `{"model":"m","input":"hi"}`
	resp, got = jsonCall(t, srv, "/v1/responses/input_tokens", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "response.input_tokens", got.Get("object").String())
	assert.Equal(t, inTokens(body), got.Get("input_tokens").Int())

	body = `{"model":"m","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":"yo"}]}`
	resp, got = jsonCall(t, srv, "/v1/responses/compact", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "response.compaction", got.Get("object").String())
	assert.NotEmpty(t, got.Get("id").String())
	assert.Greater(t, got.Get("created_at").Int(), int64(0))
	out := got.Get("output").Array()
	require.Len(t, out, 2)
	assert.Equal(t, "user", out[0].Get("role").String())
	assert.Equal(t, "hi", out[0].Get("content.0.text").String())
	assert.Equal(t, "compaction", out[1].Get("type").String())
	assert.NotEmpty(t, out[1].Get("encrypted_content").String())
	assert.Equal(t, inTokens(body), got.Get("usage.input_tokens").Int())
	assert.Greater(t, got.Get("usage.output_tokens").Int(), int64(0))
	assert.True(t, got.Get("usage.input_tokens_details.cached_tokens").Exists())
}

// ---- Routing, validation, auth ----

func TestRoutingAndValidation(t *testing.T) {
	srv := start(t, Config{})

	resp, got := jsonCall(t, srv, "/openai/v1/chat/completions", `{"model":"m"}`)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a path prefix is fine")
	assert.Equal(t, "m", got.Get("model").String())

	resp, got = jsonCall(t, srv, "/v1/embeddings", `{"model":"m"}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "invalid_request_error", got.Get("error.type").String())
	assertLeakyHeaders(t, resp.Header)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/messages", nil)
	require.NoError(t, err)
	getResp, err := srv.Client().Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(getResp.Body)
	_ = getResp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, getResp.StatusCode)
	assert.Equal(t, "error", gjson.GetBytes(b, "type").String(), "Anthropic envelope on a Family B path")

	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":`},
		{"/v1/responses", `["model"]`},
		{"/v1/responses/compact", `{"model":42}`},
		{"/v1/chat/completions", `{"messages":[]}`},
	} {
		resp, got := jsonCall(t, srv, tc.path, tc.body)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.body)
		assert.Equal(t, "invalid_request_error", got.Get("error.type").String(), tc.body)
	}
	resp, got = jsonCall(t, srv, "/v1/messages", `{"max_tokens":1}`, anthropicVersion...)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "error", got.Get("type").String())
	assert.Equal(t, "invalid_request_error", got.Get("error.type").String())

	resp, got = jsonCall(t, srv, "/v1/messages", `{"model":"c","max_tokens":1,"messages":[]}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "anthropic-version is required")
	assert.Contains(t, got.Get("error.message").String(), "anthropic-version")
}

func TestAuth(t *testing.T) {
	srv := start(t, Config{APIKey: "sk-sim"})
	chat := `{"model":"m","messages":[]}`
	msgs := `{"model":"c","max_tokens":1,"messages":[]}`
	for _, tc := range []struct {
		name   string
		path   string
		body   string
		header []string
		want   int
	}{
		{"openai bearer", "/v1/chat/completions", chat, []string{"Authorization", "Bearer sk-sim"}, 200},
		{"openai wrong bearer", "/v1/responses", chat, []string{"Authorization", "Bearer nope"}, 401},
		{"openai missing", "/v1/chat/completions", chat, nil, 401},
		{"openai x-api-key is not accepted", "/v1/chat/completions", chat, []string{"x-api-key", "sk-sim"}, 401},
		{"anthropic x-api-key", "/v1/messages", msgs, append([]string{"x-api-key", "sk-sim"}, anthropicVersion...), 200},
		{"anthropic bearer", "/v1/messages", msgs, append([]string{"Authorization", "Bearer sk-sim"}, anthropicVersion...), 200},
		{"anthropic wrong key", "/v1/messages", msgs, append([]string{"x-api-key", "sk-other"}, anthropicVersion...), 401},
		{"anthropic missing", "/v1/messages/count_tokens", msgs, anthropicVersion, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := jsonCall(t, srv, tc.path, tc.body, tc.header...)
			require.Equal(t, tc.want, resp.StatusCode)
			if tc.want != 401 {
				return
			}
			assertLeakyHeaders(t, resp.Header)
			if strings.Contains(tc.path, "messages") {
				assert.Equal(t, "error", got.Get("type").String())
				assert.Equal(t, "authentication_error", got.Get("error.type").String())
				assert.NotEmpty(t, got.Get("request_id").String())
			} else {
				assert.Equal(t, "invalid_request_error", got.Get("error.type").String())
				assert.Equal(t, "invalid_api_key", got.Get("error.code").String())
				assert.True(t, got.Get("error.param").Exists())
			}
		})
	}
}

func TestObserve(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := start(t, Config{APIKey: "k", Observe: func(r *http.Request, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.URL.Path+" "+string(body))
	}})
	jsonCall(t, srv, "/v1/chat/completions", `{"model":"a"}`, "Authorization", "Bearer k")
	jsonCall(t, srv, "/v1/chat/completions", `{"model":"b"}`) // rejected requests are observed too
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{`/v1/chat/completions {"model":"a"}`, `/v1/chat/completions {"model":"b"}`}, seen)
}

// ---- Behaviours ----

func TestParseBehaviours(t *testing.T) {
	b := parseBehaviours("gpt-upstream-x+fail-503+rate-limit+slow-headers-2s+drip-50ms+stall+cut+inband-error+tool-call+whatever")
	assert.Equal(t, behaviours{failStatus: 503, rateLimit: true, slowHeaders: 2 * time.Second, drip: 50 * time.Millisecond,
		stall: true, cut: true, inbandError: true, toolCall: true}, b)
	assert.Equal(t, behaviours{}, parseBehaviours("sim-basic"))
	assert.Equal(t, behaviours{}, parseBehaviours("m:fail-503"), "':' is not a separator")
	assert.Equal(t, behaviours{}, parseBehaviours("m+fail-200+fail-5030+drip-x+slow-headers-"))
}

func TestFail(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct {
		path, model string
		status      int
		errType     string
	}{
		{"/v1/chat/completions", "gpt-upstream-x+fail-503", 503, "server_error"},
		{"/v1/responses", "m+fail-400", 400, "invalid_request_error"},
		{"/v1/messages", "claude-x+fail-529", 529, "overloaded_error"},
		{"/v1/messages", "fail-500+claude-x", 500, "api_error"},
		{"/v1/messages", "c+fail-404", 404, "not_found_error"},
		{"/v1/messages/count_tokens", "c+fail-403", 403, "permission_error"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			body := `{"model":"` + tc.model + `","stream":true,"max_tokens":1,"messages":[]}`
			resp, got := jsonCall(t, srv, tc.path, body, anthropicVersion...)
			require.Equal(t, tc.status, resp.StatusCode)
			assertLeakyHeaders(t, resp.Header)
			assert.Equal(t, tc.errType, got.Get("error.type").String())
			msg := got.Get("error.message").String()
			assert.Contains(t, msg, tc.model)
			assert.Contains(t, msg, "simulated")
			if strings.Contains(tc.path, "messages") {
				assert.Equal(t, "error", got.Get("type").String())
			} else {
				for _, k := range []string{"message", "type", "param", "code"} {
					assert.True(t, got.Get("error."+k).Exists(), k)
				}
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	srv := start(t, Config{})
	resp, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+rate-limit"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("retry-after"))
	assert.Equal(t, "2000", resp.Header.Get("retry-after-ms"))
	assert.Equal(t, "rate_limit_exceeded", got.Get("error.code").String())

	resp, got = jsonCall(t, srv, "/v1/messages", `{"model":"c+rate-limit"}`, anthropicVersion...)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("retry-after"))
	assert.Equal(t, "2000", resp.Header.Get("retry-after-ms"))
	assert.Equal(t, "rate_limit_error", got.Get("error.type").String())
}

// startWatched is start plus a channel that gets a value each time a handler call returns.
func startWatched(t *testing.T) (*httptest.Server, chan struct{}) {
	t.Helper()
	h := New(Config{})
	done := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, done
}

func waitReturn(t *testing.T, done chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("handler did not return within %s of the client leaving", within)
	}
}

func TestSlowHeaders(t *testing.T) {
	t.Parallel()
	srv, done := startWatched(t)

	began := time.Now()
	resp, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+slow-headers-300ms"}`)
	elapsed := time.Since(began)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
	assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
	assert.Less(t, elapsed, 2*time.Second)
	waitReturn(t, done, time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m+slow-headers-30s"}`))
	require.NoError(t, err)
	_, err = srv.Client().Do(req)
	require.Error(t, err)
	waitReturn(t, done, 2*time.Second)
}

func TestDrip(t *testing.T) {
	t.Parallel()
	srv, done := startWatched(t)
	const drip = 300 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	began := time.Now()
	resp := post(t, ctx, srv, "/v1/messages", `{"model":"c+drip-300ms","stream":true,"max_tokens":1,"messages":[]}`,
		anthropicVersion...)
	br := bufio.NewReader(resp.Body)
	first, err := nextFrame(br)
	require.NoError(t, err)
	firstAt := time.Since(began)
	assert.Equal(t, "message_start", first.event)
	assert.Less(t, firstAt, drip, "the first event is sent at once")
	second, err := nextFrame(br)
	require.NoError(t, err)
	assert.Equal(t, "ping", second.event)
	assert.GreaterOrEqual(t, time.Since(began)-firstAt, drip-20*time.Millisecond)
	cancel()
	waitReturn(t, done, 2*time.Second)

	// JSON replies ignore drip.
	began = time.Now()
	resp2, _ := jsonCall(t, srv, "/v1/responses", `{"model":"m+drip-2s","input":"hi"}`)
	assert.Equal(t, http.StatusOK, resp2.StatusCode)
	assert.Less(t, time.Since(began), time.Second)
}

func TestStall(t *testing.T) {
	t.Parallel()
	srv, done := startWatched(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, srv, "/v1/responses", `{"model":"m+stall","stream":true,"input":"hi"}`)
	br := bufio.NewReader(resp.Body)
	first, err := nextFrame(br)
	require.NoError(t, err)
	assert.Equal(t, "response.created", first.event)

	next := make(chan error, 1)
	go func() {
		_, err := nextFrame(br)
		next <- err
	}()
	select {
	case err := <-next:
		t.Fatalf("a stalled stream sent more (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	waitReturn(t, done, 2*time.Second)
	<-next
}

func TestCut(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m+cut","stream":true}`},
		{"/v1/responses", `{"model":"m+cut","stream":true,"input":"hi"}`},
		{"/v1/messages", `{"model":"c+cut","stream":true,"max_tokens":1,"messages":[]}`},
	} {
		t.Run("stream "+tc.path, func(t *testing.T) {
			resp := post(t, context.Background(), srv, tc.path, tc.body, anthropicVersion...)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			frames, err := readFrames(resp.Body)
			require.Error(t, err, "the connection is aborted, not closed cleanly")
			assert.Len(t, frames, 3)
		})
	}

	resp := post(t, context.Background(), srv, "/v1/chat/completions", `{"model":"m+cut"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.Error(t, err)
	assert.NotEmpty(t, b)
	assert.Less(t, int64(len(b)), resp.ContentLength)
	assert.False(t, gjson.ValidBytes(b))
}

func TestInbandError(t *testing.T) {
	srv := start(t, Config{})

	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"m+inband-error","stream":true}`)
	require.Len(t, frames, 1)
	assert.Empty(t, frames[0].event)
	e := frames[0].json().Get("error")
	assert.Equal(t, "server_error", e.Get("type").String())
	assert.Contains(t, e.Get("message").String(), "simulated")
	assert.True(t, e.Get("param").Exists() && e.Get("code").Exists())

	_, frames = streamCall(t, srv, "/v1/responses", `{"model":"m+inband-error","stream":true,"input":"hi"}`)
	require.Len(t, frames, 1)
	assert.Equal(t, "error", frames[0].event)
	d := frames[0].json()
	assert.Equal(t, "error", d.Get("type").String())
	assert.Equal(t, "server_error", d.Get("code").String())
	assert.NotEmpty(t, d.Get("message").String())
	assert.Equal(t, int64(0), d.Get("sequence_number").Int())
	assert.True(t, d.Get("sequence_number").Exists())

	_, frames = streamCall(t, srv, "/v1/messages", `{"model":"c+inband-error","stream":true,"max_tokens":1,"messages":[]}`,
		anthropicVersion...)
	require.Len(t, frames, 1)
	assert.Equal(t, "error", frames[0].event)
	assert.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded (simulated)"}}`, frames[0].data)

	resp, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+inband-error"}`)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, "server_error", got.Get("error.type").String())
	resp, got = jsonCall(t, srv, "/v1/messages", `{"model":"c+inband-error","max_tokens":1,"messages":[]}`, anthropicVersion...)
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.Equal(t, "api_error", got.Get("error.type").String())
}

// ---- Tool calls ----

const execArgs = `{"cmd":"echo simulated-tool"}`

func TestToolCallChat(t *testing.T) {
	srv := start(t, Config{})
	tools := `"tools":[{"type":"function","function":{"name":"exec_command","parameters":{}}}]`

	_, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+tool-call",`+tools+`,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, "tool_calls", got.Get("choices.0.finish_reason").String())
	call := got.Get("choices.0.message.tool_calls.0")
	assert.Equal(t, "function", call.Get("type").String())
	assert.Equal(t, "exec_command", call.Get("function.name").String())
	assert.Equal(t, execArgs, call.Get("function.arguments").String())
	assert.NotEmpty(t, call.Get("id").String())
	assert.Equal(t, gjson.Null, got.Get("choices.0.message.content").Type)

	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"m+tool-call","stream":true,`+tools+`,"messages":[]}`)
	require.Equal(t, "[DONE]", frames[len(frames)-1].data)
	var args strings.Builder
	for _, f := range frames[:len(frames)-1] {
		args.WriteString(f.json().Get("choices.0.delta.tool_calls.0.function.arguments").String())
	}
	first := frames[0].json().Get("choices.0.delta")
	assert.Equal(t, "assistant", first.Get("role").String())
	assert.Equal(t, "exec_command", first.Get("tool_calls.0.function.name").String())
	assert.Equal(t, execArgs, args.String())
	assert.Equal(t, "tool_calls", frames[len(frames)-2].json().Get("choices.0.finish_reason").String())

	// A conversation that ends with a tool result gets text; so does one without tools.
	_, got = jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+tool-call",`+tools+`,"messages":[{"role":"user","content":"hi"},`+
		`{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"exec_command","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]}`)
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
	_, got = jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+tool-call","messages":[]}`)
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
}

func TestToolCallResponses(t *testing.T) {
	srv := start(t, Config{})
	tools := `"tools":[{"type":"web_search"},{"type":"function","name":"get_goal","parameters":{}},{"type":"function","name":"exec_command"}]`

	_, got := jsonCall(t, srv, "/v1/responses", `{"model":"m+tool-call","input":"hi",`+tools+`}`)
	item := got.Get("output.0")
	assert.Equal(t, "function_call", item.Get("type").String())
	assert.Equal(t, "get_goal", item.Get("name").String(), "the first function tool")
	assert.Equal(t, "{}", item.Get("arguments").String())
	assert.NotEmpty(t, item.Get("call_id").String())

	_, frames := streamCall(t, srv, "/v1/responses", `{"model":"m+tool-call","stream":true,"input":"hi",`+
		`"tools":[{"type":"function","name":"exec_command"}]}`)
	assert.Equal(t, []string{
		"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed",
	}, squash(eventNames(frames)))
	final := checkResponsesFrames(t, frames, "m+tool-call")
	var args strings.Builder
	for _, f := range frames {
		if f.event == "response.function_call_arguments.delta" {
			args.WriteString(f.json().Get("delta").String())
		}
	}
	assert.Equal(t, execArgs, args.String())
	assert.Equal(t, "function_call", frames[2].json().Get("item.type").String())
	assert.Equal(t, "exec_command", final.Get("output.0.name").String())
	assert.Equal(t, execArgs, final.Get("output.0.arguments").String())

	_, got = jsonCall(t, srv, "/v1/responses", `{"model":"m+tool-call",`+tools+`,"input":[{"role":"user","content":"hi"},`+
		`{"type":"function_call","call_id":"c","name":"get_goal","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}]}`)
	assert.Equal(t, "message", got.Get("output.0.type").String())
	assert.Equal(t, ReplyText, got.Get("output.0.content.0.text").String())
}

func TestToolCallMessages(t *testing.T) {
	srv := start(t, Config{})
	tools := `"tools":[{"type":"web_search_20250305","name":"web_search"},{"name":"exec_command","input_schema":{"type":"object"}}]`

	_, got := jsonCall(t, srv, "/v1/messages", `{"model":"c+tool-call","max_tokens":1,`+tools+`,"messages":[{"role":"user","content":"hi"}]}`,
		anthropicVersion...)
	assert.Equal(t, "tool_use", got.Get("stop_reason").String())
	block := got.Get("content.0")
	assert.Equal(t, "tool_use", block.Get("type").String())
	assert.Equal(t, "exec_command", block.Get("name").String())
	assert.JSONEq(t, execArgs, block.Get("input").Raw)
	assert.NotEmpty(t, block.Get("id").String())

	_, frames := streamCall(t, srv, "/v1/messages", `{"model":"c+tool-call","stream":true,"max_tokens":1,`+tools+`,"messages":[]}`,
		anthropicVersion...)
	checkMessagesFrames(t, frames, "c+tool-call")
	assert.Equal(t, "tool_use", frames[2].json().Get("content_block.type").String())
	assert.Equal(t, "exec_command", frames[2].json().Get("content_block.name").String())
	var args strings.Builder
	for _, f := range frames {
		if d := f.json().Get("delta"); d.Get("type").String() == "input_json_delta" {
			args.WriteString(d.Get("partial_json").String())
		}
	}
	assert.Equal(t, execArgs, args.String())
	assert.Equal(t, "tool_use", frames[len(frames)-2].json().Get("delta.stop_reason").String())

	_, got = jsonCall(t, srv, "/v1/messages", `{"model":"c+tool-call","max_tokens":1,`+tools+`,"messages":[`+
		`{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"exec_command","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}]}`, anthropicVersion...)
	assert.Equal(t, "end_turn", got.Get("stop_reason").String())
	assert.Equal(t, ReplyText, got.Get("content.0.text").String())
}

// ---- Broken upstreams ----

func TestParseBrokenBehaviours(t *testing.T) {
	b := parseBehaviours("u+html-200+redirect-302+bad-json+huge-json+reset+account-headers+no-subops+huge-first-event+" +
		"huge-event+no-terminator+tail-at-once+comments+usage-delay-150ms+no-usage")
	assert.Equal(t, behaviours{html200: true, redirect: true, badJSON: true, hugeJSON: true, reset: true, accountHeaders: true,
		noSubops: 404, hugeFirstEvent: true, hugeEvent: true, noTerminator: true, tailAtOnce: true, comments: true,
		usageDelay: 150 * time.Millisecond, noUsage: true}, b)
	assert.Equal(t, 405, parseBehaviours("u+no-subops-405").noSubops)
	assert.Equal(t, behaviours{}, parseBehaviours("u+usage-delay-+usage-delay-x+html-2000"))
}

// noRedirects is a client for srv that shows redirects instead of following them.
func noRedirects(srv *httptest.Server) *http.Client {
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func TestHTMLRedirectAndBadJSON(t *testing.T) {
	srv := start(t, Config{APIKey: "cred-123"})
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		behaviour   string
		status      int
		contentType string
	}{
		{"html-200", 200, "text/html; charset=utf-8"},
		{"redirect-302", 302, "text/html; charset=utf-8"},
		{"bad-json", 200, "application/json"},
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"} {
			for _, stream := range []string{"false", "true"} {
				t.Run(tc.behaviour+" "+path+" stream "+stream, func(t *testing.T) {
					model := "up-model+" + tc.behaviour
					req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(
						`{"model":"`+model+`","stream":`+stream+`,"max_tokens":1,"input":"hi","messages":[]}`))
					require.NoError(t, err)
					req.Header.Set("Authorization", "Bearer cred-123")
					req.Header.Set("anthropic-version", "2023-06-01")
					resp, err := noRedirects(srv).Do(req)
					require.NoError(t, err)
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					require.NoError(t, err, "the body is complete")
					assert.Equal(t, tc.status, resp.StatusCode)
					assert.Equal(t, tc.contentType, resp.Header.Get("Content-Type"))
					assert.Equal(t, int64(len(b)), resp.ContentLength)
					assert.False(t, gjson.ValidBytes(b), "%s", b)
					for _, secret := range []string{model, host, "cred-123", "org-simsecret42", "proj_simsecret42"} {
						assert.Contains(t, string(b), secret)
					}
					if tc.behaviour == "redirect-302" {
						assert.Equal(t, "http://"+host+"/login?org=org-simsecret42", resp.Header.Get("Location"))
					}
				})
			}
		}
	}
}

func TestAccountHeaders(t *testing.T) {
	srv := start(t, Config{})
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		resp, got := jsonCall(t, srv, path, `{"model":"up-x+fail-400+account-headers","max_tokens":1,"messages":[]}`,
			"x-api-key", "cred-456", "anthropic-version", "2023-06-01")
		require.Equal(t, 400, resp.StatusCode)
		assert.Equal(t, AccountOrganization, resp.Header.Get("anthropic-organization-id"))
		assert.Equal(t, AccountOrganization, resp.Header.Get("openai-organization"))
		assert.Equal(t, AccountProject, resp.Header.Get("openai-project"))
		msg := got.Get("error.message").String()
		for _, secret := range []string{"up-x+fail-400+account-headers", host, "cred-456", AccountOrganization, AccountProject} {
			assert.Contains(t, msg, secret, path)
		}
	}
	// Without an error, the answer is normal apart from the headers.
	resp, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"up+account-headers","messages":[]}`)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, AccountProject, resp.Header.Get("openai-project"))
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
}

func TestHugeJSON(t *testing.T) {
	srv := start(t, Config{})
	resp := post(t, context.Background(), srv, "/v1/chat/completions", `{"model":"m+huge-json","messages":[]}`)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, int64(-1), resp.ContentLength, "no declared length")
	head := make([]byte, 64)
	_, err := io.ReadFull(resp.Body, head)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(head), `{"id":"chatcmpl-`), "%s", head)
	rest, err := io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	assert.Greater(t, rest+64, int64(HugeJSONSize))

	// Streams are not affected.
	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"m+huge-json","stream":true}`)
	assert.Equal(t, "[DONE]", frames[len(frames)-1].data)
}

func TestReset(t *testing.T) {
	srv := start(t, Config{})
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"model":"m+reset","stream":true}`))
		require.NoError(t, err)
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := srv.Client().Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		require.Error(t, err, "no answer at all")
	}
}

func TestNoSubops(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct{ path, model, errType string }{
		{"/v1/messages/count_tokens", "c+no-subops", "not_found_error"},
		{"/v1/responses/input_tokens", "m+no-subops", "invalid_request_error"},
		{"/v1/responses/compact", "m+no-subops", "invalid_request_error"},
	} {
		resp, got := jsonCall(t, srv, tc.path, `{"model":"`+tc.model+`","input":"hi","messages":[]}`, anthropicVersion...)
		assert.Equal(t, 404, resp.StatusCode, tc.path)
		assert.Equal(t, tc.errType, got.Get("error.type").String())
	}
	resp, _ := jsonCall(t, srv, "/v1/responses/compact", `{"model":"m+no-subops-405","input":"hi"}`)
	assert.Equal(t, 405, resp.StatusCode)
	// The generation endpoints are offered.
	resp, _ = jsonCall(t, srv, "/v1/messages", `{"model":"c+no-subops","max_tokens":1,"messages":[]}`, anthropicVersion...)
	assert.Equal(t, 200, resp.StatusCode)
	resp, _ = jsonCall(t, srv, "/v1/responses", `{"model":"m+no-subops","input":"hi"}`)
	assert.Equal(t, 200, resp.StatusCode)
}

func TestHugeEvents(t *testing.T) {
	srv := start(t, Config{})
	_, frames := streamCall(t, srv, "/v1/messages", `{"model":"c+huge-first-event","stream":true,"max_tokens":1,"messages":[]}`,
		anthropicVersion...)
	assert.Greater(t, len(frames[0].data), HugeEventSize)
	assert.Equal(t, "message_start", frames[0].json().Get("type").String(), "still a valid event")
	assert.Less(t, len(frames[1].data), 1024)

	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m+huge-event","stream":true}`},
		{"/v1/responses", `{"model":"m+huge-event","stream":true,"input":"hi"}`},
		{"/v1/messages", `{"model":"c+huge-event","stream":true,"max_tokens":1,"messages":[]}`},
	} {
		_, frames = streamCall(t, srv, tc.path, tc.body, anthropicVersion...)
		assert.Less(t, len(frames[0].data), 4096, tc.path)
		assert.Greater(t, len(frames[1].data), HugeEventSize, tc.path)
		assert.True(t, gjson.Valid(frames[1].data), tc.path)
		assert.Len(t, frames[1].json().Get("x_padding").String(), HugeEventSize)
	}
}

// rawStream posts a stream request and returns its body bytes as sent.
func rawStream(t *testing.T, srv *httptest.Server, path, body string) []byte {
	t.Helper()
	resp := post(t, context.Background(), srv, path, body, anthropicVersion...)
	require.Equal(t, 200, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func TestComments(t *testing.T) {
	srv := start(t, Config{})
	b := rawStream(t, srv, "/v1/chat/completions", `{"model":"m+comments","stream":true}`)
	assert.True(t, strings.HasPrefix(string(b), ": keep-alive\n\n: keep-alive\n\ndata: {"), "%.80s", b)
	b = rawStream(t, srv, "/v1/messages", `{"model":"c+comments","stream":true,"max_tokens":1,"messages":[]}`)
	assert.True(t, strings.HasPrefix(string(b), ": keep-alive\n\n: keep-alive\n\nevent: message_start\n"), "%.80s", b)
}

func TestNoTerminator(t *testing.T) {
	srv := start(t, Config{})
	b := rawStream(t, srv, "/v1/chat/completions", `{"model":"m+no-terminator","stream":true}`)
	assert.True(t, strings.HasSuffix(string(b), "}\n\ndata: [DONE]\n"), "%q", b[max(0, len(b)-40):])
	b = rawStream(t, srv, "/v1/messages", `{"model":"c+no-terminator","stream":true,"max_tokens":1,"messages":[]}`)
	assert.True(t, strings.HasSuffix(string(b), "\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n"), "%q", b[max(0, len(b)-60):])
	b = rawStream(t, srv, "/v1/responses", `{"model":"m+no-terminator","stream":true,"input":"hi"}`)
	assert.True(t, strings.HasSuffix(string(b), "}}\n"), "%q", b[max(0, len(b)-20):])
	assert.False(t, strings.HasSuffix(string(b), "\n\n"))
}

// writeCounter counts the writes a handler makes to its ResponseWriter.
type writeCounter struct {
	http.ResponseWriter
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.ResponseWriter.Write(p) }
func (w *writeCounter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestTailAtOnce(t *testing.T) {
	h := New(Config{})
	writes := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wc := &writeCounter{ResponseWriter: w}
		h.ServeHTTP(wc, r)
		writes <- wc.writes
	}))
	t.Cleanup(srv.Close)

	for _, tc := range []struct{ path, body, last string }{
		{"/v1/chat/completions", `{"model":"m+tail-at-once","stream":true,"stream_options":{"include_usage":true}}`, "data: [DONE]\n\n"},
		{"/v1/chat/completions", `{"model":"m+tail-at-once+no-terminator","stream":true}`, "}\n\ndata: [DONE]\n"},
		{"/v1/responses", `{"model":"m+tail-at-once","stream":true,"input":"hi"}`, "}}\n\n"},
		{"/v1/messages", `{"model":"c+tail-at-once","stream":true,"max_tokens":1,"messages":[]}`, "data: {\"type\":\"message_stop\"}\n\n"},
	} {
		t.Run(tc.body, func(t *testing.T) {
			resp := post(t, context.Background(), srv, tc.path, tc.body, anthropicVersion...)
			require.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			require.Positive(t, resp.ContentLength, "the stream's length is declared")
			// The reader's last read brings the end of the body with the final bytes.
			var body []byte
			buf := make([]byte, 256<<10)
			lastN, lastErr := 0, error(nil)
			for i := 0; i < 1000; i++ {
				n, err := resp.Body.Read(buf)
				body = append(body, buf[:n]...)
				if n > 0 {
					lastN, lastErr = n, err
				}
				if err != nil {
					require.ErrorIs(t, err, io.EOF)
					break
				}
			}
			assert.Positive(t, lastN)
			assert.ErrorIs(t, lastErr, io.EOF, "the read that carried the final events also ended the body")
			assert.Equal(t, resp.ContentLength, int64(len(body)))
			assert.True(t, strings.HasSuffix(string(body), tc.last), "%q", body[max(0, len(body)-60):])
			assert.Equal(t, 2, <-writes, "the first event, then the whole rest in one write")
		})
	}
}

func TestUsageDelay(t *testing.T) {
	t.Parallel()
	srv := start(t, Config{})
	const delay = 300 * time.Millisecond
	for _, tc := range []struct {
		path, body string
		isFinal    func(f frame) bool
	}{
		{"/v1/chat/completions", `{"model":"m+usage-delay-300ms","stream":true,"stream_options":{"include_usage":true}}`,
			func(f frame) bool { return f.json().Get("usage.prompt_tokens").Exists() }},
		{"/v1/responses", `{"model":"m+usage-delay-300ms","stream":true,"input":"hi"}`,
			func(f frame) bool { return f.event == "response.completed" }},
		{"/v1/messages", `{"model":"c+usage-delay-300ms","stream":true,"max_tokens":1,"messages":[]}`,
			func(f frame) bool { return f.event == "message_delta" }},
	} {
		began := time.Now()
		resp := post(t, context.Background(), srv, tc.path, tc.body, anthropicVersion...)
		br := bufio.NewReader(resp.Body)
		var text strings.Builder
		sawFinal := false
		for i := 0; i < 200; i++ {
			f, err := nextFrame(br)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			if tc.isFinal(f) {
				sawFinal = true
				assert.GreaterOrEqual(t, time.Since(began), delay, "%s: the final usage waits", tc.path)
				break
			}
			text.WriteString(f.json().Get("choices.0.delta.content").String())
			text.WriteString(f.json().Get("delta").String())
			text.WriteString(f.json().Get("delta.text").String())
			assert.Less(t, time.Since(began), delay, "%s: everything before the usage comes at once", tc.path)
		}
		assert.True(t, sawFinal, tc.path)
		assert.Contains(t, text.String(), "simulator.", "%s: the whole text came before the delay", tc.path)
	}
}

func TestNoUsage(t *testing.T) {
	srv := start(t, Config{})
	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"m+no-usage","stream":true,"stream_options":{"include_usage":true}}`)
	for _, f := range frames {
		assert.False(t, f.json().Get("usage").Exists(), "%s", f.data)
	}
	assert.Equal(t, "[DONE]", frames[len(frames)-1].data)
	assert.Equal(t, "stop", frames[len(frames)-2].json().Get("choices.0.finish_reason").String())
	_, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+no-usage"}`)
	assert.False(t, got.Get("usage").Exists())
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())

	_, frames = streamCall(t, srv, "/v1/responses", `{"model":"m+no-usage","stream":true,"input":"hi"}`)
	last := frames[len(frames)-1].json()
	assert.Equal(t, "completed", last.Get("response.status").String())
	assert.Equal(t, gjson.Null, last.Get("response.usage").Type)
	_, got = jsonCall(t, srv, "/v1/responses", `{"model":"m+no-usage","input":"hi"}`)
	assert.Equal(t, gjson.Null, got.Get("usage").Type)

	_, frames = streamCall(t, srv, "/v1/messages", `{"model":"c+no-usage","stream":true,"max_tokens":1,"messages":[]}`, anthropicVersion...)
	for _, f := range frames {
		assert.False(t, f.json().Get("usage").Exists(), "%s", f.data)
		assert.False(t, f.json().Get("message.usage").Exists(), "%s", f.data)
	}
	_, got = jsonCall(t, srv, "/v1/messages", `{"model":"c+no-usage","max_tokens":1,"messages":[]}`, anthropicVersion...)
	assert.False(t, got.Get("usage").Exists())
	assert.Equal(t, "end_turn", got.Get("stop_reason").String())
}

// ---- Faults for retries, failover and stream ends ----

func TestParseFaultBehaviours(t *testing.T) {
	b := parseBehaviours("u+retry-after-1500ms+no-retry-after+silent+slow-first-event-2s+malformed-event+no-done+" +
		"context-length+content-policy")
	assert.Equal(t, behaviours{retryAfter: 1500 * time.Millisecond, noRetryAfter: true, silent: true,
		slowFirstEvent: 2 * time.Second, malformedEvent: true, noDone: true, contextLength: true, contentPolicy: true}, b)
	assert.Equal(t, behaviours{}, parseBehaviours("u+retry-after-+retry-after-0s+slow-first-event-x+first-1+for-1s"))

	sch, ok := parseSchedule(strings.Split("u+first-3+for-90s", "+"))
	assert.True(t, ok)
	assert.Equal(t, schedule{first: 3, duration: 90 * time.Second}, sch)
	for _, name := range []string{"u", "u+first-", "u+first--1", "u+first-x", "u+first-01", "u+for-", "u+for-0s", "u+for-1"} {
		_, ok := parseSchedule(strings.Split(name, "+"))
		assert.False(t, ok, name)
	}
}

func TestRetryAfter(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct {
		path, model string
		status      int
		after, ms   string // "" is absent
	}{
		{"/v1/chat/completions", "m+fail-503+retry-after-1500ms", 503, "2", "1500"},
		{"/v1/messages", "c+fail-529+retry-after-3s", 529, "3", "3000"},
		{"/v1/chat/completions", "m+fail-500", 500, "", ""},
		{"/v1/chat/completions", "m+rate-limit+retry-after-250ms", 429, "1", "250"},
		{"/v1/messages", "c+rate-limit+retry-after-4s", 429, "4", "4000"},
		{"/v1/chat/completions", "m+rate-limit+no-retry-after", 429, "", ""},
		{"/v1/messages", "c+rate-limit+retry-after-4s+no-retry-after", 429, "", ""},
		{"/v1/chat/completions", "m+fail-503+retry-after-1s+no-retry-after", 503, "", ""},
	} {
		t.Run(tc.model, func(t *testing.T) {
			resp, got := jsonCall(t, srv, tc.path, `{"model":"`+tc.model+`","max_tokens":1,"messages":[]}`, anthropicVersion...)
			require.Equal(t, tc.status, resp.StatusCode)
			assert.NotEmpty(t, got.Get("error.message").String())
			assert.Equal(t, []string{tc.after, tc.ms}, []string{resp.Header.Get("retry-after"), resp.Header.Get("retry-after-ms")})
			_, has := resp.Header["Retry-After"]
			assert.Equal(t, tc.after != "", has)
		})
	}
}

func TestVendorRefusals(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct {
		path, model, code, param, message string
	}{
		{"/v1/chat/completions", "m+context-length", "context_length_exceeded", "messages", "This model's maximum context length is 128000 tokens"},
		{"/v1/responses", "m+context-length", "context_length_exceeded", "input", "This model's maximum context length is 128000 tokens"},
		{"/v1/messages", "c+context-length", "", "", "prompt is too long: "},
		{"/v1/messages/count_tokens", "c+context-length", "", "", "prompt is too long: "},
		{"/v1/chat/completions", "m+content-policy", "content_policy_violation", "", "safety system"},
		{"/v1/messages", "c+content-policy", "", "", "Usage Policy"},
	} {
		t.Run(tc.path+" "+tc.model, func(t *testing.T) {
			for _, stream := range []string{"false", "true"} {
				body := `{"model":"` + tc.model + `","stream":` + stream + `,"max_tokens":1,"input":"hi","messages":[]}`
				resp, got := jsonCall(t, srv, tc.path, body, anthropicVersion...)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
				assert.Equal(t, "invalid_request_error", got.Get("error.type").String())
				msg := got.Get("error.message").String()
				assert.Contains(t, msg, tc.message)
				if strings.Contains(tc.path, "messages") {
					assert.Equal(t, "error", got.Get("type").String())
					assert.False(t, got.Get("error.code").Exists())
					if strings.Contains(tc.model, "context-length") {
						assert.Equal(t, fmt.Sprintf("prompt is too long: %d tokens > 200000 maximum", 200000+inTokens(body)), msg)
					}
					continue
				}
				assert.Equal(t, tc.code, got.Get("error.code").String())
				if tc.param == "" {
					assert.Equal(t, gjson.Null, got.Get("error.param").Type)
				} else {
					assert.Equal(t, tc.param, got.Get("error.param").String())
				}
			}
		})
	}
}

func TestSilent(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	h := New(Config{Observe: func(*http.Request, []byte) { arrived <- struct{}{} }})
	done := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path,
			strings.NewReader(`{"model":"m+silent","stream":true,"max_tokens":1,"messages":[]}`))
		require.NoError(t, err)
		req.Header.Set("anthropic-version", "2023-06-01")
		answered := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			answered <- err
		}()
		<-arrived
		select {
		case err := <-answered:
			t.Fatalf("%s: a silent upstream answered (err %v)", path, err)
		case <-time.After(300 * time.Millisecond):
		}
		cancel()
		require.Error(t, <-answered, path)
		waitReturn(t, done, 2*time.Second)
	}
}

func TestSlowFirstEvent(t *testing.T) {
	t.Parallel()
	srv, done := startWatched(t)
	const wait = 500 * time.Millisecond
	for _, tc := range []struct{ path, body, first string }{
		{"/v1/chat/completions", `{"model":"m+slow-first-event-500ms","stream":true}`, ""},
		{"/v1/responses", `{"model":"m+slow-first-event-500ms","stream":true,"input":"hi"}`, "response.created"},
		{"/v1/messages", `{"model":"c+slow-first-event-500ms","stream":true,"max_tokens":1,"messages":[]}`, "message_start"},
		{"/v1/chat/completions", `{"model":"m+slow-first-event-500ms+tail-at-once","stream":true}`, ""},
	} {
		t.Run(tc.body, func(t *testing.T) {
			began := time.Now()
			resp := post(t, context.Background(), srv, tc.path, tc.body, anthropicVersion...)
			headersAt := time.Since(began)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			assert.Less(t, headersAt, wait/2, "the headers come at once")
			frames, err := readFrames(resp.Body)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, time.Since(began), wait, "the first event waits")
			assert.Equal(t, tc.first, frames[0].event)
			waitReturn(t, done, time.Second)
		})
	}

	// Comments go with the headers; the client leaving during the wait ends the handler.
	ctx, cancel := context.WithCancel(context.Background())
	began := time.Now()
	resp := post(t, ctx, srv, "/v1/chat/completions", `{"model":"m+slow-first-event-30s+comments","stream":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, ": keep-alive\n", line)
	assert.Less(t, time.Since(began), wait)
	cancel()
	waitReturn(t, done, 2*time.Second)

	// Answers that are not streams wait before anything, as slow-headers.
	began = time.Now()
	resp2, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"m+slow-first-event-500ms"}`)
	assert.GreaterOrEqual(t, time.Since(began), wait)
	assert.Equal(t, http.StatusOK, resp2.StatusCode)
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())
	waitReturn(t, done, time.Second)
}

func TestMalformedEvent(t *testing.T) {
	srv := start(t, Config{})
	for _, tc := range []struct{ path, body, model string }{
		{"/v1/chat/completions", `{"model":"up-x+malformed-event","stream":true,"stream_options":{"include_usage":true}}`, "up-x+malformed-event"},
		{"/v1/responses", `{"model":"up-x+malformed-event","stream":true,"input":"hi"}`, "up-x+malformed-event"},
		{"/v1/messages", `{"model":"up-c+malformed-event","stream":true,"max_tokens":1,"messages":[]}`, "up-c+malformed-event"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			_, normal := streamCall(t, srv, tc.path, strings.Replace(tc.body, "+malformed-event", "", 1), anthropicVersion...)
			_, frames := streamCall(t, srv, tc.path, tc.body, anthropicVersion...)
			require.Len(t, frames, len(normal)+1, "one event more, and the stream goes on to its end")
			bad := frames[1]
			assert.False(t, gjson.Valid(bad.data), "%s", bad.data)
			assert.Contains(t, bad.data, `"model":"`+tc.model+`"`)
			assert.Equal(t, normal[1].event, bad.event, "named like the event it precedes")
			assert.Equal(t, eventNames(normal), eventNames(append(frames[:1:1], frames[2:]...)))
			for i, f := range frames {
				if i != 1 && f.data != "[DONE]" {
					assert.True(t, gjson.Valid(f.data), "frame %d: %s", i, f.data)
				}
			}
		})
	}
}

func TestNoDone(t *testing.T) {
	srv := start(t, Config{})
	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"m+no-done","stream":true,"stream_options":{"include_usage":true}}`)
	last := frames[len(frames)-1]
	assert.NotEqual(t, "[DONE]", last.data)
	assert.Equal(t, int64(10), last.json().Get("usage.completion_tokens").Int(), "the usage chunk is the last")
	assert.Equal(t, "stop", frames[len(frames)-2].json().Get("choices.0.finish_reason").String())
	var text strings.Builder
	for _, f := range frames {
		text.WriteString(f.json().Get("choices.0.delta.content").String())
	}
	assert.Equal(t, ReplyText, text.String())

	_, frames = streamCall(t, srv, "/v1/chat/completions", `{"model":"m+no-done+usage-delay-10ms","stream":true}`)
	assert.Equal(t, "stop", frames[len(frames)-1].json().Get("choices.0.finish_reason").String())

	// Responses and Messages streams are as usual.
	_, frames = streamCall(t, srv, "/v1/responses", `{"model":"m+no-done","stream":true,"input":"hi"}`)
	assert.Equal(t, "response.completed", frames[len(frames)-1].event)
	_, frames = streamCall(t, srv, "/v1/messages", `{"model":"c+no-done","stream":true,"max_tokens":1,"messages":[]}`, anthropicVersion...)
	assert.Equal(t, "message_stop", frames[len(frames)-1].event)
}

// get sends a GET to srv+path with header name/value pairs and returns the status and JSON body.
func get(t *testing.T, srv *httptest.Server, path string, header ...string) (*http.Response, gjson.Result) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, gjson.ValidBytes(b), "body is not JSON: %s", b)
	return resp, gjson.ParseBytes(b)
}

func TestModels(t *testing.T) {
	srv := start(t, Config{APIKey: "sk-sim"})

	resp, got := get(t, srv, "/v1/models", "Authorization", "Bearer sk-sim")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "list", got.Get("object").String())
	require.NotEmpty(t, got.Get("data").Array())
	for _, m := range got.Get("data").Array() {
		assert.NotEmpty(t, m.Get("id").String())
		assert.Equal(t, "model", m.Get("object").String())
		assert.Positive(t, m.Get("created").Int())
		assert.NotEmpty(t, m.Get("owned_by").String())
	}
	assert.NotEmpty(t, resp.Header.Get("x-request-id"))

	resp, got = get(t, srv, "/anthropic/v1/models", "x-api-key", "sk-sim", "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.False(t, got.Get("object").Exists())
	data := got.Get("data").Array()
	require.NotEmpty(t, data)
	for _, m := range data {
		assert.Equal(t, "model", m.Get("type").String())
		assert.NotEmpty(t, m.Get("display_name").String())
		_, err := time.Parse(time.RFC3339, m.Get("created_at").String())
		assert.NoError(t, err)
	}
	assert.Equal(t, gjson.False, got.Get("has_more").Type)
	assert.Equal(t, data[0].Get("id").String(), got.Get("first_id").String())
	assert.Equal(t, data[len(data)-1].Get("id").String(), got.Get("last_id").String())
	assert.NotEmpty(t, resp.Header.Get("request-id"))

	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"openai bearer", []string{"Authorization", "Bearer sk-sim"}, 200},
		{"openai x-api-key is not accepted", []string{"x-api-key", "sk-sim"}, 401},
		{"openai wrong", []string{"Authorization", "Bearer nope"}, 401},
		{"anthropic bearer", []string{"Authorization", "Bearer sk-sim", "anthropic-version", "2023-06-01"}, 200},
		{"anthropic wrong", []string{"x-api-key", "nope", "anthropic-version", "2023-06-01"}, 401},
		{"anthropic missing", []string{"anthropic-version", "2023-06-01"}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := get(t, srv, "/v1/models", tc.header...)
			require.Equal(t, tc.want, resp.StatusCode)
			if tc.want == 401 && slices.Contains(tc.header, "anthropic-version") {
				assert.Equal(t, "authentication_error", got.Get("error.type").String())
			} else if tc.want == 401 {
				assert.Equal(t, "invalid_api_key", got.Get("error.code").String())
			}
		})
	}

	resp, got = jsonCall(t, srv, "/v1/models", `{}`, "Authorization", "Bearer sk-sim")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, http.MethodGet, resp.Header.Get("Allow"))
	assert.Equal(t, "invalid_request_error", got.Get("error.type").String())
}

func TestPathTokens(t *testing.T) {
	srv := start(t, Config{})
	resp, got := get(t, srv, "/down+fail-503+retry-after-1s/v1/models")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "server_error", got.Get("error.type").String())
	assert.Equal(t, "1", resp.Header.Get("retry-after"))

	resp, _ = get(t, srv, "/x/rate-limit/v1/models", "anthropic-version", "2023-06-01")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "segments split on / too")

	resp, got = jsonCall(t, srv, "/down+fail-502/v1/chat/completions", `{"model":"plain"}`)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, got.Get("error.message").String(), "plain")

	// Tokens of the path and of the model add up.
	resp, _ = jsonCall(t, srv, "/p+retry-after-5s/v1/chat/completions", `{"model":"m+rate-limit"}`)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("retry-after"))

	// Context-length on the model list makes no sense and is ignored there.
	resp, _ = get(t, srv, "/p+context-length/v1/models")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// ---- Schedules ----

func TestScheduleFirst(t *testing.T) {
	srv := start(t, Config{})
	statuses := func(path, model string, n int) []int {
		var out []int
		for range n {
			resp, _ := jsonCall(t, srv, path, `{"model":"`+model+`","max_tokens":1,"messages":[]}`, anthropicVersion...)
			out = append(out, resp.StatusCode)
		}
		return out
	}
	assert.Equal(t, []int{500, 200, 200}, statuses("/v1/chat/completions", "up+fail-500+first-1", 3))
	assert.Equal(t, []int{429, 429, 200}, statuses("/v1/messages", "up+rate-limit+first-2", 3))
	assert.Equal(t, []int{200, 200}, statuses("/v1/chat/completions", "up+fail-500+first-0", 2))
	assert.Equal(t, []int{503, 503, 503}, statuses("/v1/chat/completions", "up+fail-503", 3), "no schedule: always")
	assert.Equal(t, []int{500, 200}, statuses("/v1/chat/completions", "other+fail-500+first-1", 2), "each name counts on its own")
	assert.Equal(t, []int{200}, statuses("/v1/chat/completions", "up+fail-500+first-1", 1), "and keeps its count")

	// Trait tokens outlast the schedule.
	resp, got := jsonCall(t, srv, "/v1/chat/completions", `{"model":"t+fail-500+tool-call+first-1","tools":[{"type":"function","function":{"name":"f"}}]}`)
	require.Equal(t, 500, resp.StatusCode)
	assert.NotEmpty(t, got.Get("error").String())
	resp, got = jsonCall(t, srv, "/v1/chat/completions", `{"model":"t+fail-500+tool-call+first-1","tools":[{"type":"function","function":{"name":"f"}}]}`)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "f", got.Get("choices.0.message.tool_calls.0.function.name").String())

	// A reset once, then an answer.
	body := `{"model":"r+reset+first-1"}`
	_, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.Error(t, err)
	resp, got = jsonCall(t, srv, "/v1/chat/completions", body)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, ReplyText, got.Get("choices.0.message.content").String())

	// Streams: a malformed event once, then a clean stream.
	_, frames := streamCall(t, srv, "/v1/chat/completions", `{"model":"s+malformed-event+first-1","stream":true}`)
	assert.False(t, gjson.Valid(frames[1].data))
	_, frames = streamCall(t, srv, "/v1/chat/completions", `{"model":"s+malformed-event+first-1","stream":true}`)
	for _, f := range frames[:len(frames)-1] {
		assert.True(t, gjson.Valid(f.data), f.data)
	}
}

func TestScheduleFirstConcurrent(t *testing.T) {
	srv := start(t, Config{})
	const n = 20
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"c+fail-503+first-3"}`))
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[int]int{503: 3, 200: n - 3}, count)
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestScheduleFor(t *testing.T) {
	h := New(Config{})
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	h.(*server).schedules.now = clock.Now
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	status := func(path, model string) int {
		resp, _ := jsonCall(t, srv, path, `{"model":"`+model+`"}`)
		return resp.StatusCode
	}
	get := func(path string) int {
		resp, _ := get(t, srv, path)
		return resp.StatusCode
	}

	clock.Advance(time.Hour) // the window starts at the first request, not at start-up
	assert.Equal(t, 503, status("/v1/chat/completions", "up+fail-503+for-60s"))
	assert.Equal(t, 503, get("/down+fail-503+for-60s/v1/models"))
	clock.Advance(59 * time.Second)
	assert.Equal(t, 503, status("/v1/chat/completions", "up+fail-503+for-60s"))
	assert.Equal(t, 503, get("/down+fail-503+for-60s/v1/models"))
	clock.Advance(time.Second)
	assert.Equal(t, 200, status("/v1/chat/completions", "up+fail-503+for-60s"))
	assert.Equal(t, 200, get("/down+fail-503+for-60s/v1/models"))
	assert.Equal(t, 200, status("/down+fail-503+for-60s/v1/chat/completions", "plain"), "the path's window is shared")
	assert.Equal(t, 503, status("/v1/chat/completions", "later+fail-503+for-60s"), "another name has its own window")

	// With both, the faults apply while both allow.
	assert.Equal(t, 429, status("/v1/chat/completions", "b+rate-limit+first-2+for-10s"))
	assert.Equal(t, 429, status("/v1/chat/completions", "b+rate-limit+first-2+for-10s"))
	assert.Equal(t, 200, status("/v1/chat/completions", "b+rate-limit+first-2+for-10s"), "count used up")
	assert.Equal(t, 429, status("/v1/chat/completions", "b2+rate-limit+first-2+for-10s"))
	clock.Advance(10 * time.Second)
	assert.Equal(t, 200, status("/v1/chat/completions", "b2+rate-limit+first-2+for-10s"), "time used up")
}

func TestScheduleBound(t *testing.T) {
	s := newSchedules()
	parts := strings.Split("u+fail-500+first-1", "+")
	name := func(i int) string { return fmt.Sprintf("u%d+fail-500+first-1", i) }
	key := func(i int) scheduleKey { return modelKey(name(i)) }
	assert.Equal(t, parts, s.active(key(0), parts))
	assert.Empty(t, s.active(key(0), parts), "name 0 has had its one fault")
	for i := 1; i <= maxScheduled; i++ {
		s.active(key(i), parts)
	}
	assert.Equal(t, maxScheduled, len(s.states))
	assert.Equal(t, maxScheduled, len(s.order))
	assert.Equal(t, parts, s.active(key(0), parts), "the oldest name was forgotten and starts over")
	assert.Empty(t, s.active(key(maxScheduled), parts), "recent names are remembered")
	assert.Equal(t, parts, s.active(pathKey(name(maxScheduled)), parts),
		"a path prefix and a model name never share a schedule")
}
