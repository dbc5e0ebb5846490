package protocols

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func allowance(t *testing.T, kind Kind, body string) ToolAllowance {
	t.Helper()
	p, err := ParseRequest(Operation{Kind: kind}.Family, []byte(body))
	require.Nil(t, err)
	a, e := p.serverTools(kind, 10)
	require.Nil(t, e, "%s", body)
	return a
}

// What a request may use: each declared server tool its max_uses, else the default;
// client tools nothing; counts held to MaxToolUses.
func TestServerToolsARequestMayUse(t *testing.T) {
	msgs := func(extra string) string {
		return `{"model":"m","max_tokens":10,` + extra + `"messages":[{"role":"user","content":"hi"}]}`
	}
	a := allowance(t, KindMessages, msgs(`"tools":[{"name":"get_weather","input_schema":{"type":"object"}},`+
		`{"type":"web_search_20250305","name":"web_search","max_uses":25},{"type":"web_fetch_20250910","name":"web_fetch"},`+
		`{"type":"custom","name":"x","input_schema":{}}],"mcp_servers":[{"type":"url","url":"u1"},{"type":"url","url":"u2"}],`))
	want := ToolUses{ToolWebSearch: 25, ToolWebFetch: 10, ToolMCP: 20}
	assert.Equal(t, want, a.Uses)
	assert.Zero(t, a.Total)

	a = allowance(t, KindMessages, msgs(`"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1000000000000000000000}],`))
	assert.Equal(t, int64(MaxToolUses), a.Uses[ToolWebSearch], "a huge max_uses is held to the bound")

	a = allowance(t, KindMessages, msgs(``))
	assert.True(t, a.Uses.IsZero(), "no tools, no uses")

	a = allowance(t, KindResponses, `{"model":"m","input":"x","max_tool_calls":3,"tools":[{"type":"web_search_preview"},`+
		`{"type":"file_search"},{"type":"function","name":"f"},{"type":"code_interpreter"},{"type":"image_generation"},{"type":"mcp"}]}`)
	assert.Equal(t, ToolUses{ToolWebSearch: 10, ToolFileSearch: 10, ToolCodeInterpreter: 10, ToolImageGeneration: 10, ToolMCP: 10}, a.Uses)
	assert.Equal(t, int64(3), a.Total)

	a = allowance(t, KindResponses, `{"model":"m","input":"x","tools":[{"type":"function","name":"f","type":"web_search"}]}`)
	assert.Equal(t, ToolUses{ToolWebSearch: 10}, a.Uses, "a tool typed twice is a server tool if either type says so")
}

// A count a client's parser and an upstream's could read differently is refused.
func TestAnAmbiguousToolCountIsRefused(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		body string
	}{
		{KindMessages, `{"tools":[{"type":"web_search_20250305","max_uses":"5"}]}`},
		{KindMessages, `{"tools":[{"type":"web_search_20250305","max_uses":0}]}`},
		{KindMessages, `{"tools":[{"type":"web_fetch_20250910","max_uses":2.5}]}`},
		{KindMessages, `{"tools":[{"type":"web_search_20250305","max_uses":1,"max_uses":9}]}`},
		{KindMessages, `{"tools":[{"type":"web_search_20250305","max_uses":1,"MAX_USES":9}]}`},
		{KindResponses, `{"max_tool_calls":"9","tools":[{"type":"web_search"}]}`},
		{KindResponses, `{"max_tool_calls":0}`},
	} {
		fam := FamilyB
		if tc.kind == KindResponses {
			fam = FamilyA
		}
		p, err := ParseRequest(fam, []byte(tc.body))
		require.Nil(t, err)
		_, e := p.serverTools(tc.kind, 10)
		assert.NotNil(t, e, "%s", tc.body)
	}
}

// What an answer used: Messages' server_tool_use counts and MCP blocks, JSON and
// stream; a reported count held to MaxToolUses.
func TestMessagesServerToolUsesAreRead(t *testing.T) {
	_, obs := ShapeOf(KindMessages).Answer([]byte(`{"model":"m","content":[{"type":"mcp_tool_use","id":"a"},{"type":"text","text":"x"},` +
		`{"type":"mcp_tool_use","id":"b"}],"usage":{"input_tokens":5,"output_tokens":2,"server_tool_use":{"web_search_requests":3,"web_fetch_requests":1}}}`))
	assert.Equal(t, ToolUses{ToolWebSearch: 3, ToolWebFetch: 1, ToolMCP: 2}, obs.Usage.ToolUses)

	_, obs = ShapeOf(KindMessages).Answer([]byte(`{"usage":{"output_tokens":2,"server_tool_use":{"web_search_requests":9223372036854775807}}}`))
	assert.Equal(t, int64(MaxToolUses), obs.Usage.ToolUses[ToolWebSearch], "an upstream's huge count is held to the bound")

	s := ShapeOf(KindMessages).newStream(false)
	for _, ev := range []struct{ name, data string }{
		{"message_start", `{"type":"message_start","message":{"model":"m","usage":{"input_tokens":5,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"mcp_tool_use","id":"a"}}`},
		{"message_delta", `{"type":"message_delta","delta":{},"usage":{"output_tokens":2,"server_tool_use":{"web_search_requests":1}}}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":4,"server_tool_use":{"web_search_requests":4}}}`},
	} {
		s.stream.event(&s.Obs, Event{Name: []byte(ev.name), Data: []byte(ev.data)})
	}
	assert.Equal(t, ToolUses{ToolWebSearch: 4, ToolMCP: 1}, s.Obs.Usage.ToolUses, "the last cumulative count, and the MCP block")
	assert.Equal(t, int64(4), s.Obs.Usage.Output)
}

// Responses: output items of the tools' call types, JSON and stream; a stream cut before
// its terminal event bills the calls whose items ended, and a terminal event's output
// repeating them does not count them twice.
func TestResponsesServerToolCallsAreCounted(t *testing.T) {
	output := `[{"type":"web_search_call","id":"1"},{"type":"message","content":[{"type":"output_text","text":"web_search_call"}]},` +
		`{"type":"file_search_call"},{"type":"code_interpreter_call"},{"type":"image_generation_call","result":"` + strings.Repeat("A", 4096) + `"},{"type":"mcp_call"},{"type":"web_search_call"}]`
	want := ToolUses{ToolWebSearch: 2, ToolFileSearch: 1, ToolCodeInterpreter: 1, ToolImageGeneration: 1, ToolMCP: 1}
	_, obs := ShapeOf(KindResponses).Answer([]byte(`{"model":"m","output":` + output + `,"usage":{"input_tokens":1,"output_tokens":1}}`))
	assert.Equal(t, want, obs.Usage.ToolUses)

	s := ShapeOf(KindResponses).newStream(false)
	event := func(typ, data string) {
		s.stream.event(&s.Obs, Event{Name: []byte(typ), Data: []byte(`{"type":"` + typ + `","sequence_number":1,` + data + `}`)})
	}
	event("response.output_item.done", `"item":{"type":"web_search_call","id":"1"}`)
	event("response.output_item.done", `"item":{"type":"file_search_call"}`)
	assert.Equal(t, ToolUses{ToolWebSearch: 1, ToolFileSearch: 1}, s.Obs.Usage.ToolUses, "a cut stream bills the calls it carried")
	event("response.completed", `"response":{"model":"m","status":"completed","output":`+output+`,"usage":{"input_tokens":1,"output_tokens":1}}`)
	assert.Equal(t, want, s.Obs.Usage.ToolUses, "the whole output, each call once")
}
