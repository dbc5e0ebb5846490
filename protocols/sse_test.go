package protocols_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// streamCase is a recorded upstream stream and what the client must receive.
type streamCase struct {
	finish   string // the finish reason the stream reports
	name     string
	kind     protocols.Kind
	service  string
	drop     bool            // the gateway asked for usage itself
	upstream string          // testdata file
	client   string          // testdata file
	usage    protocols.Usage // what the stream reports, in the gateway's terms
	lastSeq  int64
}

var streamCases = []streamCase{
	{
		name: "chat, usage injected by the gateway", kind: protocols.KindChat, service: "acme/chat", drop: true,
		upstream: "chat.upstream.sse", client: "chat.client.sse",
		usage:   protocols.Usage{Input: 19, Output: 31},
		lastSeq: -1, finish: "stop",
	},
	{
		name: "chat, usage asked for by the client", kind: protocols.KindChat, service: "acme/chat", drop: false,
		upstream: "chat.upstream.sse", client: "chat.client-usage.sse",
		usage:   protocols.Usage{Input: 19, Output: 31},
		lastSeq: -1, finish: "stop",
	},
	{
		name: "responses", kind: protocols.KindResponses, service: "acme/codex",
		upstream: "responses.upstream.sse", client: "responses.client.sse",
		usage:   protocols.Usage{Input: 2511, CachedInput: 2048, Output: 87, Reasoning: 64},
		lastSeq: 11, finish: "completed",
	},
	{
		name: "messages", kind: protocols.KindMessages, service: "acme/sonnet",
		upstream: "messages.upstream.sse", client: "messages.client.sse",
		// message_start: 472 input beside 2048 cache reads; message_delta: 89 output, 41 thinking.
		usage:   protocols.Usage{Input: 2520, CachedInput: 2048, Output: 89, Reasoning: 41},
		lastSeq: -1, finish: "end_turn",
	},
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func toCRLF(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) }

// run feeds chunks one Push at a time and drains every complete event after each Push,
// the way the relay does.
func run(s *protocols.EventStream, chunks [][]byte) []byte {
	var out []byte
	for _, c := range chunks {
		s.Push(c)
		for ev, ok := s.Next(); ok; ev, ok = s.Next() {
			out, _ = s.AppendRewritten(out, ev)
		}
	}
	return out
}

// eventEnds finds where each event of a recorded stream ends (just after its blank line),
// independently of the code under test.
func eventEnds(stream []byte, crlf bool) []int {
	sep := []byte("\n\n")
	if crlf {
		sep = []byte("\r\n\r\n")
	}
	var ends []int
	for off := 0; ; {
		i := bytes.Index(stream[off:], sep)
		if i < 0 {
			return ends
		}
		off += i + len(sep)
		ends = append(ends, off)
	}
}

func splitAt(b []byte, points ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, p := range points {
		out = append(out, b[prev:p])
		prev = p
	}
	return append(out, b[prev:])
}

