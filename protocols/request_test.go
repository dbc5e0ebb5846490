package protocols_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// Request bodies as real clients write them. The service model is "acme/chat"; it also
// appears where it must not be touched: in message text, in a nested "model" key, in tool
// schemas, and in client metadata.
const (
	// JS SDK: compact, model first; unicode raw and escaped; escaped quotes in text.
	reqJS  = `{"model":"acme/chat","messages":[{"role":"system","content":"You are \"helpful\".\nAnswer in French: été, naïve, 日本語 ✓ \ud83d\ude00"},{"role":"user","content":"Reply with {\"model\":\"acme/chat\"} verbatim, then say \"model\": \"acme/chat\""}],"tools":[{"type":"function","function":{"name":"switch_model","parameters":{"type":"object","properties":{"model":{"type":"string","enum":["acme/chat"]}},"required":["model"]}}}],"metadata":{"model":"acme/chat"},"temperature":0.2}`
	wantJS = `{"model":"gpt-4o-2024-08-06","messages":[{"role":"system","content":"You are \"helpful\".\nAnswer in French: été, naïve, 日本語 ✓ \ud83d\ude00"},{"role":"user","content":"Reply with {\"model\":\"acme/chat\"} verbatim, then say \"model\": \"acme/chat\""}],"tools":[{"type":"function","function":{"name":"switch_model","parameters":{"type":"object","properties":{"model":{"type":"string","enum":["acme/chat"]}},"required":["model"]}}}],"metadata":{"model":"acme/chat"},"temperature":0.2}`

	// Python style separators, model after messages.
	reqPy  = `{"messages": [{"role": "user", "content": "Which model are you? Say \"acme/chat\"."}], "model": "acme/chat", "stream": false, "n": 1}`
	wantPy = `{"messages": [{"role": "user", "content": "Which model are you? Say \"acme/chat\"."}], "model": "gpt-4o-2024-08-06", "stream": false, "n": 1}`

	// Hand-written, pretty-printed, CRLF line ends, trailing newline, escaped slash in the id.
	reqPretty  = "{\r\n  \"messages\" : [ { \"role\" : \"user\", \"content\" : \"hi\" } ],\r\n  \"model\"    :   \"acme\\/chat\"  ,\r\n  \"max_tokens\": 10\r\n}\r\n"
	wantPretty = "{\r\n  \"messages\" : [ { \"role\" : \"user\", \"content\" : \"hi\" } ],\r\n  \"model\"    :   \"gpt-4o-2024-08-06\"  ,\r\n  \"max_tokens\": 10\r\n}\r\n"

	// The key itself written with an escape.
	reqEscapedKey  = `{"mod\u0065l":"acme/chat","messages":[]}`
	wantEscapedKey = `{"mod\u0065l":"gpt-4o-2024-08-06","messages":[]}`
)

