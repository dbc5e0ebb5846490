package protocols

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

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

// FuzzResponsesEvent holds the walker's reading of a Responses event to gjson's on every
// valid JSON event, under any name, as FuzzMessagesEvent does for Messages.
func FuzzResponsesEvent(f *testing.F) {
	for i, d := range responsesEvents {
		f.Add(uint8(i%len(responsesNames)), "", []byte(d))
	}
	f.Fuzz(func(t *testing.T, pick uint8, name string, data []byte) {
		compareEvent(t, KindResponses, eventNamed(fuzzName(responsesNames, pick, name), data))
	})
}
