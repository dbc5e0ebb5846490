package integration

// The official Go SDKs of both API families, driven against the gateway as a user of
// each SDK would configure them: only the base URL and the key point at Switchyard.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	antoption "github.com/anthropics/anthropic-sdk-go/option"
	anthropic2 "github.com/anthropics/anthropic-sdk-go/v2"
	antoption2 "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// sdkCallTimeout bounds every SDK call, so that a gateway that hangs fails the test
// instead of the whole package run.
const sdkCallTimeout = 10 * time.Second

func sdkCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), sdkCallTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wireAttempt is one HTTP exchange an SDK made, as seen by its own middleware.
type wireAttempt struct {
	reqHeader  http.Header
	status     int
	respHeader http.Header
}

// wireLog records what an SDK put on the wire. Its middleware signature matches the
// Middleware type of all three SDKs (each is an alias of the same function type).
type wireLog struct {
	mu       sync.Mutex
	attempts []wireAttempt
}

func (w *wireLog) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	a := wireAttempt{reqHeader: req.Header.Clone()}
	res, err := next(req)
	if res != nil {
		a.status = res.StatusCode
		a.respHeader = res.Header.Clone()
	}
	w.mu.Lock()
	w.attempts = append(w.attempts, a)
	w.mu.Unlock()
	return res, err
}

func (w *wireLog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.attempts = nil
}

func (w *wireLog) all() []wireAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireAttempt(nil), w.attempts...)
}

func (w *wireLog) last(t *testing.T) wireAttempt {
	t.Helper()
	all := w.all()
	require.NotEmpty(t, all, "the SDK made no request")
	return all[len(all)-1]
}

// assertHidden fails when a raw body an SDK decoded names the upstream.
func (g *gateway) assertHidden(t *testing.T, raw string) {
	t.Helper()
	for _, secret := range []string{upstreamPrefix, upstreamCred, g.up.hostport(), testKey} {
		assert.NotContains(t, raw, secret, "the SDK received %q", secret)
	}
}

// assertSDKHeadersForwarded checks that the SDK's own headers (its user agent and
// X-Stainless-* telemetry, retry count and timeout) reached the upstream as sent: client
// headers leave by an allowlist, and one an SDK sends must be on it or dropped on purpose.
func assertSDKHeadersForwarded(t *testing.T, sent, seen http.Header) {
	t.Helper()
	n := 0
	for name, values := range sent {
		if name == "User-Agent" || strings.HasPrefix(name, "X-Stainless-") {
			n++
			assert.Equal(t, values, seen[name], "the SDK's %s reached the upstream", name)
		}
	}
	assert.GreaterOrEqual(t, n, 3, "the SDK sent its own headers: %v", sent)
}

// assertUpstreamCredentialOnly checks that the last upstream request carried the
// candidate's credential and nothing of the gateway key.
func (g *gateway) assertUpstreamCredentialOnly(t *testing.T) seenRequest {
	t.Helper()
	seen := g.up.last(t)
	for name, values := range seen.Header {
		for _, v := range values {
			assert.NotContains(t, v, testKey, "the gateway key reached the upstream in %s", name)
		}
	}
	return seen
}

// ---------------------------------------------------------------------------
// OpenAI Go SDK (github.com/openai/openai-go/v3): chat completions, responses, models.