func TestPrepareRequestBodyOnlyModelChanges(t *testing.T) {
	cases := []struct {
		name     string
		op       protocols.Operation
		in, want string
	}{
		{"chat js", opChat, reqJS, wantJS},
		{"chat python", opChat, reqPy, wantPy},
		{"chat pretty crlf", opChat, reqPretty, wantPretty},
		{"escaped key", opChat, reqEscapedKey, wantEscapedKey},
		{"responses", opResponses, `{"model":"acme/chat","input":"model?","stream":true,"metadata":{"model":"acme/chat"}}`,
			`{"model":"gpt-4o-2024-08-06","input":"model?","stream":true,"metadata":{"model":"acme/chat"}}`},
		{"messages streamed: no usage injection outside chat", opMessages, `{"model":"acme/chat","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"gpt-4o-2024-08-06","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"count tokens", opCountTokens, `{"messages":[{"role":"user","content":"hi"}],"model":"acme/chat"}`,
			`{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o-2024-08-06"}`},
		{"chat streamed with usage already asked for", opChat, `{"model":"acme/chat","messages":[],"stream":true,"stream_options":{"include_usage":true}}`,
			`{"model":"gpt-4o-2024-08-06","messages":[],"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat not streamed", opChat, `{"model":"acme/chat","messages":[],"stream":false,"stream_options":null}`,
			`{"model":"gpt-4o-2024-08-06","messages":[],"stream":false,"stream_options":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			orig := bytes.Clone(in)
			out, injected := protocols.PrepareRequestBody(tc.op, in, "gpt-4o-2024-08-06")
			assert.False(t, injected)
			assert.Equal(t, tc.want, string(out))
			assert.Equal(t, orig, in, "the client's body is not modified")
			assertOnlyModelChanged(t, in, out)
		})
	}
}

// assertOnlyModelChanged checks, independently of the expected literal, that the bytes
// around the top-level model value are the same and that the model decodes as upstream.
func assertOnlyModelChanged(t *testing.T, in, out []byte) {
	t.Helper()
	s, e, ok := protocols.ValueSpan(in, "model")
	require.True(t, ok)
	tail := len(in) - e
	require.GreaterOrEqual(t, len(out), s+tail)
	assert.Equal(t, string(in[:s]), string(out[:s]), "bytes before the model value")
	assert.Equal(t, string(in[e:]), string(out[len(out)-tail:]), "bytes after the model value")
	var got string
	require.NoError(t, json.Unmarshal(out[s:len(out)-tail], &got))
	assert.Equal(t, "gpt-4o-2024-08-06", got)
}

func TestValueSpan(t *testing.T) {
	cases := []struct {
		name, body, path, want string
		found                  bool
	}{
		{"chat response", `{"id":"chatcmpl-1","object":"chat.completion","created":1767225600,"model":"gpt-4o-2024-08-06","choices":[]}`, "model", `"gpt-4o-2024-08-06"`, true},
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[]}}`, "message.model", `"claude-sonnet-4-5-20250929"`, true},
		{"responses event", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-5.1-codex"}}`, "response.model", `"gpt-5.1-codex"`, true},
		{"nested only", `{"metadata":{"model":"x"}}`, "model", ``, false},
		{"absent", `{"id":"x"}`, "model", ``, false},
		{"spaces around", `{ "model" :  "m\"q"  }`, "model", `"m\"q"`, true},
		{"non-string value", `{"model":null}`, "model", `null`, true},
		{"not JSON", `[DONE]`, "model", ``, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, e, ok := protocols.ValueSpan([]byte(tc.body), tc.path)
			assert.Equal(t, tc.found, ok)
			if ok {
				assert.Equal(t, tc.want, tc.body[s:e])
			}
		})
	}
}

