package simulator

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// reasoningSummary is the summary text of a Responses reasoning item.
const reasoningSummary = "The user wants a reply; the simulator always gives the same greeting."

func (c *call) responses(streaming bool) {
	req := gjson.ParseBytes(c.body)
	effort := req.Get("reasoning.effort").String()
	reasoning := effort != "" && effort != "none"
	summary := req.Get("reasoning.summary").String() != ""
	encrypted := false
	for _, inc := range req.Get("include").Array() {
		encrypted = encrypted || inc.String() == "reasoning.encrypted_content"
	}
	input := req.Get("input")
	tool := c.pickToolCall(req.Get("tools"), func(t gjson.Result) string {
		if t.Get("type").String() != "function" {
			return ""
		}
		return t.Get("name").String()
	}, input.IsArray() && strings.HasSuffix(lastTurn(input).Get("type").String(), "_output"))

	out := tokens(len(ReplyText))
	if tool != nil {
		out = tool.outputTokens()
	}
	reasoningToks := 0
	if reasoning {
		reasoningToks = reasoningTokens
	}
	out += reasoningToks
	in := c.inputTokens()
	var usage any = obj{
		{"input_tokens", in},
		{"input_tokens_details", obj{{"cached_tokens", 0}}},
		{"output_tokens", out},
		{"output_tokens_details", obj{{"reasoning_tokens", reasoningToks}}},
		{"total_tokens", in + out},
	}

	// The output items, each in its final form and in the form output_item.added carries.
	var items, added []obj
	reasoningID := newID("rs_")
	if reasoning {
		summaryParts := list{}
		if summary {
			summaryParts = list{obj{{"type", "summary_text"}, {"text", reasoningSummary}}}
		}
		item := func(parts list) obj {
			o := obj{{"id", reasoningID}, {"type", "reasoning"}, {"summary", parts}}
			if encrypted {
				o = append(o, field{"encrypted_content", base64.StdEncoding.EncodeToString(
					[]byte("simulated reasoning " + reasoningID))})
			}
			return o
		}
		items = append(items, item(summaryParts))
		added = append(added, item(list{}))
	}
	itemID := newID("msg_")
	if tool != nil {
		itemID = newID("fc_")
		callID := newID("call_")
		fc := func(status, args string) obj {
			return obj{{"id", itemID}, {"type", "function_call"}, {"status", status},
				{"arguments", args}, {"call_id", callID}, {"name", tool.name}}
		}
		items = append(items, fc("completed", tool.args))
		added = append(added, fc("in_progress", ""))
	} else {
		items = append(items, obj{{"id", itemID}, {"type", "message"}, {"status", "completed"},
			{"content", list{outputText(ReplyText)}}, {"role", "assistant"}})
		added = append(added, obj{{"id", itemID}, {"type", "message"}, {"status", "in_progress"},
			{"content", list{}}, {"role", "assistant"}})
	}

	if c.beh.noUsage {
		usage = nil
	}
	id := newID("resp_")
	created := time.Now().Unix()
	if !streaming {
		c.writeJSON(c.responseObject(id, created, "completed", items, usage))
		return
	}

	var events []event
	seq := 0
	emit := func(typ string, fields ...field) {
		o := append(obj{{"type", typ}, {"sequence_number", seq}}, fields...)
		seq++
		events = append(events, event{name: typ, data: mustJSON(o)})
	}
	emit("response.created", field{"response", c.responseObject(id, created, "in_progress", nil, nil)})
	emit("response.in_progress", field{"response", c.responseObject(id, created, "in_progress", nil, nil)})
	for i := range items {
		at := field{"output_index", i}
		emit("response.output_item.added", at, field{"item", added[i]})
		switch {
		case i == 0 && reasoning:
			if summary {
				ref := []field{{"item_id", reasoningID}, at, {"summary_index", 0}}
				emit("response.reasoning_summary_part.added", append(ref, field{"part", obj{{"type", "summary_text"}, {"text", ""}}})...)
				for _, w := range words(reasoningSummary, 4) {
					emit("response.reasoning_summary_text.delta", append(ref, field{"delta", w})...)
				}
				emit("response.reasoning_summary_text.done", append(ref, field{"text", reasoningSummary})...)
				emit("response.reasoning_summary_part.done", append(ref, field{"part", obj{{"type", "summary_text"}, {"text", reasoningSummary}}})...)
			}
		case tool != nil:
			ref := []field{{"item_id", itemID}, at}
			for _, p := range pieces(tool.args, 10) {
				emit("response.function_call_arguments.delta", append(ref, field{"delta", p})...)
			}
			emit("response.function_call_arguments.done", append(ref, field{"name", tool.name}, field{"arguments", tool.args})...)
		default:
			ref := []field{{"item_id", itemID}, at, {"content_index", 0}}
			emit("response.content_part.added", append(ref, field{"part", outputText("")})...)
			for _, w := range words(ReplyText, 1) {
				emit("response.output_text.delta", append(ref, field{"delta", w}, field{"logprobs", list{}})...)
			}
			emit("response.output_text.done", append(ref, field{"text", ReplyText}, field{"logprobs", list{}})...)
			emit("response.content_part.done", append(ref, field{"part", outputText(ReplyText)})...)
		}
		emit("response.output_item.done", at, field{"item", items[i]})
	}
	emit("response.completed", field{"response", c.responseObject(id, created, "completed", items, usage)})
	events[len(events)-1].final = true
	c.writeStream(events)
}

