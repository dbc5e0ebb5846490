package protocols

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/gjson"
)

// chatEventByGjson is how chat chunks were read before the member walker: with gjson, as
// the reference the walker must agree with on every valid chunk.
func chatEventByGjson(s *EventStream, ev Event) eventView {
	chat := s.stream.(*chatStream)
	var model, usage, choices, errField gjson.Result
	gjson.Parse(view(ev.Data)).ForEach(func(key, value gjson.Result) bool {
		switch key.Str {
		case "model":
			if !model.Exists() {
				model = value
			}
		case "usage":
			usage = value
		case "choices":
			choices = value
		case "error":
			errField = value
		}
		return true
	})
	if string(ev.Name) == "error" || errField.Exists() && errField.Type != gjson.Null && errField.Type != gjson.False {
		return eventView{isError: true}
	}
	if choices.IsArray() {
		d := gjson.GetMany(choices.Raw, "0.delta.content", "0.delta.tool_calls.0.function.arguments", "0.delta.reasoning_content")
		s.Obs.OutputChars += textLen(d[0]) + textLen(d[1])
		s.Obs.ThinkingChars += textLen(d[2])
		for _, c := range choices.Array() {
			if f := c.Get("finish_reason"); f.Type == gjson.String && textLen(f) > 0 {
				chat.chatFinished = true
			}
		}
		if f := choices.Get("0.finish_reason"); f.Type == gjson.String && textLen(f) > 0 && s.Obs.FinishReason == "" {
			s.Obs.FinishReason = f.String()
		}
	}
	if usage.IsObject() {
		s.Obs.setFamilyAUsage(usage, chatUsage)
		s.Obs.UsageFinal = chat.chatFinished
		if chat.dropUsageChunk && choices.IsArray() && !choices.Get("0").Exists() {
			return eventView{drop: true}
		}
	}
	if model.Type != gjson.String {
		model = gjson.Result{}
	}
	return eventView{model: model}
}

// chatChunks are chunks a chat stream carries, plain and odd.
var chatChunks = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"id":"c1","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hello \"there\" \\ \u00e9"},"logprobs":null}]}`,
	`{"model":"gpt-4o","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"model":"gpt-4o","choices":[{"delta":{"reasoning_content":"think","content":null}}]}`,
	`{"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}}}`,
	`{"model":"gpt-4o","choices":[{"delta":{}}],"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
	`{"model":"gpt-4o","choices":[],"usage":null}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"error":null,"model":"m","choices":[]}`,
	`{"error":false,"model":"m"}`,
	`{"error":0,"model":"m"}`,
	`{"model":42,"choices":[]}`,
	`{"model":"first","model":"second","choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"bbb"}}]}`,
	`{"mod\u0065l":"escaped-key","choices":[{"delta":{"content":"x"}}]}`,
	` { "model" : "spaced" , "choices" : [ { "delta" : { "content" : "y" } } ] } `,
	`{"choices":[null],"usage":{"prompt_tokens":1}}`,
	`{"choices":{"0":{"delta":{"content":"not an array"}}},"model":"m"}`,
	`{"choices":[{"delta":{"content":"deep"},"x":[[[[{"y":"]}"}]]]]}],"model":"after-deep"}`,
	`{"a":"\\","model":"after-backslash"}`,
	`{"a":"\\\"model\":\"fake\"","model":"real"}`,
	`{}`,
	`[]`,
}

func TestChatChunksReadAsGjsonReadsThem(t *testing.T) {
	chunks := append([]string(nil), chatChunks...)
	files, _ := filepath.Glob(filepath.Join("testdata", "chat.*.sse"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range splitEvents(b) {
			if ev := parseEvent(raw); len(ev.Data) > 0 && ev.Data[0] == '{' {
				chunks = append(chunks, string(ev.Data))
			}
		}
	}
	for _, drop := range []bool{false, true} {
		for _, c := range chunks {
			if !json.Valid([]byte(c)) {
				t.Fatalf("test chunk is not JSON: %s", c)
			}
			compareChatEvent(t, []byte(c), drop)
		}
	}
}

// FuzzChatChunk holds the walker to gjson's reading on every valid JSON chunk, and to
// reading invalid ones without panicking or splicing anywhere but at a string.
func FuzzChatChunk(f *testing.F) {
	for _, c := range chatChunks {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if json.Valid(data) {
			compareChatEvent(t, data, true)
			return
		}
		s := chatCompletions{}.newStream(true)
		v := shapeEvent(s, Event{Data: data})
		if m := v.model; m.Exists() {
			if m.Index <= 0 || m.Index+len(m.Raw) > len(data) || data[m.Index] != '"' || string(data[m.Index:m.Index+len(m.Raw)]) != m.Raw {
				t.Fatalf("model found outside a string: %+v in %q", m, data)
			}
		}
	})
}