func TestSetString(t *testing.T) {
	cases := []struct {
		name, body, path, value, want string
	}{
		{"replace", `{"a":1,"model":"x","b":[1,2]}`, "model", "y", `{"a":1,"model":"y","b":[1,2]}`},
		{"replace nested", `{"message":{"model":"x","id":"m"}}`, "message.model", "acme", `{"message":{"model":"acme","id":"m"}}`},
		{"value needing escapes", `{"model":"x"}`, "model", "a\"b\\c\n", `{"model":"a\"b\\c\n"}`},
		{"longer and shorter", `{"model":"a-very-long-upstream-model-name","z":0}`, "model", "s", `{"model":"s","z":0}`},
		{"absent path is added", `{"a":1}`, "model", "x", `{"a":1,"model":"x"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.body)
			got := protocols.SetString(in, tc.path, tc.value)
			assert.Equal(t, tc.want, string(got))
			assert.Equal(t, tc.body, string(in), "input untouched")
		})
	}
}

// TestResponseSplice is the non-streamed answer path: the upstream's JSON with only the
// model value replaced, written as three parts.
func TestResponseSplice(t *testing.T) {
	cases := []struct {
		name string
		op   protocols.Operation
		in   string
		want string
	}{
		{
			name: "chat completion",
			op:   opChat,
			in:   "{\n  \"id\": \"chatcmpl-C1x9aQ2mZ\",\n  \"object\": \"chat.completion\",\n  \"created\": 1767225600,\n  \"model\": \"gpt-4o-2024-08-06\",\n  \"choices\": [\n    {\n      \"index\": 0,\n      \"message\": {\n        \"role\": \"assistant\",\n        \"content\": \"I am gpt-4o-2024-08-06, \\\"model\\\": \\\"gpt-4o\\\" \\u00e9\",\n        \"refusal\": null,\n        \"annotations\": []\n      },\n      \"logprobs\": null,\n      \"finish_reason\": \"stop\"\n    }\n  ],\n  \"usage\": {\n    \"prompt_tokens\": 19,\n    \"completion_tokens\": 10,\n    \"total_tokens\": 29\n  },\n  \"service_tier\": \"default\",\n  \"system_fingerprint\": \"fp_07871e2ad8\"\n}\n",
			want: "{\n  \"id\": \"chatcmpl-C1x9aQ2mZ\",\n  \"object\": \"chat.completion\",\n  \"created\": 1767225600,\n  \"model\": \"acme/chat\",\n  \"choices\": [\n    {\n      \"index\": 0,\n      \"message\": {\n        \"role\": \"assistant\",\n        \"content\": \"I am gpt-4o-2024-08-06, \\\"model\\\": \\\"gpt-4o\\\" \\u00e9\",\n        \"refusal\": null,\n        \"annotations\": []\n      },\n      \"logprobs\": null,\n      \"finish_reason\": \"stop\"\n    }\n  ],\n  \"usage\": {\n    \"prompt_tokens\": 19,\n    \"completion_tokens\": 10,\n    \"total_tokens\": 29\n  },\n  \"service_tier\": \"default\",\n  \"system_fingerprint\": \"fp_07871e2ad8\"\n}\n",
		},
		{
			name: "message",
			op:   opMessages,
			in:   `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hello! I'm Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6,"service_tier":"standard"}}`,
			want: `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"acme/chat","content":[{"type":"text","text":"Hello! I'm Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":6,"service_tier":"standard"}}`,
		},
		{
			name: "response",
			op:   opResponses,
			in:   `{"id":"resp_0a1b","object":"response","created_at":1767225600,"status":"completed","model":"gpt-5.1-codex","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"metadata":{"model":"client-tag"},"usage":{"input_tokens":12,"output_tokens":25,"output_tokens_details":{"reasoning_tokens":14},"total_tokens":37}}`,
			want: `{"id":"resp_0a1b","object":"response","created_at":1767225600,"status":"completed","model":"acme/chat","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hi","annotations":[]}]}],"metadata":{"model":"client-tag"},"usage":{"input_tokens":12,"output_tokens":25,"output_tokens_details":{"reasoning_tokens":14},"total_tokens":37}}`,
		},
		{
			name: "token count carries no model",
			op:   opCountTokens,
			in:   `{"input_tokens":2095}`,
			want: `{"input_tokens":2095}`,
		},
	}
	literal := protocols.AppendJSONString(nil, "acme/chat")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.in)
			var out bytes.Buffer
			if model, _ := protocols.ShapeOf(tc.op.Kind).Answer(body); model.Index > 0 {
				_, _ = protocols.SpliceAt(body, model.Index, model.Index+len(model.Raw), literal).WriteTo(&out)
			} else {
				out.Write(body)
			}
			assert.Equal(t, tc.want, out.String())
		})
	}
}

func TestAnswerModelLocation(t *testing.T) {
	body := []byte(`{"id":"x","model":"up","usage":{}}`)
	for _, op := range []protocols.Operation{opChat, opResponses, opCompact, opMessages} {
		model, obs := protocols.ShapeOf(op.Kind).Answer(body)
		assert.Equal(t, `"up"`, model.Raw, op.Kind.String())
		assert.True(t, obs.Billable, op.Kind.String())
	}
	for _, op := range []protocols.Operation{opInputTokens, opCountTokens} {
		model, obs := protocols.ShapeOf(op.Kind).Answer(body)
		assert.False(t, model.Exists(), "token counts carry no model: %s", op.Kind)
		assert.False(t, obs.Billable, op.Kind.String())
	}
}