func outputText(text string) obj {
	return obj{{"type", "output_text"}, {"annotations", list{}}, {"logprobs", list{}}, {"text", text}}
}

// responseObject is the Response resource; request settings are echoed as the real API does.
// A nil output is written as [] and a nil usage as null (both as in an in-progress response).
func (c *call) responseObject(id string, created int64, status string, output []obj, usage any) obj {
	var completedAt any
	if status == "completed" {
		completedAt = time.Now().Unix()
	}
	if output == nil {
		output = []obj{}
	}
	return obj{
		{"id", id},
		{"object", "response"},
		{"created_at", created},
		{"status", status},
		{"background", false},
		{"completed_at", completedAt},
		{"error", nil},
		{"incomplete_details", nil},
		{"instructions", c.echo("instructions", nil)},
		{"max_output_tokens", c.echo("max_output_tokens", nil)},
		{"max_tool_calls", c.echo("max_tool_calls", nil)},
		{"model", c.model},
		{"output", output},
		{"parallel_tool_calls", c.echo("parallel_tool_calls", true)},
		{"previous_response_id", c.echo("previous_response_id", nil)},
		{"prompt_cache_key", c.echo("prompt_cache_key", nil)},
		{"reasoning", obj{{"effort", c.echo("reasoning.effort", nil)}, {"summary", c.echo("reasoning.summary", nil)}}},
		{"service_tier", "default"},
		{"store", c.echo("store", true)},
		{"temperature", c.echo("temperature", 1.0)},
		{"text", c.echo("text", obj{{"format", obj{{"type", "text"}}}, {"verbosity", "medium"}})},
		{"tool_choice", c.echo("tool_choice", "auto")},
		{"tools", c.echo("tools", list{})},
		{"top_p", c.echo("top_p", 1.0)},
		{"truncation", c.echo("truncation", "disabled")},
		{"usage", usage},
		{"user", nil},
		{"metadata", c.echo("metadata", obj{})},
	}
}

// compact answers /v1/responses/compact: the input's user messages followed by one
// compaction item, as the real endpoint does.
func (c *call) compact() {
	var output list
	input := gjson.GetBytes(c.body, "input")
	if input.Type == gjson.String {
		output = append(output, userMessage(input))
	}
	for _, item := range input.Array() {
		if item.IsObject() && item.Get("role").String() == "user" {
			output = append(output, userMessage(item.Get("content")))
		}
	}
	itemID := newID("cmp_")
	content := base64.StdEncoding.EncodeToString([]byte("simulated compaction " + itemID))
	output = append(output, obj{{"id", itemID}, {"type", "compaction"}, {"encrypted_content", content}})
	in, out := c.inputTokens(), tokens(len(content))
	c.writeJSON(obj{
		{"id", newID("resp_")},
		{"object", "response.compaction"},
		{"created_at", time.Now().Unix()},
		{"output", output},
		{"usage", obj{
			{"input_tokens", in},
			{"input_tokens_details", obj{{"cached_tokens", 0}}},
			{"output_tokens", out},
			{"output_tokens_details", obj{{"reasoning_tokens", 0}}},
			{"total_tokens", in + out},
		}},
	})
}

// userMessage is a user input item in the full form output lists use: a typed message whose
// string content becomes an input_text part.
func userMessage(content gjson.Result) obj {
	var parts any = list{}
	switch {
	case content.Type == gjson.String:
		parts = list{obj{{"type", "input_text"}, {"text", content.Str}}}
	case content.Exists():
		parts = json.RawMessage(content.Raw)
	}
	return obj{{"type", "message"}, {"role", "user"}, {"content", parts}}
}