func randomChunks(b []byte, r *rand.Rand, maxSize int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), 1+r.IntN(maxSize))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func TestEventStreamRewritesRecordedStreams(t *testing.T) {
	for _, tc := range streamCases {
		for _, crlf := range []bool{false, true} {
			name := tc.name
			up, want := readFixture(t, tc.upstream), readFixture(t, tc.client)
			if crlf {
				name += "/crlf"
				up, want = toCRLF(up), toCRLF(want)
			}
			t.Run(name, func(t *testing.T) {
				check := func(t *testing.T, how string, chunks [][]byte) {
					t.Helper()
					s := protocols.NewEventStream(tc.kind, tc.service, tc.drop, protocols.Scrubber{})
					got := run(s, chunks)
					if !assert.Equal(t, string(want), string(got), how) {
						t.FailNow()
					}
					assert.Zero(t, s.Buffered(), how)
					assert.Equal(t, tc.usage, s.Obs.Usage, how)
					assert.True(t, s.Obs.UsageReported && s.Obs.Complete, how)
					assert.True(t, s.Obs.UsageFinal, how)
					assert.Equal(t, tc.lastSeq, s.LastSequence(), how)
					assert.Equal(t, tc.finish, s.Obs.FinishReason, how)
				}

				check(t, "whole", [][]byte{up})

				byteByByte := make([][]byte, len(up))
				for i := range up {
					byteByByte[i] = up[i : i+1]
				}
				check(t, "byte by byte", byteByByte)

				for i := 1; i < len(up); i++ {
					check(t, "split in two", splitAt(up, i))
				}
				for i := 1; i+7 < len(up); i += 7 {
					check(t, "split in three", splitAt(up, i, i+7))
				}

				for seed := uint64(1); seed <= 200; seed++ {
					r := rand.New(rand.NewPCG(seed, 0x5eed))
					check(t, "random chunks", randomChunks(up, r, []int{3, 17, 64, 512, 4096}[seed%5]))
				}
			})
		}
	}
}

// TestEventStreamNoHoldingBack: each event comes out of Next at the very Push that
// completes it, never later, and exactly as the upstream wrote it.
func TestEventStreamNoHoldingBack(t *testing.T) {
	for _, tc := range streamCases {
		for _, crlf := range []bool{false, true} {
			up := readFixture(t, tc.upstream)
			if crlf {
				up = toCRLF(up)
			}
			ends := eventEnds(up, crlf)
			require.NotEmpty(t, ends)
			require.Equal(t, len(up), ends[len(ends)-1])

			s := protocols.NewEventStream(tc.kind, tc.service, tc.drop, protocols.Scrubber{})
			var got []int
			start := 0
			for i := range up {
				s.Push(up[i : i+1])
				for ev, ok := s.Next(); ok; ev, ok = s.Next() {
					got = append(got, i+1)
					assert.Equal(t, string(up[start:i+1]), string(ev.Raw), "event %d keeps its bytes", len(got))
					start = i + 1
				}
			}
			assert.Equal(t, ends, got, "%s crlf=%v: events returned as soon as complete", tc.name, crlf)
		}
	}
}

