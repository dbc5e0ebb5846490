package protocols_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/switchyard-gw/switchyard/internal/pdftest"
	"github.com/switchyard-gw/switchyard/protocols"
)

// chatRequest builds a chat request the way a coding agent sends one: a system prompt, a
// tool, then user/assistant turns until the body reaches size bytes.
func chatRequest(size int, stream bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"acme/chat","messages":[{"role":"system","content":"You are a careful coding assistant. Answer concisely.\nPrefer small diffs; never invent APIs. Use the tools when a file must be read."}`)
	turn := 0
	for b.Len() < size-900 {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":"%s","content":"Turn %d: the function \"parseEvent\" in sse.go splits on \\r\\n and \\n; see line %d. Résumé: ✓ ok \u00e9"}`, role, turn, turn*7)
		turn++
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"read_file","description":"Read a file from the workspace","parameters":{"type":"object","properties":{"path":{"type":"string"},"model":{"type":"string"}},"required":["path"]}}}],"temperature":0.2,"max_completion_tokens":4096,"reasoning_effort":"medium"`)
	if stream {
		b.WriteString(`,"stream":true`)
	}
	b.WriteString(`,"user":"u-1842"}`)
	return b.Bytes()
}

// chatResponse builds a non-streamed chat completion of about size bytes.
func chatResponse(size int) []byte {
	head := `{"id":"chatcmpl-CZ8rT1vQy3","object":"chat.completion","created":1767225600,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"`
	tail := `","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1917,"completion_tokens":402,"total_tokens":2319,"prompt_tokens_details":{"cached_tokens":1536,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":128,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_cbf1785567"}`
	text := strings.Repeat(`Here is the fix: replace \"model\" handling in rewrite.go.\n`, (size-len(head)-len(tail))/60+1)
	return []byte(head + text[:size-len(head)-len(tail)] + tail)
}

// chatStream builds a streamed answer of n content chunks ending with the usage chunk
// and [DONE], as an upstream sends it.
func chatStream(n int) []byte {
	var b bytes.Buffer
	pre := `data: {"id":"chatcmpl-CZ8rT1vQy3","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_cbf1785567","choices":[`
	b.WriteString(pre + `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"9Jx"}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, "%s{\"index\":0,\"delta\":{\"content\":\" token%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null,\"obfuscation\":\"Qm2\"}\n\n", pre, i)
	}
	b.WriteString(pre + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n")
	b.WriteString(pre + `],"usage":{"prompt_tokens":19,"completion_tokens":31,"total_tokens":50}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// documentRequest is a chat request of size bytes whose user message is one long plain
// text, a document to summarise (the body of make bench's 1 MB phase).
func documentRequest(size int) []byte {
	head := `{"model":"acme/chat","messages":[{"role":"system","content":"Summarise the document."},{"role":"user","content":"`
	tail := `"}],"max_completion_tokens":512}`
	text := strings.Repeat("gateway latency request stream token proxy upstream model ", size/58+1)
	return []byte(head + text[:size-len(head)-len(tail)] + tail)
}

var benchSizes = []struct {
	name string
	size int
}{{"2KB", 2 << 10}, {"1MB", 1 << 20}}

func BenchmarkPrepareRequestBody(b *testing.B) {
	for _, sz := range benchSizes {
		for _, stream := range []bool{false, true} {
			body := chatRequest(sz.size, stream)
			name := sz.name + "/plain"
			if stream {
				name = sz.name + "/stream+include_usage"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					out, _ := protocols.PrepareRequestBody(opChat, body, "gpt-4o-2024-08-06")
					if len(out) < len(body) {
						b.Fatal("short body")
					}
				}
			})
		}
	}
}

func BenchmarkResponseSplice(b *testing.B) {
	literal := protocols.AppendJSONString(nil, "acme/chat")
	for _, sz := range benchSizes {
		body := chatResponse(sz.size)
		b.Run(sz.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			w := io.Discard
			for b.Loop() {
				s, e, ok := protocols.ValueSpan(body, "model")
				if !ok {
					b.Fatal("no model")
				}
				_, _ = w.Write(body[:s])
				_, _ = w.Write(literal)
				_, _ = w.Write(body[e:])
			}
		})
	}
}

// messagesStream builds a streamed Messages answer of n text deltas, as the upstream
// sends it: n+5 events.
func messagesStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2048,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token%d\"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2048,\"output_tokens\":31}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