func compareChatEvent(t *testing.T, data []byte, drop bool) {
	t.Helper()
	a, b := chatCompletions{}.newStream(drop), chatCompletions{}.newStream(drop)
	ev := Event{Data: data}
	got, want := shapeEvent(a, ev), chatEventByGjson(b, ev)
	if got.isError != want.isError || got.drop != want.drop || got.model.Raw != want.model.Raw ||
		got.model.Index != want.model.Index || a.Obs != b.Obs {
		t.Fatalf("chunk %s\nwalker: %+v %+v\ngjson:  %+v %+v", data, got, a.Obs, want, b.Obs)
	}
}

// sameHeadChunks share their bytes up to choices, as the chunks of one stream do, and
// differ after it: choices, usage, error, a later model, a duplicate choices.
var sameHeadChunks = []string{
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"one"}}],"usage":null}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"three words here"}}],"usage":null}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"delta":{}}],"error":{"message":"late"}}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":"bb"}}]}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"delta":{"reasoning_content":"hm"}},{"delta":{"content":"second choice"}}]}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o-other","choices":[{"delta":{"content":"x"}}]}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"model":"gpt-4o","choices":[{"delta":{"content":"x"}}]`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"usage":{"prompt_tokens":1},"model":"gpt-4o","choices":[{"delta":{"content":"y"}}]}`,
	`{"id":"c9","object":"chat.completion.chunk","created":7,"choices":[{"delta":{"content":"z"}}],"model":"after"}`,
}

// compareAfter reads b in a stream that read a first and in a fresh one: a chunk reads
// the same whatever came before it.
func compareAfter(t *testing.T, a, b []byte) {
	t.Helper()
	seq, fresh := chatCompletions{}.newStream(true), chatCompletions{}.newStream(true)
	shapeEvent(seq, Event{Data: a})
	before := seq.Obs
	got := shapeEvent(seq, Event{Data: b})
	want := shapeEvent(fresh, Event{Data: b})
	delta := Observation{OutputChars: seq.Obs.OutputChars - before.OutputChars, ThinkingChars: seq.Obs.ThinkingChars - before.ThinkingChars}
	if got.isError != want.isError || got.drop != want.drop || got.model.Raw != want.model.Raw || got.model.Index != want.model.Index ||
		delta.OutputChars != fresh.Obs.OutputChars || delta.ThinkingChars != fresh.Obs.ThinkingChars ||
		(fresh.Obs.Usage != Usage{} && seq.Obs.Usage != fresh.Obs.Usage) {
		t.Fatalf("chunk %s after %s\nin sequence: %+v %+v\nalone:       %+v %+v", b, a, got, seq.Obs, want, fresh.Obs)
	}
}

func TestAChatChunkReadsTheSameWhateverCameBefore(t *testing.T) {
	chunks := append(append([]string(nil), sameHeadChunks...), chatChunks...)
	for _, a := range chunks {
		for _, b := range chunks {
			compareAfter(t, []byte(a), []byte(b))
		}
	}
	// Every valid one of them still reads as gjson reads it, after any other.
	for _, a := range chunks {
		for _, b := range sameHeadChunks {
			if !json.Valid([]byte(b)) {
				continue
			}
			s, ref := chatCompletions{}.newStream(true), chatCompletions{}.newStream(true)
			shapeEvent(s, Event{Data: []byte(a)})
			got, want := shapeEvent(s, Event{Data: []byte(b)}), chatEventByGjson(ref, Event{Data: []byte(b)})
			assert.Equal(t, want.model.Raw, got.model.Raw, "%s after %s", b, a)
			assert.Equal(t, want.model.Index, got.model.Index, "%s after %s", b, a)
			assert.Equal(t, want.isError, got.isError, "%s after %s", b, a)
			assert.Equal(t, want.drop, got.drop, "%s after %s", b, a)
		}
	}
}

// FuzzChatChunkAfterAnother holds a stream's reading of a chunk to a fresh reading of it,
// whatever chunk came before: what the stream remembers of its chunks changes no result.
func FuzzChatChunkAfterAnother(f *testing.F) {
	for i, a := range sameHeadChunks {
		f.Add([]byte(a), []byte(sameHeadChunks[(i+1)%len(sameHeadChunks)]))
		f.Add([]byte(a), []byte(chatChunks[i%len(chatChunks)]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		compareAfter(t, a, b)
	})
}