func TestEventStreamEventFields(t *testing.T) {
	up := readFixture(t, "messages.upstream.sse")
	s := protocols.NewEventStream(protocols.KindMessages, "acme/sonnet", false, protocols.Scrubber{})
	s.Push(toCRLF(up))
	var names []string
	for ev, ok := s.Next(); ok; ev, ok = s.Next() {
		names = append(names, string(ev.Name))
		assert.True(t, bytes.HasPrefix(ev.Data, []byte(`{"type":`)) || bytes.HasPrefix(ev.Data, []byte(`{"type": `)), "%q", ev.Data)
		assert.False(t, bytes.ContainsAny(ev.Data, "\r\n"), "data excludes the line end")
		assert.False(t, s.IsError(ev), string(ev.Name))
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_stop", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
}

func TestEventStreamPassThroughForms(t *testing.T) {
	// Frames that carry no JSON object are forwarded exactly as written.
	cases := []struct {
		name, in string
	}{
		{"done", "data: [DONE]\n\n"},
		{"comment", ": keep-alive\n\n"},
		{"retry field", "retry: 3000\n\n"},
		{"empty data", "data:\n\n"},
		{"data without space", "data:[DONE]\r\n\r\n"},
		{"blank line alone", "\n\n"},
		{"id and event without data", "id: 7\nevent: ping\n\n"},
	}
	for _, tc := range cases {
		for _, kind := range []protocols.Kind{protocols.KindChat, protocols.KindResponses, protocols.KindMessages} {
			s := protocols.NewEventStream(kind, "acme", true, protocols.Scrubber{UpstreamModel: "gpt", ServiceModel: "acme"})
			got := run(s, [][]byte{[]byte(tc.in)})
			assert.Equal(t, tc.in, string(got), "%s %s", tc.name, kind)
		}
	}
}

func TestEventStreamDataWithoutSpace(t *testing.T) {
	// "data:" without the optional space is the same field.
	s := protocols.NewEventStream(protocols.KindChat, "acme/chat", false, protocols.Scrubber{})
	got := run(s, [][]byte{[]byte("data:{\"id\":\"c\",\"model\":\"gpt-4o\",\"choices\":[]}\n\n")})
	assert.Equal(t, "data:{\"id\":\"c\",\"model\":\"acme/chat\",\"choices\":[]}\n\n", string(got))
}

func TestEventStreamUnterminated(t *testing.T) {
	s := protocols.NewEventStream(protocols.KindMessages, "acme/sonnet", false, protocols.Scrubber{})
	s.Push([]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}"))
	ev, ok := s.Next()
	require.True(t, ok)
	assert.Equal(t, "message_stop", string(ev.Name))
	_, ok = s.Next()
	assert.False(t, ok, "an event without its blank line is not complete")
	assert.Equal(t, len("event: ping\ndata: {\"type\":\"ping\"}"), s.Buffered())
	last, ok := s.Unterminated()
	require.True(t, ok)
	assert.Equal(t, "event: ping\ndata: {\"type\":\"ping\"}", string(last.Raw), "passed on exactly as it came")
	assert.Equal(t, "ping", string(last.Name))
	_, ok = s.Unterminated()
	assert.False(t, ok, "Unterminated forgets what it returned")
	_, ok = s.Next()
	assert.False(t, ok)

	// The stream goes on normally afterwards.
	s.Push([]byte("event: ping\ndata: {}\n\n"))
	ev, ok = s.Next()
	require.True(t, ok)
	assert.Equal(t, "event: ping\ndata: {}\n\n", string(ev.Raw))
}

func TestEventStreamLongEvent(t *testing.T) {
	// An event far larger than the initial buffer, fed in small reads, comes out whole.
	text := strings.Repeat("déjà vu \\\"model\\\": gpt-4o ", 4000)
	in := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n" +
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"gpt-4o\",\"id\":\"m\"}}\n\n"
	want := strings.Replace(in, `{"model":"gpt-4o","id":"m"}`, `{"model":"acme","id":"m"}`, 1)
	s := protocols.NewEventStream(protocols.KindMessages, "acme", false, protocols.Scrubber{})
	got := run(s, randomChunks([]byte(in), rand.New(rand.NewPCG(9, 9)), 1500))
	assert.Equal(t, want, string(got))
}

func TestEventStreamIsError(t *testing.T) {
	cases := []struct {
		name string
		kind protocols.Kind
		raw  string
		want bool
	}{
		// Chat: a data frame whose JSON has an error, or a frame named error.
		{"chat error frame", protocols.KindChat, `data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`, true},
		{"chat named error", protocols.KindChat, `event: error` + "\n" + `data: {"message":"overloaded"}`, true},
		{"chat normal chunk", protocols.KindChat, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"error"},"finish_reason":null}]}`, false},
		{"chat chunk with null error", protocols.KindChat, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"error":null}`, false},
		{"chat done", protocols.KindChat, `data: [DONE]`, false},
		{"chat comment", protocols.KindChat, `: error`, false},

		// Responses: error event and response.failed, named or only typed in the data.
		{"responses error", protocols.KindResponses, "event: error\n" + `data: {"type":"error","code":"server_error","message":"An error occurred.","param":null,"sequence_number":3}`, true},
		{"responses failed", protocols.KindResponses, "event: response.failed\n" + `data: {"type":"response.failed","sequence_number":4,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"boom"},"model":"gpt-5"}}`, true},
		{"responses failed without event line", protocols.KindResponses, `data: {"type":"response.failed","sequence_number":4,"response":{"id":"resp_1","status":"failed","model":"gpt-5"}}`, true},
		{"responses error without event line", protocols.KindResponses, `data: {"type":"error","code":"server_error","message":"x","param":null,"sequence_number":0}`, true},
		{"responses created", protocols.KindResponses, "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","error":null,"model":"gpt-5"}}`, false},
		{"responses incomplete", protocols.KindResponses, "event: response.incomplete\n" + `data: {"type":"response.incomplete","sequence_number":9,"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-5"}}`, false},
		{"responses delta mentioning error", protocols.KindResponses, "event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":7,"delta":"error"}`, false},

		// Family B: the named error event (or an error typed in the data).
		{"messages overloaded", protocols.KindMessages, "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true},
		{"messages error typed only", protocols.KindMessages, `data: {"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, true},
		{"messages start", protocols.KindMessages, "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","model":"claude"}}`, false},
		{"messages ping", protocols.KindMessages, "event: ping\n" + `data: {"type": "ping"}`, false},
		{"messages delta mentioning error", protocols.KindMessages, "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"error"}}`, false},
	}
	for _, tc := range cases {
		for _, eol := range []string{"\n", "\r\n"} {
			t.Run(tc.name, func(t *testing.T) {
				s := protocols.NewEventStream(tc.kind, "acme", false, protocols.Scrubber{})
				s.Push([]byte(strings.ReplaceAll(tc.raw, "\n", eol) + eol + eol))
				ev, ok := s.Next()
				require.True(t, ok)
				assert.Equal(t, tc.want, s.IsError(ev))
			})
		}
	}
}

