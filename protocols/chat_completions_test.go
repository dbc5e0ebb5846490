package protocols_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestEventStreamUsageChunk(t *testing.T) {
	const (
		usageOnly  = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n"
		usageAtEnd = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n"
		nullUsage  = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}` + "\n\n"
	)
	cases := []struct {
		name      string
		in        string
		drop      bool
		want      string
		keep      bool
		wantUsage *protocols.Usage
	}{
		{"usage-only chunk the gateway asked for is removed", usageOnly, true, "", false, &protocols.Usage{Input: 5, Output: 2}},
		{"usage-only chunk the client asked for is kept", usageOnly, false, strings.Replace(usageOnly, `"gpt-4o"`, `"acme/chat"`, 1), true, &protocols.Usage{Input: 5, Output: 2}},
		{"usage riding on a chunk with choices is kept", usageAtEnd, true, strings.Replace(usageAtEnd, `"gpt-4o"`, `"acme/chat"`, 1), true, &protocols.Usage{Input: 5, Output: 2}},
		{"null usage is no usage", nullUsage, true, strings.Replace(nullUsage, `"gpt-4o"`, `"acme/chat"`, 1), true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := protocols.NewEventStream(protocols.KindChat, "acme/chat", tc.drop, protocols.Scrubber{})
			s.Push([]byte(tc.in))
			ev, ok := s.Next()
			require.True(t, ok)
			dst := []byte("prev|")
			out, keep := s.AppendRewritten(dst, ev)
			assert.Equal(t, tc.keep, keep)
			assert.Equal(t, "prev|"+tc.want, string(out))
			if tc.wantUsage == nil {
				assert.False(t, s.Obs.UsageReported)
			} else {
				assert.Equal(t, *tc.wantUsage, s.Obs.Usage)
			}
		})
	}

	t.Run("drop only in chat", func(t *testing.T) {
		// The flag means nothing for the other shapes: their usage rides on events the
		// client needs.
		for _, name := range []string{"responses.upstream.sse", "messages.upstream.sse"} {
			kind := protocols.KindResponses
			if strings.HasPrefix(name, "messages") {
				kind = protocols.KindMessages
			}
			up := readFixture(t, name)
			withDrop := run(protocols.NewEventStream(kind, "svc", true, protocols.Scrubber{}), [][]byte{up})
			without := run(protocols.NewEventStream(kind, "svc", false, protocols.Scrubber{}), [][]byte{up})
			assert.Equal(t, string(without), string(withDrop))
		}
	})
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

// The upstream writes n answers: n is 1..128 as OpenAI accepts it, and admission learns
// how many answers it reserves for.
func TestChatChoicesAreValidatedAndCounted(t *testing.T) {
	for _, n := range []string{`0`, `-1`, `129`, `"2"`, `2.5`, `2.0`, `1e2`, `true`, `[2]`, `{"n":2}`} {
		e := refusal(opChat, `{"model":"m","messages":[],"n":`+n+`}`)
		checkInvalid(t, e, protocols.FamilyA, "n")
	}
	for n, want := range map[string]int64{``: 1, `null`: 1, `1`: 1, `7`: 7, `128`: 128} {
		body := `{"model":"m","messages":[]}`
		if n != "" {
			body = `{"model":"m","messages":[],"n":` + n + `}`
		}
		assert.Equal(t, want, parseValid(t, opChat, body).Choices(opChat), body)
	}
	// Only chat completions multiplies: elsewhere n is no field of the shape.
	p, _ := protocols.ParseRequest(protocols.FamilyA, []byte(`{"model":"m","input":"hi","n":50}`))
	assert.Equal(t, int64(1), p.Choices(opResponses))
}

// Upstreams differ on which of chat's two caps wins, so two that differ are refused;
// the same value twice is one cap.
func TestChatCapsThatDisagreeAreRefused(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[],"max_tokens":1,"max_completion_tokens":100000}`,
		`{"model":"m","messages":[],"max_completion_tokens":100000,"max_tokens":1}`,
		`{"model":"m","messages":[],"max_completion_tokens":1,"max_tokens":99999999999999999999}`,
	} {
		e := refusal(opChat, body)
		checkInvalid(t, e, protocols.FamilyA, "max_tokens")
		assert.Contains(t, e.Message, "disagree", body)
		assert.Contains(t, e.Message, "max_completion_tokens", body)
	}
	p := parseValid(t, opChat, `{"model":"m","messages":[],"max_tokens":300,"max_completion_tokens":300}`)
	got, ok := p.OutputCap(opChat)
	assert.True(t, ok)
	assert.Equal(t, int64(300), got)
	// null is no cap: it does not disagree.
	parseValid(t, opChat, `{"model":"m","messages":[],"max_tokens":null,"max_completion_tokens":300}`)
}