// responsesStream builds a streamed Responses answer of n text deltas, as the upstream
// sends it: n+8 events.
func responsesStream(n int) []byte {
	var b bytes.Buffer
	resp := func(status, output, usage string) string {
		return `{"id":"resp_0c4f7d1e2a9b8c3d","object":"response","created_at":1767225600,"status":"` + status + `","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5.1-codex","output":` + output + `,"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":` + usage + `,"user":null,"metadata":{}}`
	}
	seq := 0
	event := func(name, rest string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d,%s}\n\n", name, name, seq, rest)
		seq++
	}
	event("response.created", `"response":`+resp("in_progress", "[]", "null"))
	event("response.in_progress", `"response":`+resp("in_progress", "[]", "null"))
	event("response.output_item.added", `"output_index":0,"item":{"id":"msg_0c4f7d1e","type":"message","status":"in_progress","content":[],"role":"assistant"}`)
	event("response.content_part.added", `"item_id":"msg_0c4f7d1e","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}`)
	var text strings.Builder
	for i := range n {
		fmt.Fprintf(&text, " token%d", i)
		event("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_0c4f7d1e","output_index":0,"content_index":0,"delta":" token%d","logprobs":[],"obfuscation":"Zk"`, i))
	}
	part := `{"type":"output_text","annotations":[],"logprobs":[],"text":"` + text.String() + `"}`
	item := `{"id":"msg_0c4f7d1e","type":"message","status":"completed","content":[` + part + `],"role":"assistant"}`
	event("response.output_text.done", `"item_id":"msg_0c4f7d1e","output_index":0,"content_index":0,"text":"`+text.String()+`","logprobs":[]`)
	event("response.content_part.done", `"item_id":"msg_0c4f7d1e","output_index":0,"content_index":0,"part":`+part)
	event("response.output_item.done", `"output_index":0,"item":`+item)
	event("response.completed", `"response":`+resp("completed", "["+item+"]", `{"input_tokens":2511,"input_tokens_details":{"cached_tokens":2048},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":2598}`))
	return b.Bytes()
}

// BenchmarkEventStream rewrites whole streams; the 48-event ones, one per shape, are the
// streams make bench sends, and report the cost per event, also with a candidate's
// secrets to search.
func BenchmarkEventStream(b *testing.B) {
	streams := []struct {
		name   string
		kind   protocols.Kind
		drop   bool
		data   []byte
		events int
	}{
		{"chat-200-chunks", protocols.KindChat, true, chatStream(200), 204},
		{"responses", protocols.KindResponses, false, readFixture(b, "responses.upstream.sse"), 12},
		{"messages", protocols.KindMessages, false, readFixture(b, "messages.upstream.sse"), 11},
		{"chat-48-events", protocols.KindChat, true, chatStream(44), 48},
		{"responses-48-events", protocols.KindResponses, false, responsesStream(40), 48},
		{"messages-48-events", protocols.KindMessages, false, messagesStream(43), 48},
	}
	const readSize = 4 << 10 // what one upstream Read typically returns
	// A candidate's secrets, as every stream searches them: its host and credential.
	secrets := protocols.Scrubber{Secrets: []string{"api.openai.com", "sk-proj-Zx81kQ2vN5bT7wYc3LmR9pHd"}}
	for _, st := range streams {
		for _, scrub := range []protocols.Scrubber{{}, secrets} {
			name := st.name
			if len(scrub.Secrets) > 0 {
				if !strings.HasSuffix(name, "48-events") {
					continue
				}
				name += "+secrets"
			}
			b.Run(name, func(b *testing.B) {
				benchEventStream(b, st.kind, st.drop, scrub, st.data, st.events, readSize)
			})
		}
	}
}

// benchEventStream rewrites data as one stream per iteration, read readSize bytes at a time.
func benchEventStream(b *testing.B, kind protocols.Kind, drop bool, scrub protocols.Scrubber, data []byte, events, readSize int) {
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	out := make([]byte, 0, 64<<10)
	for b.Loop() {
		s := protocols.NewEventStream(kind, "acme/chat", drop, scrub)
		for rest := data; len(rest) > 0; {
			n := min(readSize, len(rest))
			s.Push(rest[:n])
			rest = rest[n:]
			for ev, ok := s.Next(); ok; ev, ok = s.Next() {
				out, _ = s.AppendRewritten(out[:0], ev)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
}

// responsesRequest is a Codex-style request: long instructions with escaped newlines and
// an input array, about size bytes.
func responsesRequest(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"acme/codex","instructions":"`)
	for b.Len() < size/2 {
		b.WriteString(`You are Codex, a coding agent.\n- Keep edits small.\n- Quote \"paths\" exactly.\n`)
	}
	b.WriteString(`","input":[`)
	for i := 0; b.Len() < size-300; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"step %d: run the tests\nthen report"}]}`, i)
	}
	b.WriteString(`],"tools":[],"tool_choice":"auto","parallel_tool_calls":false,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"019a5f3c"}`)
	return b.Bytes()
}

// BenchmarkUpstreamBody is the path the relay takes: parse once, validate, then stream
// the rewritten body (three parts, not joined) to the upstream.
func BenchmarkUpstreamBody(b *testing.B) {
	type body struct {
		name string
		op   protocols.Operation
		data []byte
	}
	var bodies []body
	for _, sz := range benchSizes {
		bodies = append(bodies,
			body{"chat/" + sz.name + "/plain", opChat, chatRequest(sz.size, false)},
			body{"chat/" + sz.name + "/stream+include_usage", opChat, chatRequest(sz.size, true)},
			body{"responses/" + sz.name, opResponses, responsesRequest(sz.size)})
	}
	bodies = append(bodies, body{"chat/1MB/document", opChat, documentRequest(1 << 20)})
	for _, bd := range bodies {
		b.Run(bd.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bd.data)))
			for b.Loop() {
				p, err := protocols.ParseRequest(bd.op.Family, bd.data)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Validate(bd.op, familyAHeaders); err != nil {
					b.Fatal(err)
				}
				up, _ := p.Upstream(bd.op, "gpt-4o-2024-08-06", 0)
				if _, err := io.Copy(io.Discard, up.Reader()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// estimateSink keeps the estimate's result alive.
var estimateSink int64

// BenchmarkInputEstimate is the input estimate admission makes of every generation
// request, on an agent's chat body of 2 KB, a 1 MB document pasted as text, and a
// messages body carrying a PDF of 5,000 pages (1 MB of base64), whose pages are counted.
func BenchmarkInputEstimate(b *testing.B) {
	pdf := `{"model":"m","max_tokens":512,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` +
		pdftest.Base64(5000, pdftest.Options{}) + `"}}]}]}`
	for _, bd := range []struct {
		name string
		data []byte
	}{{"chat/2KB", chatRequest(2<<10, false)}, {"chat/1MB", chatRequest(1<<20, false)}, {"document/1MB", documentRequest(1 << 20)}, {"pdf/1MB", []byte(pdf)}} {
		b.Run(bd.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bd.data)))
			for b.Loop() {
				estimateSink += protocols.EstimateInputTokens(bd.data)
			}
		})
	}
}