func TestEventStreamScrubsErrorEvents(t *testing.T) {
	secrets := []string{"api.upstream-a.example", "sk-up-9f8e7d6c5b4a3210"}
	cases := []struct {
		name     string
		kind     protocols.Kind
		upstream string // upstream model name
		service  string
		in, want string
	}{
		{
			name: "chat error frame", kind: protocols.KindChat, upstream: "gpt-4o-2024-08-06", service: "acme/chat",
			in:   `data: {"error":{"message":"The server had an error processing your request for gpt-4o-2024-08-06 (organization org-7Xq2LmNpQrStUv, host api.upstream-a.example).","type":"server_error","param":null,"code":null}}` + "\n\n",
			want: `data: {"error":{"message":"The server had an error processing your request for acme/chat (organization [redacted], host [redacted]).","type":"server_error","param":null,"code":null}}` + "\n\n",
		},
		{
			name: "responses error event", kind: protocols.KindResponses, upstream: "gpt-5.1-codex", service: "acme/codex",
			in:   "event: error\r\n" + `data: {"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5.1-codex in organization org-AbCdEf123456 on tokens per min (TPM): Limit 30000. Key sk-up-9f8e7d6c5b4a3210.","param":null,"sequence_number":3}` + "\r\n\r\n",
			want: "event: error\r\n" + `data: {"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached for acme/codex in organization [redacted] on tokens per min (TPM): Limit 30000. Key [redacted].","param":null,"sequence_number":3}` + "\r\n\r\n",
		},
		{
			name: "responses failed, service id contains the upstream name", kind: protocols.KindResponses, upstream: "gpt-4o", service: "acme/gpt-4o",
			in:   "event: response.failed\n" + `data: {"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"gpt-4o failed on api.upstream-a.example"},"model":"gpt-4o-2024-08-06","usage":null}}` + "\n\n",
			want: "event: response.failed\n" + `data: {"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"acme/gpt-4o failed on [redacted]"},"model":"acme/gpt-4o","usage":null}}` + "\n\n",
		},
		{
			name: "responses failed without event line", kind: protocols.KindResponses, upstream: "gpt-5.1-codex", service: "acme/codex",
			in:   `data: {"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"gpt-5.1-codex crashed (proj_Zz9Yy8Xx7W)"},"model":"gpt-5.1-codex"}}` + "\n\n",
			want: `data: {"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"acme/codex crashed ([redacted])"},"model":"acme/codex"}}` + "\n\n",
		},
		{
			name: "responses error without event line", kind: protocols.KindResponses, upstream: "gpt-5.1-codex", service: "acme/codex",
			in:   `data: {"type":"error","code":"server_error","message":"gpt-5.1-codex is unavailable","param":null,"sequence_number":0}` + "\n\n",
			want: `data: {"type":"error","code":"server_error","message":"acme/codex is unavailable","param":null,"sequence_number":0}` + "\n\n",
		},
		{
			name: "messages error event", kind: protocols.KindMessages, upstream: "claude-sonnet-4-5-20250929", service: "acme/sonnet",
			in:   "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"claude-sonnet-4-5-20250929 is overloaded at api.upstream-a.example"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}` + "\n\n",
			want: "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"acme/sonnet is overloaded at [redacted]"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}` + "\n\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scrub := protocols.Scrubber{UpstreamModel: tc.upstream, ServiceModel: tc.service, Secrets: secrets}
			s := protocols.NewEventStream(tc.kind, tc.service, false, scrub)
			in := []byte(tc.in)
			s.Push(in)
			ev, ok := s.Next()
			require.True(t, ok)
			assert.True(t, s.IsError(ev))
			out, keep := s.AppendRewritten([]byte("before|"), ev)
			assert.True(t, keep)
			assert.Equal(t, "before|"+tc.want, string(out))
			assert.Equal(t, tc.in, string(ev.Raw), "the upstream bytes are not modified in place")
		})
	}

	t.Run("normal events lose only the candidate's secrets", func(t *testing.T) {
		// Every upstream byte passes the scrubber: the candidate's host, credential and
		// account ids are masked even in answers. Model output that mentions a model name
		// or something shaped like an org id is the model's own text and is left alone.
		scrub := protocols.Scrubber{UpstreamModel: "gpt-4o", ServiceModel: "acme/chat", Secrets: secrets}
		s := protocols.NewEventStream(protocols.KindChat, "acme/chat", false, scrub)
		in := `data: {"id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"gpt-4o at api.upstream-a.example org-AbCdEf123456"}}]}` + "\n\n"
		got := run(s, [][]byte{[]byte(in)})
		want := strings.Replace(in, `"model":"gpt-4o"`, `"model":"acme/chat"`, 1)
		want = strings.Replace(want, "api.upstream-a.example", "[redacted]", 1)
		assert.Equal(t, want, string(got))
	})
}

