package protocols

import (
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