func TestAppendJSONString(t *testing.T) {
	cases := []struct {
		in, want string
	}{
		{"acme/chat", `"acme/chat"`},
		{"", `""`},
		{`say "hi"`, `"say \"hi\""`},
		{`C:\path\n`, `"C:\\path\\n"`},
		{"a\nb\rc\td", `"a\nb\rc\td"`},
		{"\x00\x01\x08\x0b\x0c\x1f", `"\u0000\u0001\u0008\u000b\u000c\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"été 日本語 😀", `"été 日本語 😀"`},
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"bad \xff byte", `"bad \ufffd byte"`},
		{"cut \xe6\x97", `"cut \ufffd\ufffd"`},
		{"</script>&", `"</script>&"`},
	}
	for _, tc := range cases {
		got := protocols.AppendJSONString([]byte("prefix:"), tc.in)
		assert.Equal(t, "prefix:"+tc.want, string(got), "%q", tc.in)
		checkJSONString(t, tc.in, got[len("prefix:"):])
	}
}

// checkJSONString: lit is valid JSON that decodes to s (with invalid UTF-8 decoding the way
// encoding/json treats it).
func checkJSONString(t *testing.T, s string, lit []byte) {
	t.Helper()
	require.True(t, json.Valid(lit), "%q -> %s", s, lit)
	var got string
	require.NoError(t, json.Unmarshal(lit, &got))
	if utf8.ValidString(s) {
		assert.Equal(t, s, got)
		return
	}
	ref, err := json.Marshal(s)
	require.NoError(t, err)
	var want string
	require.NoError(t, json.Unmarshal(ref, &want))
	assert.Equal(t, want, got)
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"acme/chat", "a\"b\\c", "\x00\x1f\x7f", "été\xff\xfe", "\xed\xa0\x80", "😀\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkJSONString(t, s, protocols.AppendJSONString(nil, s))
	})
}

func TestPrepareRequestBodyMatchesDecodedSemantics(t *testing.T) {
	// Whatever the shape, the upstream sees the client's document with model replaced and,
	// for streamed chat only, include_usage set.
	bodies := []string{reqJS, reqPy, reqPretty, reqEscapedKey,
		`{"model":"acme/chat","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 50) + `"}]}`,
		`{"model":"acme/chat","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false},"messages":[]}`,
	}
	for _, body := range bodies {
		out, injected := protocols.PrepareRequestBody(opChat, []byte(body), "up")
		var in, got map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &in))
		require.NoError(t, json.Unmarshal(out, &got), "%s", out)
		in["model"] = "up"
		if injected {
			opts, _ := in["stream_options"].(map[string]any)
			if opts == nil {
				opts = map[string]any{}
			}
			opts["include_usage"] = true
			in["stream_options"] = opts
		}
		assert.Equal(t, in, got)
		assert.Equal(t, in["stream"] == true, injected)
	}
}

// TestUpstreamBodyReaders: the three-part body the relay sends reads back as exactly the
// rewritten bytes, through Read with any buffer size and through WriteTo, on every attempt.
func TestUpstreamBodyReaders(t *testing.T) {
	bodies := []struct {
		op   protocols.Operation
		body string
	}{
		{opChat, reqJS}, {opChat, reqPy}, {opChat, reqPretty},
		{opChat, `{"model":"acme/chat","stream":true,"messages":[]}`},
		{opResponses, `{"model":"acme/chat","input":"hi"}`},
	}
	for _, bd := range bodies {
		p, apiErr := protocols.ParseRequest(bd.op.Family, []byte(bd.body))
		require.Nil(t, apiErr)
		want, wantInjected := protocols.PrepareRequestBody(bd.op, []byte(bd.body), "gpt-4o-2024-08-06")
		up, injected := p.Upstream(bd.op, "gpt-4o-2024-08-06", 0)
		assert.Equal(t, wantInjected, injected)
		assert.Equal(t, len(want), up.Len())
		assert.Equal(t, string(want), string(up.Bytes()))
		for attempt := 0; attempt < 2; attempt++ {
			got, err := io.ReadAll(iotest.OneByteReader(up.Reader()))
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			var buf bytes.Buffer
			n, err := io.Copy(&buf, up.Reader())
			require.NoError(t, err)
			assert.Equal(t, int64(len(want)), n)
			assert.Equal(t, string(want), buf.String())
		}
		require.NoError(t, iotest.TestReader(up.Reader(), want))
	}
}
