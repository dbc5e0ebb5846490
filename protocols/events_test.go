package protocols

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// messagesEventByGjson is how Messages events were read before the member walker: with
// gjson, as the reference the walker must agree with on every valid event.
func messagesEventByGjson(s *EventStream, ev Event) eventView {
	if messagesIsErrorByGjson(ev) {
		return eventView{isError: true}
	}
	switch string(ev.Name) {
	case "message_start":
		if u := getView(ev.Data, "message.usage"); u.IsObject() {
			s.Obs.mergeMessagesUsage(u)
		}
		return eventView{model: getView(ev.Data, "message.model")}
	case "content_block_delta":
		d := gjson.GetMany(view(ev.Data), "delta.text", "delta.partial_json", "delta.thinking")
		s.Obs.OutputChars += textLen(d[0]) + textLen(d[1])
		s.Obs.ThinkingChars += textLen(d[2])
	case "message_delta":
		f := gjson.GetMany(view(ev.Data), "usage", "delta.stop_reason")
		if f[0].IsObject() {
			s.Obs.mergeMessagesUsage(f[0])
			s.Obs.UsageFinal = true
		}
		if f[1].Str != "" {
			s.Obs.FinishReason = strings.Clone(f[1].Str)
		}
	case "message_stop":
		s.Obs.Complete = true
	}
	return eventView{}
}

func messagesIsErrorByGjson(ev Event) bool {
	return string(ev.Name) == "error" || gjson.GetBytes(ev.Data, "type").Str == "error"
}

// responsesEventByGjson is how Responses events were read before the member walker.
func responsesEventByGjson(s *EventStream, ev Event) eventView {
	if responsesIsErrorByGjson(ev) {
		if u := getView(ev.Data, "response.usage"); u.IsObject() {
			s.Obs.setFamilyAUsage(u, responsesUsage)
			s.Obs.UsageFinal = true
		}
		return eventView{isError: true}
	}
	f := gjson.GetMany(view(ev.Data), "type", "sequence_number", "delta")
	if f[1].Type == gjson.Number {
		s.stream.(*responsesStream).sequence = f[1].Int()
	}
	terminal := false
	switch f[0].Str {
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		s.Obs.OutputChars += textLen(f[2])
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		s.Obs.ThinkingChars += textLen(f[2])
	case "response.completed", "response.failed", "response.incomplete":
		s.Obs.Complete, terminal = true, true
		f := gjson.GetMany(view(ev.Data), "response.incomplete_details.reason", "response.status")
		s.Obs.FinishReason = strings.Clone(responsesFinishText(f[0].Str, f[1].Str))
	}
	if responsesModelPathByGjson(ev) == "" {
		return eventView{}
	}
	if u := getView(ev.Data, "response.usage"); u.IsObject() {
		s.Obs.setFamilyAUsage(u, responsesUsage)
		s.Obs.UsageFinal = terminal
	}
	return eventView{model: getView(ev.Data, "response.model")}
}

func responsesIsErrorByGjson(ev Event) bool {
	t := string(ev.Name)
	if t == "" {
		t = gjson.GetBytes(ev.Data, "type").Str
	}
	return t == "error" || t == "response.failed"
}

func responsesModelPathByGjson(ev Event) string {
	name := ev.Name
	if name == nil {
		name = []byte(gjson.GetBytes(ev.Data, "type").Str)
	}
	if strings.HasPrefix(string(name), "response.") && strings.Count(string(name), ".") == 1 {
		return "response.model"
	}
	return ""
}

// deep is v inside depth arrays and objects.
func deep(depth int, v string) string {
	return strings.Repeat(`[{"a":`, depth) + v + strings.Repeat(`}]`, depth)
}