func TestOpenAIGoSDK(t *testing.T) {
	g := startGateway(t)
	var wire wireLog
	client := openai.NewClient(
		oaoption.WithBaseURL(g.base+"/v1"),
		oaoption.WithAPIKey(testKey),
		oaoption.WithMaxRetries(0),
		oaoption.WithMiddleware(wire.middleware),
	)
	hi := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}

	t.Run("chat completion", func(t *testing.T) {
		c, err := client.Chat.Completions.New(sdkCtx(t), openai.ChatCompletionNewParams{
			Model:    "chat-a",
			Messages: hi,
		})
		require.NoError(t, err)
		assert.Equal(t, "chat-a", c.Model)
		require.Len(t, c.Choices, 1)
		assert.Equal(t, simulator.ReplyText, c.Choices[0].Message.Content)
		assert.Equal(t, "stop", c.Choices[0].FinishReason)
		assert.Positive(t, c.Usage.CompletionTokens)
		assert.Positive(t, c.Usage.PromptTokens)
		g.assertHidden(t, c.RawJSON())
		assert.Equal(t, "Bearer "+testKey, wire.last(t).reqHeader.Get("Authorization"))
		seen := g.assertUpstreamCredentialOnly(t)
		assert.Equal(t, "Bearer "+upstreamCred, seen.Header.Get("Authorization"))
		assertSDKHeadersForwarded(t, wire.last(t).reqHeader, seen.Header)
	})

	t.Run("chat completion streamed with usage", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(sdkCtx(t), openai.ChatCompletionNewParams{
			Model:         "chat-a",
			Messages:      hi,
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var text strings.Builder
		chunks, usageChunks := 0, 0
		var usage openai.CompletionUsage
		for stream.Next() {
			chunk := stream.Current()
			chunks++
			require.True(t, acc.AddChunk(chunk), "the accumulator rejected chunk %d: %s", chunks, chunk.RawJSON())
			assert.Equal(t, "chat-a", chunk.Model, "chunk %d", chunks)
			g.assertHidden(t, chunk.RawJSON())
			for _, choice := range chunk.Choices {
				text.WriteString(choice.Delta.Content)
			}
			if chunk.JSON.Usage.Valid() && len(chunk.Choices) == 0 {
				usageChunks++
				usage = chunk.Usage
			}
		}
		require.NoError(t, stream.Err())
		assert.Greater(t, chunks, 1)
		assert.Equal(t, simulator.ReplyText, text.String())
		require.Len(t, acc.Choices, 1)
		assert.Equal(t, simulator.ReplyText, acc.Choices[0].Message.Content)
		assert.Equal(t, "chat-a", acc.Model)
		assert.Equal(t, 1, usageChunks, "exactly one usage chunk (the one the client asked for)")
		assert.Positive(t, usage.CompletionTokens)
		assert.Positive(t, usage.TotalTokens)
		assert.Equal(t, usage.CompletionTokens, acc.Usage.CompletionTokens)
	})

	t.Run("chat completion streamed without usage", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(sdkCtx(t), openai.ChatCompletionNewParams{
			Model:    "chat-a",
			Messages: hi,
		})
		defer stream.Close()
		var text strings.Builder
		for stream.Next() {
			chunk := stream.Current()
			assert.Equal(t, "chat-a", chunk.Model)
			assert.NotEmpty(t, chunk.Choices, "no usage chunk the client did not ask for: %s", chunk.RawJSON())
			for _, choice := range chunk.Choices {
				text.WriteString(choice.Delta.Content)
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, simulator.ReplyText, text.String())
	})

	t.Run("responses", func(t *testing.T) {
		r, err := client.Responses.New(sdkCtx(t), responses.ResponseNewParams{
			Model: "chat-a",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		require.NoError(t, err)
		assert.Equal(t, "chat-a", r.Model)
		assert.Equal(t, simulator.ReplyText, r.OutputText())
		assert.Equal(t, responses.ResponseStatusCompleted, r.Status)
		assert.Positive(t, r.Usage.OutputTokens)
		g.assertHidden(t, r.RawJSON())
	})

	t.Run("responses streamed", func(t *testing.T) {
		stream := client.Responses.NewStreaming(sdkCtx(t), responses.ResponseNewParams{
			Model: "chat-a",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		defer stream.Close()
		var text strings.Builder
		var types []string
		var completed *responses.Response
		lastSeq := int64(-1)
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			g.assertHidden(t, ev.RawJSON())
			assert.Greater(t, ev.SequenceNumber, lastSeq, "sequence numbers increase (%s)", ev.Type)
			lastSeq = ev.SequenceNumber
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.AsResponseOutputTextDelta().Delta)
			case "response.created", "response.in_progress":
				assert.Equal(t, "chat-a", ev.Response.Model, ev.Type)
			case "response.completed":
				r := ev.AsResponseCompleted().Response
				completed = &r
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, simulator.ReplyText, text.String(), "events: %v", types)
		require.NotNil(t, completed, "no response.completed event; events: %v", types)
		assert.Equal(t, "response.completed", types[len(types)-1])
		assert.Equal(t, "chat-a", completed.Model)
		assert.Equal(t, simulator.ReplyText, completed.OutputText())
		assert.Positive(t, completed.Usage.OutputTokens)
	})

	t.Run("models list", func(t *testing.T) {
		page, err := client.Models.List(sdkCtx(t))
		require.NoError(t, err)
		assert.Equal(t, "list", page.Object)
		protocols := map[string][]string{}
		for _, m := range page.Data {
			assert.Equal(t, "model", string(m.Object), m.ID)
			var ps []string
			for _, p := range gjson.Get(m.RawJSON(), "protocols").Array() {
				ps = append(ps, p.Str)
			}
			protocols[m.ID] = ps
		}
		require.Contains(t, protocols, "chat-a")
		assert.Equal(t, []string{"family_a"}, protocols["chat-a"], "protocols of chat-a read from the raw entry")
		assert.Equal(t, []string{"family_a", "family_b"}, protocols["Both-AB"])
		g.assertHidden(t, page.RawJSON())

		one, err := client.Models.Get(sdkCtx(t), "chat-a")
		require.NoError(t, err)
		assert.Equal(t, "chat-a", one.ID)
	})

	t.Run("unknown model is a 404 openai.Error", func(t *testing.T) {
		before := g.up.count()
		_, err := client.Chat.Completions.New(sdkCtx(t), openai.ChatCompletionNewParams{
			Model:    "no-such-model",
			Messages: hi,
		})
		require.Error(t, err)
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "want *openai.Error, got %T: %v", err, err)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
		assert.Equal(t, "invalid_request_error", apiErr.Type)
		assert.NotEmpty(t, apiErr.Message)
		assert.Equal(t, before, g.up.count(), "an unknown model reaches no upstream")

		wire.reset()
		_, err = client.Responses.New(sdkCtx(t), responses.ResponseNewParams{
			Model: "no-such-model",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		require.True(t, errors.As(err, &apiErr), "want *openai.Error, got %T: %v", err, err)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
		assert.Len(t, wire.all(), 1)
	})
}

// ---------------------------------------------------------------------------
// Anthropic Go SDK v1 (anthropic-version 2023-06-01, key in X-Api-Key).

func newAnthropicV1(g *gateway, wire *wireLog, extra ...antoption.RequestOption) anthropic.Client {
	opts := []antoption.RequestOption{
		antoption.WithoutEnvironmentDefaults(), // nothing from the developer's environment or profile
		antoption.WithBaseURL(g.base),
		antoption.WithAPIKey(testKey),
		antoption.WithMaxRetries(0),
		antoption.WithMiddleware(wire.middleware),
	}
	return anthropic.NewClient(append(opts, extra...)...)
}

func TestAnthropicGoSDKv1(t *testing.T) {
	g := startGateway(t)
	var wire wireLog
	client := newAnthropicV1(g, &wire)
	hi := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}

	t.Run("messages", func(t *testing.T) {
		m, err := client.Messages.New(sdkCtx(t), anthropic.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 256,
			Messages:  hi,
		})
		require.NoError(t, err)
		assert.Equal(t, "msg-b", m.Model)
		require.Len(t, m.Content, 1)
		assert.Equal(t, "text", m.Content[0].Type)
		assert.Equal(t, simulator.ReplyText, m.Content[0].Text)
		assert.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
		assert.Positive(t, m.Usage.InputTokens)
		assert.Positive(t, m.Usage.OutputTokens)
		g.assertHidden(t, m.RawJSON())

		sent := wire.last(t).reqHeader
		assert.Equal(t, testKey, sent.Get("X-Api-Key"), "SDK v1 sends the key in X-Api-Key")
		assert.Equal(t, "2023-06-01", sent.Get("Anthropic-Version"))
		seen := g.assertUpstreamCredentialOnly(t)
		assert.Equal(t, upstreamCred, seen.Header.Get("X-Api-Key"))
		assert.Equal(t, "2023-06-01", seen.Header.Get("Anthropic-Version"))
		assertSDKHeadersForwarded(t, sent, seen.Header)
		assert.Equal(t, upstreamPrefix+"-b", gjson.GetBytes(seen.Body, "model").Str)
	})

	t.Run("messages streamed", func(t *testing.T) {
		stream := client.Messages.NewStreaming(sdkCtx(t), anthropic.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 256,
			Messages:  hi,
		})
		defer stream.Close()
		var msg anthropic.Message
		var types []string
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			g.assertHidden(t, ev.RawJSON())
			require.NoError(t, msg.Accumulate(ev), "event %s", ev.Type)
		}
		require.NoError(t, stream.Err())
		require.NotEmpty(t, types)
		assert.Equal(t, "message_start", types[0])
		assert.Equal(t, "message_stop", types[len(types)-1])
		assert.Equal(t, "msg-b", msg.Model)
		require.Len(t, msg.Content, 1, "events: %v", types)
		assert.Equal(t, "text", msg.Content[0].Type)
		assert.Equal(t, simulator.ReplyText, msg.Content[0].Text)
		assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
		assert.Positive(t, msg.Usage.OutputTokens)
	})

	t.Run("messages with extended thinking", func(t *testing.T) {
		m, err := client.Messages.New(sdkCtx(t), anthropic.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 4096,
			Messages:  hi,
			Thinking:  anthropic.ThinkingConfigParamOfEnabled(1024),
		})
		require.NoError(t, err)
		assert.Equal(t, "msg-b", m.Model)
		require.Len(t, m.Content, 2, "%s", m.RawJSON())
		assert.Equal(t, "thinking", m.Content[0].Type)
		assert.NotEmpty(t, m.Content[0].Thinking)
		assert.NotEmpty(t, m.Content[0].Signature)
		assert.Equal(t, "text", m.Content[1].Type)
		assert.Equal(t, simulator.ReplyText, m.Content[1].Text)
		assert.Equal(t, int64(1024), gjson.GetBytes(g.up.last(t).Body, "thinking.budget_tokens").Int())
	})

	t.Run("messages streamed with extended thinking", func(t *testing.T) {
		stream := client.Messages.NewStreaming(sdkCtx(t), anthropic.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 4096,
			Messages:  hi,
			Thinking:  anthropic.ThinkingConfigParamOfEnabled(1024),
		})
		defer stream.Close()
		var msg anthropic.Message
		for stream.Next() {
			require.NoError(t, msg.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, "msg-b", msg.Model)
		require.Len(t, msg.Content, 2)
		assert.Equal(t, "thinking", msg.Content[0].Type)
		assert.NotEmpty(t, msg.Content[0].Thinking)
		assert.Equal(t, simulator.ReplyText, msg.Content[1].Text)
	})

	t.Run("count tokens", func(t *testing.T) {
		n, err := client.Messages.CountTokens(sdkCtx(t), anthropic.MessageCountTokensParams{
			Model:    "msg-b",
			Messages: hi,
		})
		require.NoError(t, err)
		assert.Positive(t, n.InputTokens)
		assert.Equal(t, "/v1/messages/count_tokens", g.up.last(t).Path)
	})

	t.Run("models list", func(t *testing.T) {
		page, err := client.Models.List(sdkCtx(t), anthropic.ModelListParams{})
		require.NoError(t, err)
		ids := map[string]anthropic.ModelInfo{}
		for _, m := range page.Data {
			ids[m.ID] = m
		}
		require.Contains(t, ids, "msg-b")
		assert.NotEmpty(t, ids["msg-b"].DisplayName)
		assert.False(t, ids["msg-b"].CreatedAt.IsZero())
		assert.False(t, page.HasMore)
		g.assertHidden(t, page.RawJSON())

		// The auto-pager must stop after the one page rather than loop on it.
		pager := client.Models.ListAutoPaging(sdkCtx(t), anthropic.ModelListParams{})
		n := 0
		for pager.Next() {
			n++
			require.LessOrEqual(t, n, len(page.Data), "the auto-pager repeats models")
		}
		require.NoError(t, pager.Err())
		assert.Equal(t, len(page.Data), n)
	})

	t.Run("family_a-only model fails fast with 503 despite SDK retries", func(t *testing.T) {
		var retryWire wireLog
		retrying := newAnthropicV1(g, &retryWire, antoption.WithMaxRetries(2)) // the SDK default
		before := g.up.count()
		start := time.Now()
		_, err := retrying.Messages.New(sdkCtx(t), anthropic.MessageNewParams{
			Model:     "chat-a",
			MaxTokens: 256,
			Messages:  hi,
		})
		elapsed := time.Since(start)
		require.Error(t, err)
		var apiErr *anthropic.Error
		require.True(t, errors.As(err, &apiErr), "want *anthropic.Error, got %T: %v", err, err)
		assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
		assert.Equal(t, anthropic.ErrorTypeOverloadedError, apiErr.Type())
		assert.Less(t, elapsed, time.Second, "the SDK must not have retried")
		attempts := retryWire.all()
		assert.Len(t, attempts, 1, "one attempt, no retries")
		if len(attempts) > 0 {
			assert.Equal(t, "false", attempts[0].respHeader.Get("X-Should-Retry"))
		}
		assert.Equal(t, before, g.up.count(), "a protocol mismatch reaches no upstream")
		g.assertHidden(t, apiErr.RawJSON())
	})
}

