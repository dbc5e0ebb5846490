package protocols

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deep is v inside depth arrays and objects.
func deep(depth int, v string) string {
	return strings.Repeat(`[{"a":`, depth) + v + strings.Repeat(`}]`, depth)
}

// messagesNames and responsesNames are the event names each data is read under: nil is
// an event without an `event:` line, and empty an `event:` line without a value.
var (
	messagesNames  = []string{"\x00nil", "", "message_start", "content_block_delta", "message_delta", "message_stop", "ping", "content_block_start", "error"}
	responsesNames = []string{"\x00nil", "", "response.created", "response.completed", "response.output_text.delta", "response.reasoning_text.delta", "response.failed", "error", "response.output_item.done"}
)

func eventNamed(name string, data []byte) Event {
	if name == "\x00nil" {
		return Event{Data: data}
	}
	return Event{Name: []byte(name), Data: data}
}

// recordedData is the data of every event of the recorded streams matching pattern.
func recordedData(t testing.TB, pattern string) (names, data []string) {
	files, _ := filepath.Glob(filepath.Join("testdata", pattern))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range splitEvents(b) {
			if ev := parseEvent(raw); len(ev.Data) > 0 {
				names, data = append(names, string(ev.Name)), append(data, string(ev.Data))
			}
		}
	}
	return names, data
}

// compareEvent reads ev with the shape and with the gjson reference, from the same
// earlier observation, and requires the same view, observation and sequence. Data that is
// not JSON never reaches the shape (the stream keeps it from the client); it must only be
// read without panicking, and a model found in it must lie where it says.
func compareEvent(t *testing.T, kind Kind, ev Event) {
	t.Helper()
	start := func() *EventStream {
		s := ShapeOf(kind).newStream(false)
		if r, ok := s.stream.(*responsesStream); ok {
			r.sequence = 42
		}
		s.Obs.Usage = Usage{Input: 100, CachedInput: 30, CacheWrite: 20, Output: 7, Reasoning: 3}
		return s
	}
	a, b := start(), start()
	var got, want eventView
	var gotErr, wantErr bool
	var gotPath, wantPath string
	switch kind {
	case KindMessages:
		got, want = shapeEvent(a, ev), messagesEventByGjson(b, ev)
		gotErr, wantErr = messages{}.IsError(ev), messagesIsErrorByGjson(ev)
		gotPath = messages{}.eventModelPath(ev)
		wantPath = gotPath // by name alone, unchanged
	default:
		got, want = shapeEvent(a, ev), responsesEventByGjson(b, ev)
		gotErr, wantErr = responses{}.IsError(ev), responsesIsErrorByGjson(ev)
		gotPath, wantPath = responses{}.eventModelPath(ev), responsesModelPathByGjson(ev)
	}
	if !json.Valid(ev.Data) {
		// The splice must still land on the bytes it names (a Responses model may be any
		// value, as gjson finds it).
		if m := got.model; m.Exists() && (m.Index <= 0 || m.Index+len(m.Raw) > len(ev.Data) || string(ev.Data[m.Index:m.Index+len(m.Raw)]) != m.Raw) {
			t.Fatalf("model found outside the data: %+v in %q", m, ev.Data)
		}
		return
	}
	if got.isError != want.isError || got.drop != want.drop || got.model.Raw != want.model.Raw ||
		got.model.Index != want.model.Index || a.Obs != b.Obs || a.LastSequence() != b.LastSequence() ||
		gotErr != wantErr || gotPath != wantPath {
		t.Fatalf("event %q %s\nwalker: %+v %+v seq %d error %v path %q\ngjson:  %+v %+v seq %d error %v path %q",
			ev.Name, ev.Data, got, a.Obs, a.LastSequence(), gotErr, gotPath, want, b.Obs, b.LastSequence(), wantErr, wantPath)
	}
}

// fuzzName is the event name a fuzz input reads its data under: one of names, which the
// fuzzer finds by number, or any other.
func fuzzName(names []string, pick uint8, other string) string {
	if int(pick) < len(names) {
		return names[pick]
	}
	return other
}

// BenchmarkShapeEvent is the shape's reading of its most frequent event, the one that
// carries a text delta, alone: what the walker replaced, without the stream around it.
func BenchmarkShapeEvent(b *testing.B) {
	for _, c := range []struct {
		name  string
		shape Shape
		ev    Event
	}{
		{"chat", chatCompletions{}, Event{Data: []byte(`{"id":"chatcmpl-CZ8rT1vQy3","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_cbf1785567","choices":[{"index":0,"delta":{"content":" token7"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"Qm2"}`)}},
		{"messages", messages{}, Event{Name: []byte("content_block_delta"), Data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token7"}}`)}},
		{"responses", responses{}, Event{Name: []byte("response.output_text.delta"), Data: []byte(`{"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_0c4f7d1e","output_index":0,"content_index":0,"delta":" token7","logprobs":[],"obfuscation":"Zk"}`)}},
		// A Codex session's response.created echoes its instructions, often many KB.
		{"responses-created-16KB", responses{}, Event{Name: []byte("response.created"), Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_0c4f","object":"response","created_at":1767225600,"status":"in_progress","error":null,"incomplete_details":null,"instructions":"` +
			strings.Repeat(`You are Codex.\n- Keep \"edits\" small. `, 400) + `","max_output_tokens":null,"model":"gpt-5.1-codex","output":[],"tools":[],"usage":null,"user":null}}`)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			s := c.shape.newStream(false)
			for b.Loop() {
				shapeEvent(s, c.ev)
			}
		})
	}
}