// messagesEvents are the data of Messages events, plain and odd.
var messagesEvents = []string{
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello \"there\" \\ \u00e9"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
	`{"type":"message_start","message":{"id":"m","model":"claude-x","usage":{"input_tokens":10,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":1}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":89,"output_tokens_details":{"thinking_tokens":41}}}`,
	`{"type":"message_stop"}`,
	`{"type": "ping"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	// Escaped keys and values.
	`{"typ\u0065":"error"}`,
	`{"type":"\u0065rror"}`,
	`{"type":"content_block_delta","delt\u0061":{"t\u0065xt":"escaped key"}}`,
	`{"type":"content_block_delta","delta":{"thinkin\u0067":"t","partial_js\u006fn":"pp"}}`,
	// Duplicated keys.
	`{"type":"content_block_delta","type":"error"}`,
	`{"type":"error","type":"content_block_delta"}`,
	`{"type":"content_block_delta","delta":{"thinking":"a"},"delta":{"text":"bb","thinking":"ccc"}}`,
	`{"type":"content_block_delta","delta":{"text":"a","text":"bbb"}}`,
	`{"delta":{"partial_json":"1"},"delta":{"partial_json":"22","text":"333"},"delta":{"thinking":"4444"}}`,
	// Whitespace.
	" { \"type\" : \"content_block_delta\" ,\n\t\"delta\" : { \"text\" : \"x y\" , \"thinking\" : \"z\" } } ",
	"{\r\n\"type\"\r\n:\r\n\"error\"\r\n}",
	// Nested objects before the fields.
	`{"index":{"type":"error","delta":{"text":"no"}},"type":"content_block_delta","delta":{"nested":{"text":"no"},"text":"yes"}}`,
	`{"x":[{"delta":{"text":"no"}}],"delta":{"a":[{"thinking":"no"}],"thinking":"yes"},"type":"x"}`,
	// Type mismatches.
	`{"type":5}`,
	`{"type":null,"delta":{"text":"t"}}`,
	`{"type":["error"]}`,
	`{"type":{"type":"error"}}`,
	`{"delta":"text"}`,
	`{"delta":[{"text":"x"}],"delta":{"text":"yy"}}`,
	`{"delta":{"text":5,"partial_json":null,"thinking":{"a":1}}}`,
	`{"delta":null,"delta":{"text":"second"}}`,
	`{"message":"not an object","usage":[1]}`,
	`{"message":{"model":7,"usage":{"input_tokens":"x"}}}`,
	// Strings that look like members.
	`{"a":"\\","type":"error"}`,
	`{"a":"\\\"type\":\"error\"","type":"ping"}`,
	`{"a":"\"delta\":{\"text\":\"fake\"}","delta":{"text":"real"}}`,
	// Deep nesting before and around the fields.
	`{"x":` + deep(300, `{"type":"error"}`) + `,"type":"content_block_delta","delta":{"text":"d"}}`,
	`{"type":"content_block_delta","delta":{"x":` + deep(300, `"y"`) + `,"text":"after deep"}}`,
	`{}`,
	`[]`,
	`"error"`,
	`{"type":"error"`, // not JSON: only read without panicking
	`{"type":"content_block_delta","delta":`,
	`{"type":"content_block_delta","delta":{"text":"cut`,
	`{"type":"content_block_delta","delta":{"text":"a"`,
}

// responsesEvents are the data of Responses events, plain and odd.
var responsesEvents = []string{
	`{"type":"response.output_text.delta","sequence_number":7,"item_id":"m","output_index":0,"content_index":0,"delta":"Hello \"x\"","logprobs":[]}`,
	`{"type":"response.function_call_arguments.delta","sequence_number":8,"delta":"{\"a\":"}`,
	`{"type":"response.refusal.delta","sequence_number":9,"delta":"no"}`,
	`{"type":"response.reasoning_summary_text.delta","sequence_number":3,"delta":"**think**"}`,
	`{"type":"response.reasoning_text.delta","sequence_number":4,"delta":"raw"}`,
	`{"type":"response.created","sequence_number":0,"response":{"status":"in_progress","model":"gpt-x","usage":null}}`,
	`{"type":"response.in_progress","sequence_number":1,"response":{"status":"in_progress","model":"gpt-x","usage":{"input_tokens":3,"output_tokens":1}}}`,
	`{"type":"response.completed","sequence_number":11,"response":{"status":"completed","model":"gpt-x","usage":{"input_tokens":2511,"input_tokens_details":{"cached_tokens":2048},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":64}}}}`,
	`{"type":"response.incomplete","sequence_number":12,"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":"gpt-x","usage":{"input_tokens":1,"output_tokens":2}}}`,
	`{"type":"response.failed","sequence_number":5,"response":{"status":"failed","model":"gpt-x","usage":{"input_tokens":1,"output_tokens":0}}}`,
	`{"type":"error","code":"server_error","message":"boom","sequence_number":6}`,
	`{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"message","model":"not this"}}`,
	// Sequence numbers of every form.
	`{"type":"response.output_text.delta","sequence_number":-1,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":1.5,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":1e3,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":9007199254740993,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":12345678901234567890,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":0,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":007,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":999999999999999,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":9999999999999999,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":12E2,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":-0,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":"7","delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":null,"delta":"a"}`,
	`{"type":"response.output_text.delta","sequence_number":3,"sequence_number":4,"delta":"a"}`,
	`{"sequence_number":[1],"type":"response.output_text.delta","delta":"a"}`,
	// Escaped keys and values.
	`{"type":"response.output_text.d\u0065lta","sequence_number":1,"delta":"esc"}`,
	`{"typ\u0065":"response.output_text.delta","s\u0065quence_number":2,"delt\u0061":"esc key"}`,
	`{"type":"r\u0065sponse.completed","response":{"model":"m","status":"completed"}}`,
	`{"type":"\u0065rror"}`,
	// Order and duplicates.
	`{"delta":"before type","sequence_number":1,"type":"response.output_text.delta"}`,
	`{"type":"response.output_text.delta","delta":"one","delta":"twotwo","sequence_number":1}`,
	`{"type":"response.output_text.delta","type":"response.failed","delta":"x"}`,
	`{"type":"response.output_item.added","delta":"not counted","sequence_number":1}`,
	`{"type":"response.completed","type":"x","response":{"model":"m"},"response":{"model":"n"}}`,
	// Whitespace.
	" { \"type\" :\n\"response.output_text.delta\" ,\t\"sequence_number\" : 17 , \"delta\" : \"sp\" } ",
	// Nested objects before the fields.
	`{"item":{"type":"error","sequence_number":99,"delta":"no"},"type":"response.output_text.delta","sequence_number":3,"delta":"yes"}`,
	// Type mismatches.
	`{"type":5,"sequence_number":1,"delta":"x"}`,
	`{"type":"response.output_text.delta","delta":5}`,
	`{"type":"response.output_text.delta","delta":{"text":"x"}}`,
	`{"type":"response.completed","response":"no object"}`,
	`{"type":"response.completed","response":{"usage":[],"model":null}}`,
	// The response object of lifecycle events: duplicates, arrays, every model type.
	`{"type":"response.completed","response":[{"model":"x"}],"response":{"model":"y","status":"completed"}}`,
	`{"type":"response.created","response":{"status":"in_progress"},"response":{"model":"second","usage":{"input_tokens":1}}}`,
	`{"type":"response.created","response":{"model":"first","model":"dup","usage":{"input_tokens":1},"usage":{"input_tokens":2}}}`,
	`{"type":"response.incomplete","response":{"incomplete_details":null,"incomplete_details":{"reason":"content_filter"},"status":"incomplete","model":"m"}}`,
	`{"type":"response.incomplete","response":{"incomplete_details":{"x":1}},"response":{"incomplete_details":{"reason":"max_output_tokens"},"status":"incomplete"}}`,
	`{"type":"response.incomplete","response":{"incomplete_details":{"reason":5},"status":7}}`,
	`{"type":"response.completed","response":{"status":"first","status":"second"}}`,
	`{"type":"response.incomplete","response":{"incomplete_details":{"reason":"first"},"incomplete_details":{"reason":"second"},"status":"s1","status":"s2"}}`,
	`{"type":"response.incomplete","response":{"incomplete_details":{"reason":"r\u00e9ason"},"status":"st\"atus"}}`,
	`{"type":"response.completed","response":{"model":5,"status":"completed"}}`,
	`{"type":"response.completed","response":{"model":null}}`,
	`{"type":"response.completed","response":{"model":{"a":"b"}}}`,
	`{"type":"response.completed","response":{"model":["m"]}}`,
	`{"type":"response.completed","response":{"model":true}}`,
	`{"type":"response.completed","response":{"model":false}}`,
	`{"type":"response.completed","response":{"model":-1.5e3}}`,
	`{"type":"response.completed","response":{"model":"esc\"aped \u0041"}}`,
	`{"type":"response.completed","response":{"usage":null},"response":{"usage":{"input_tokens":9}}}`,
	`{"type":"response.completed","response":{"usage":"x"}}`,
	`{"type":"response.failed","response":"x","response":{"usage":{"input_tokens":3,"output_tokens":1}}}`,
	`{"type":"error","response":{"usage":{"input_tokens":4}}}`,
	`{"type":"response.completed","respons\u0065":{"model":"escaped key","st\u0061tus":"completed"}}`,
	`{"type":"response.created","response":{"instructions":` + deep(300, `{"model":"no"}`) + `,"model":"after deep","usage":{"output_tokens":2}}}`,
	`{"response":{"model":"before type","usage":{"input_tokens":1}},"type":"response.in_progress","sequence_number":1}`,
	`{"type":"response.completed","response":{"model":"m"}`,
	`{"type":"response.completed","response":`,
	`{"type":"response.completed","response":{"incomplete_details":`,
	// Strings that look like members; deep nesting.
	`{"a":"\\\"type\":\"error\"","type":"response.output_text.delta","delta":"\\"}`,
	`{"x":` + deep(300, `{"type":"error"}`) + `,"type":"response.output_text.delta","sequence_number":5,"delta":"d"}`,
	`{}`,
	`[]`,
	`{"type":"response.output_text.delta","sequence_number":1,"delta":"x"`, // not JSON
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

func TestMessagesEventsReadAsGjsonReadsThem(t *testing.T) {
	names, data := recordedData(t, "messages.*.sse")
	if len(data) == 0 {
		t.Fatal("no recorded Messages events")
	}
	for i := range data {
		compareEvent(t, KindMessages, Event{Name: []byte(names[i]), Data: []byte(data[i])})
	}
	for _, d := range messagesEvents {
		for _, name := range messagesNames {
			compareEvent(t, KindMessages, eventNamed(name, []byte(d)))
		}
	}
}

func TestResponsesEventsReadAsGjsonReadsThem(t *testing.T) {
	names, data := recordedData(t, "responses.*.sse")
	if len(data) == 0 {
		t.Fatal("no recorded Responses events")
	}
	for i := range data {
		compareEvent(t, KindResponses, Event{Name: []byte(names[i]), Data: []byte(data[i])})
		compareEvent(t, KindResponses, Event{Data: []byte(data[i])}) // the same, unnamed
	}
	for _, d := range responsesEvents {
		for _, name := range responsesNames {
			compareEvent(t, KindResponses, eventNamed(name, []byte(d)))
		}
	}
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

// FuzzMessagesEvent holds the walker's reading of a Messages event to gjson's on every
// valid JSON event, under any name.
func FuzzMessagesEvent(f *testing.F) {
	for i, d := range messagesEvents {
		f.Add(uint8(i%len(messagesNames)), "", []byte(d))
	}
	f.Fuzz(func(t *testing.T, pick uint8, name string, data []byte) {
		compareEvent(t, KindMessages, eventNamed(fuzzName(messagesNames, pick, name), data))
	})
}

// FuzzResponsesEvent does the same for Responses events.
func FuzzResponsesEvent(f *testing.F) {
	for i, d := range responsesEvents {
		f.Add(uint8(i%len(responsesNames)), "", []byte(d))
	}
	f.Fuzz(func(t *testing.T, pick uint8, name string, data []byte) {
		compareEvent(t, KindResponses, eventNamed(fuzzName(responsesNames, pick, name), data))
	})
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