// Reading straight from the upstream into the stream's buffer gives the client the same
// bytes however the upstream's reads are cut, events larger than the buffer included.
func TestFillReadsEveryEventWhateverTheReadSizes(t *testing.T) {
	big := "data: {\"model\":\"up\",\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 100<<10) + "\"}}]}\n\n"
	streams := [][]byte{[]byte(big + "data: [DONE]\n\n")}
	for _, name := range []string{"chat.upstream.sse", "responses.upstream.sse", "messages.upstream.sse"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		streams = append(streams, b)
	}
	for _, stream := range streams {
		var want []byte
		whole := protocols.NewEventStream(protocols.KindChat, "svc", false, protocols.Scrubber{})
		whole.Push(stream)
		for ev, ok := whole.Next(); ok; ev, ok = whole.Next() {
			want, _ = whole.AppendRewritten(want, ev)
		}
		for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(stream)), iotest.HalfReader(bytes.NewReader(stream)), bytes.NewReader(stream)} {
			s := protocols.NewEventStream(protocols.KindChat, "svc", false, protocols.Scrubber{})
			var got []byte
			for {
				n, err := s.Fill(r)
				if n == 0 && err != nil {
					require.ErrorIs(t, err, io.EOF)
					break
				}
				for ev, ok := s.Next(); ok; ev, ok = s.Next() {
					got, _ = s.AppendRewritten(got, ev)
				}
			}
			require.Equal(t, string(want), string(got))
		}
	}
}