// ---------------------------------------------------------------------------
// Anthropic Go SDK v2 (anthropic-version 2026-10-21, key as Authorization: Bearer).

func TestAnthropicGoSDKv2(t *testing.T) {
	g := startGateway(t)
	var wire wireLog
	client := anthropic2.NewClient(
		antoption2.WithoutEnvironmentDefaults(),
		antoption2.WithBaseURL(g.base),
		antoption2.WithAPIKey(testKey),
		antoption2.WithMaxRetries(0),
		antoption2.WithMiddleware(wire.middleware),
	)
	hi := []anthropic2.MessageParam{anthropic2.NewUserMessage(anthropic2.NewTextBlock("hi"))}

	// upstreamSawNativeHeaders checks what the SDK sent and what the upstream got in its place.
	upstreamSawNativeHeaders := func(t *testing.T) {
		t.Helper()
		sent := wire.last(t).reqHeader
		assert.Equal(t, "Bearer "+testKey, sent.Get("Authorization"), "SDK v2 sends the key as a bearer token")
		assert.Empty(t, sent.Get("X-Api-Key"))
		assert.Equal(t, "2026-10-21", sent.Get("Anthropic-Version"))

		seen := g.assertUpstreamCredentialOnly(t)
		assert.Equal(t, "2026-10-21", seen.Header.Get("Anthropic-Version"), "the client's version is forwarded")
		assert.Equal(t, upstreamCred, seen.Header.Get("X-Api-Key"), "the candidate credential in the native header")
		assert.Empty(t, seen.Header.Get("Authorization"), "no bearer token reaches a family_b upstream")
		assertSDKHeadersForwarded(t, sent, seen.Header)
	}

	t.Run("messages", func(t *testing.T) {
		m, err := client.Messages.New(sdkCtx(t), anthropic2.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 256,
			Messages:  hi,
		})
		require.NoError(t, err)
		assert.Equal(t, "msg-b", m.Model)
		require.Len(t, m.Content, 1)
		assert.Equal(t, "text", m.Content[0].Type)
		assert.Equal(t, simulator.ReplyText, m.Content[0].Text)
		assert.Equal(t, anthropic2.StopReasonEndTurn, m.StopReason)
		assert.Positive(t, m.Usage.InputTokens)
		assert.Positive(t, m.Usage.OutputTokens)
		g.assertHidden(t, m.RawJSON())
		upstreamSawNativeHeaders(t)
	})

	t.Run("messages streamed", func(t *testing.T) {
		stream := client.Messages.NewStreaming(sdkCtx(t), anthropic2.MessageNewParams{
			Model:     "msg-b",
			MaxTokens: 256,
			Messages:  hi,
		})
		defer stream.Close()
		var msg anthropic2.Message
		var types []string
		for stream.Next() {
			ev := stream.Current()
			types = append(types, ev.Type)
			g.assertHidden(t, ev.RawJSON())
			require.NoError(t, msg.Accumulate(ev), "event %s", ev.Type)
		}
		require.NoError(t, stream.Err())
		require.NotEmpty(t, types)
		assert.Equal(t, "message_stop", types[len(types)-1])
		assert.Equal(t, "msg-b", msg.Model)
		require.Len(t, msg.Content, 1, "events: %v", types)
		assert.Equal(t, simulator.ReplyText, msg.Content[0].Text)
		assert.Equal(t, anthropic2.StopReasonEndTurn, msg.StopReason)
		assert.True(t, gjson.GetBytes(g.up.last(t).Body, "stream").Bool())
		upstreamSawNativeHeaders(t)
	})

	t.Run("models list", func(t *testing.T) {
		page, err := client.Models.List(sdkCtx(t), anthropic2.ModelListParams{})
		require.NoError(t, err)
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		assert.Contains(t, ids, "msg-b")
		assert.Contains(t, ids, "chat-a")
		assert.False(t, page.HasMore)
		g.assertHidden(t, page.RawJSON())
		sent := wire.last(t).reqHeader
		assert.Equal(t, "Bearer "+testKey, sent.Get("Authorization"))
	})
}