func TestPrepareRequestBodyUsageInjection(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{
			name: "no stream_options",
			in:   `{"model":"acme/chat","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "model after stream, python separators",
			in:   `{"messages": [{"role": "user", "content": "hi"}], "stream": true, "model": "acme/chat"}`,
			want: `{"messages": [{"role": "user", "content": "hi"}], "stream": true, "model": "gpt-4o-mini-2024-07-18","stream_options":{"include_usage":true}}`,
		},
		{
			name: "include_usage false",
			in:   `{"model":"acme/chat","stream":true,"stream_options":{"include_usage":false},"messages":[]}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
		},
		{
			name: "include_usage null",
			in:   `{"model":"acme/chat","stream":true,"stream_options":{"include_usage":null},"messages":[]}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
		},
		{
			name: "other stream option kept",
			in:   `{"model":"acme/chat","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[]}`,
		},
		{
			name: "empty stream_options",
			in:   `{"model":"acme/chat","stream":true,"stream_options":{},"messages":[]}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
		},
		{
			name: "null stream_options",
			in:   `{"model":"acme/chat","stream":true,"stream_options":null,"messages":[]}`,
			want: `{"model":"gpt-4o-mini-2024-07-18","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
		},
		{
			name: "stream_options before model",
			in:   `{"stream_options":{"include_usage":false},"stream":true,"messages":[],"model":"acme/chat"}`,
			want: `{"stream_options":{"include_usage":true},"stream":true,"messages":[],"model":"gpt-4o-mini-2024-07-18"}`,
		},
		{
			name: "pretty printed",
			in:   "{\n  \"model\": \"acme/chat\",\n  \"stream\": true,\n  \"messages\": []\n}",
			want: "{\n  \"model\": \"gpt-4o-mini-2024-07-18\",\n  \"stream\": true,\n  \"messages\": []\n,\"stream_options\":{\"include_usage\":true}}",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			orig := bytes.Clone(in)
			out, injected := protocols.PrepareRequestBody(opChat, in, "gpt-4o-mini-2024-07-18")
			assert.True(t, injected, "the usage chunk must be dropped later")
			assert.Equal(t, tc.want, string(out))
			assert.True(t, json.Valid(out))
			assert.Equal(t, orig, in, "the client's body is not modified")
		})
	}
}

// Chat streams relayed at the same time keep their own state: the usage-only chunk is
// dropped only from the stream whose usage the gateway asked for, and usage is final only
// in the stream whose choice finished.
func TestChatStreamsKeepTheirOwnState(t *testing.T) {
	const (
		finish    = `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
		usageOnly = `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}` + "\n\n"
	)
	asked := protocols.NewEventStream(protocols.KindChat, "acme/chat", true, protocols.Scrubber{})
	client := protocols.NewEventStream(protocols.KindChat, "acme/chat", false, protocols.Scrubber{})
	run(asked, [][]byte{[]byte(finish)})
	assert.Contains(t, string(run(client, [][]byte{[]byte(usageOnly)})), `"usage"`, "the client asked for this usage chunk")
	assert.Empty(t, run(asked, [][]byte{[]byte(usageOnly)}), "the gateway asked for this usage chunk")
	assert.True(t, asked.Obs.UsageFinal, "its choice finished before its usage")
	assert.False(t, client.Obs.UsageFinal, "no choice of its own finished")
}