// observe feeds events to a fresh stream of kind and returns what it observed.
func observe(kind protocols.Kind, events ...string) protocols.Observation {
	s := protocols.NewEventStream(kind, "svc", false, protocols.Scrubber{})
	_ = run(s, [][]byte{[]byte(strings.Join(events, ""))})
	return s.Obs
}

// Each shape says when the usage it has seen is the upstream's final count: what
// metering bills as reported even when the stream's terminator never comes.
func TestEachShapeSaysWhenItsUsageIsFinal(t *testing.T) {
	chat := func(choices, usage string) string {
		c := `data: {"id":"c","model":"m","choices":` + choices
		if usage != "" {
			c += `,"usage":` + usage
		}
		return c + "}\n\n"
	}
	const u = `{"prompt_tokens":5,"completion_tokens":2}`
	msgStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"
	msgDelta := "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\n"
	lifecycle := func(name string) string {
		return "event: " + name + "\ndata: {\"type\":\"" + name + "\",\"sequence_number\":1,\"response\":{\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}}\n\n"
	}
	cases := []struct {
		name   string
		kind   protocols.Kind
		events []string
		final  bool
	}{
		{"chat: usage chunk after a finish_reason", protocols.KindChat, []string{chat(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""), chat(`[]`, u)}, true},
		{"chat: usage on the finishing chunk", protocols.KindChat, []string{chat(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, u)}, true},
		{"chat: a second choice finishing", protocols.KindChat, []string{chat(`[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{},"finish_reason":"stop"}]`, u)}, true},
		{"chat: continuous usage before any finish_reason", protocols.KindChat, []string{chat(`[{"index":0,"delta":{"content":"a"},"finish_reason":null}]`, u)}, false},
		{"chat: an empty finish_reason is not a finish", protocols.KindChat, []string{chat(`[{"index":0,"delta":{"content":"a"},"finish_reason":""}]`, u)}, false},
		{"chat: usage before the finish, none after", protocols.KindChat, []string{chat(`[{"index":0,"delta":{"content":"a"}}]`, u), chat(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "")}, false},
		{"chat: usage then [DONE]", protocols.KindChat, []string{chat(`[{"index":0,"delta":{"content":"a"}}]`, u), "data: [DONE]\n\n"}, true},
		{"chat: [DONE] without usage", protocols.KindChat, []string{chat(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, ""), "data: [DONE]\n\n"}, false},
		{"messages: message_start only", protocols.KindMessages, []string{msgStart}, false},
		{"messages: message_delta", protocols.KindMessages, []string{msgStart, msgDelta}, true},
		{"responses: response.in_progress", protocols.KindResponses, []string{lifecycle("response.in_progress")}, false},
		{"responses: response.completed", protocols.KindResponses, []string{lifecycle("response.completed")}, true},
		{"responses: response.incomplete", protocols.KindResponses, []string{lifecycle("response.incomplete")}, true},
		{"responses: response.failed", protocols.KindResponses, []string{lifecycle("response.failed")}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := observe(c.kind, c.events...)
			assert.Equal(t, c.final, obs.UsageFinal)
		})
	}

	t.Run("whole answers with usage", func(t *testing.T) {
		for kind, body := range map[protocols.Kind]string{
			protocols.KindChat:      `{"model":"m","usage":{"prompt_tokens":5,"completion_tokens":2}}`,
			protocols.KindResponses: `{"model":"m","usage":{"input_tokens":5,"output_tokens":2}}`,
			protocols.KindMessages:  `{"model":"m","usage":{"input_tokens":5,"output_tokens":2}}`,
		} {
			_, obs := protocols.ShapeOf(kind).Answer([]byte(body))
			assert.True(t, obs.UsageFinal, "%v", kind)
			_, obs = protocols.ShapeOf(kind).Answer([]byte(`{"model":"m"}`))
			assert.False(t, obs.UsageFinal, "%v without usage", kind)
		}
	})
}