// ---------------------------------------------------------------------------
// Model limits in GET /v1/models, as each official Go SDK parses them.

// The models list with declared limits still parses in every SDK, and the Family B SDKs
// decode the window and the cap into their typed fields (max_input_tokens, max_tokens);
// the OpenAI SDK keeps them in the raw entry. A model without limits has none.
func TestModelLimitsInTheSDKs(t *testing.T) {
	up := newUpstream(t)
	g := startGatewayWith(t, up, windowModels(up), "")
	want := map[string][2]int64{"win-gpt": {winGPTWindow, winGPTCap}, "win-claude": {winClaudeWindow, winClaudeCap}, "plain-a": {0, 0}}

	t.Run("OpenAI", func(t *testing.T) {
		client := openai.NewClient(oaoption.WithBaseURL(g.base+"/v1"), oaoption.WithAPIKey(testKey), oaoption.WithMaxRetries(0))
		page, err := client.Models.List(sdkCtx(t))
		require.NoError(t, err)
		got := map[string][2]int64{}
		for _, m := range page.Data {
			raw := gjson.Parse(m.RawJSON())
			got[m.ID] = [2]int64{raw.Get("context_window").Int(), raw.Get("max_output_tokens").Int()}
		}
		assert.Equal(t, want, got)
		one, err := client.Models.Get(sdkCtx(t), "win-gpt")
		require.NoError(t, err)
		assert.Equal(t, int64(winGPTWindow), gjson.Get(one.RawJSON(), "context_window").Int())
	})

	t.Run("Anthropic v1", func(t *testing.T) {
		var wire wireLog
		client := newAnthropicV1(g, &wire)
		page, err := client.Models.List(sdkCtx(t), anthropic.ModelListParams{})
		require.NoError(t, err)
		got := map[string][2]int64{}
		for _, m := range page.Data {
			got[m.ID] = [2]int64{m.MaxInputTokens, m.MaxTokens}
		}
		assert.Equal(t, want, got, "max_input_tokens and max_tokens decoded into the typed fields")
		one, err := client.Models.Get(sdkCtx(t), "win-claude", anthropic.ModelGetParams{})
		require.NoError(t, err)
		assert.Equal(t, int64(winClaudeWindow), one.MaxInputTokens)
		assert.Equal(t, int64(winClaudeCap), one.MaxTokens)
	})

	t.Run("Anthropic v2", func(t *testing.T) {
		client := anthropic2.NewClient(antoption2.WithoutEnvironmentDefaults(), antoption2.WithBaseURL(g.base),
			antoption2.WithAPIKey(testKey), antoption2.WithMaxRetries(0))
		page, err := client.Models.List(sdkCtx(t), anthropic2.ModelListParams{})
		require.NoError(t, err)
		got := map[string][2]int64{}
		for _, m := range page.Data {
			got[m.ID] = [2]int64{m.MaxInputTokens, m.MaxTokens}
		}
		assert.Equal(t, want, got)
		one, err := client.Models.Get(sdkCtx(t), "win-claude", anthropic2.ModelGetParams{})
		require.NoError(t, err)
		assert.Equal(t, int64(winClaudeCap), one.MaxTokens)
	})

	// An output cap above the model's is refused before any upstream is called, in each
	// family's envelope, naming the field: what each SDK surfaces as its error.
	t.Run("a larger output cap is 400", func(t *testing.T) {
		before := up.count()
		oa := openai.NewClient(oaoption.WithBaseURL(g.base+"/v1"), oaoption.WithAPIKey(testKey), oaoption.WithMaxRetries(0))
		_, err := oa.Chat.Completions.New(sdkCtx(t), openai.ChatCompletionNewParams{
			Model: "win-gpt", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			MaxCompletionTokens: openai.Int(winGPTCap + 1),
		})
		var oaErr *openai.Error
		require.True(t, errors.As(err, &oaErr), "want *openai.Error, got %T: %v", err, err)
		assert.Equal(t, http.StatusBadRequest, oaErr.StatusCode)
		assert.Equal(t, "max_completion_tokens", oaErr.Param)
		assert.Contains(t, oaErr.Message, "100000")

		_, err = oa.Responses.New(sdkCtx(t), responses.ResponseNewParams{
			Model: "win-gpt", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			MaxOutputTokens: openai.Int(winGPTCap + 1),
		})
		require.True(t, errors.As(err, &oaErr), "want *openai.Error, got %T: %v", err, err)
		assert.Equal(t, "max_output_tokens", oaErr.Param)

		// The Family B SDKs refuse a non-streamed request this large themselves (they
		// expect it to take over ten minutes), so this one goes on the wire as is.
		body := `{"model":"win-claude","max_tokens":` + strconv.Itoa(winClaudeCap+1) + `,"messages":[{"role":"user","content":"hi"}]}`
		r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", "2023-06-01")
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
		assert.Equal(t, "error", gjson.GetBytes(r.Body, "type").String(), "Family B envelope: %s", r.Body)
		assert.Equal(t, "invalid_request_error", gjson.GetBytes(r.Body, "error.type").String())
		assert.Contains(t, gjson.GetBytes(r.Body, "error.message").String(), "max_tokens")
		assert.Contains(t, gjson.GetBytes(r.Body, "error.message").String(), strconv.Itoa(winClaudeCap))
		assert.Equal(t, before, up.count(), "no upstream was called")

		// At the cap, the request goes through.
		body = `{"model":"win-claude","max_tokens":` + strconv.Itoa(winClaudeCap) + `,"messages":[{"role":"user","content":"hi"}]}`
		r = g.call(t, "POST", "/v1/messages", body, "anthropic-version", "2023-06-01")
		assert.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	})
}
