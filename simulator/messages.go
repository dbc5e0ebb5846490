package simulator

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/tidwall/gjson"
)

// thinkingText is the text of an Anthropic thinking block (empty when display is "omitted").
const thinkingText = "The user is talking to a simulator, so the answer is the fixed greeting."

func (c *call) messages(streaming bool) {
	req := gjson.ParseBytes(c.body)
	kind := req.Get("thinking.type").String()
	thinking := kind == "enabled" || kind == "adaptive"
	shownThinking := thinkingText
	if req.Get("thinking.display").String() == "omitted" {
		shownThinking = ""
	}
	countThinking := strings.Contains(strings.Join(c.r.Header.Values("anthropic-beta"), ","), "thinking-token-count")

	last := lastTurn(req.Get("messages"))
	endsWithResult := false
	if last.Get("role").String() == "user" {
		for _, block := range last.Get("content").Array() {
			endsWithResult = endsWithResult || block.Get("type").String() == "tool_result"
		}
	}
	tool := c.pickToolCall(req.Get("tools"), func(t gjson.Result) string {
		// Client tools have no type (or "custom"); typed ones are Anthropic-defined tools.
		if typ := t.Get("type").String(); typ != "" && typ != "custom" {
			return ""
		}
		return t.Get("name").String()
	}, endsWithResult)

	tag := ""
	if c.idTag != "" {
		tag = c.idTag + "_"
	}
	id := newID("msg_" + tag)
	signature := base64.StdEncoding.EncodeToString([]byte("simulated signature " + id))
	toolID := newID("toolu_" + tag)
	out := tokens(len(ReplyText))
	stopReason := "end_turn"
	var blocks []obj
	if thinking {
		blocks = append(blocks, obj{{"type", "thinking"}, {"thinking", shownThinking}, {"signature", signature}})
	}
	if tool != nil {
		out = tool.outputTokens()
		stopReason = "tool_use"
		blocks = append(blocks, obj{{"type", "tool_use"}, {"id", toolID}, {"name", tool.name},
			{"input", json.RawMessage(tool.args)}})
	} else {
		blocks = append(blocks, obj{{"type", "text"}, {"text", ReplyText}})
	}
	thinkingToks := 0
	if thinking {
		thinkingToks = reasoningTokens
	}
	out += thinkingToks
	in := c.inputTokens()

	// usage is the native usage object. message_start reports a 1-token placeholder output
	// (final false), message_delta only the counts (full false). The thinking breakdown is
	// only added to final counts, and only when the thinking-token-count beta asks for it.
	usage := func(final, full bool) obj {
		output := 1
		if final {
			output = out
		}
		u := obj{{"input_tokens", in}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}}
		if full {
			u = append(u, field{"cache_creation", obj{{"ephemeral_5m_input_tokens", 0}, {"ephemeral_1h_input_tokens", 0}}})
		}
		u = append(u, field{"output_tokens", output})
		if full {
			u = append(u, field{"service_tier", "standard"})
		}
		if final && countThinking {
			u = append(u, field{"output_tokens_details", obj{{"thinking_tokens", thinkingToks}}})
		}
		return u
	}
	message := func(content []obj, stopReason any, usage obj) obj {
		m := obj{
			{"id", id},
			{"type", "message"},
			{"role", "assistant"},
			{"model", c.model},
			{"content", content},
			{"stop_reason", stopReason},
			{"stop_sequence", nil},
		}
		if c.beh.noUsage {
			return m
		}
		return append(m, field{"usage", usage})
	}

	if !streaming {
		c.writeJSON(message(blocks, stopReason, usage(true, true)))
		return
	}

	var events []event
	emit := func(typ string, fields ...field) {
		events = append(events, event{name: typ, data: mustJSON(append(obj{{"type", typ}}, fields...))})
	}
	emit("message_start", field{"message", message([]obj{}, nil, usage(false, true))})
	emit("ping")
	index := 0
	block := func(start obj, deltas []obj) {
		at := field{"index", index}
		index++
		emit("content_block_start", at, field{"content_block", start})
		for _, d := range deltas {
			emit("content_block_delta", at, field{"delta", d})
		}
		emit("content_block_stop", at)
	}
	if thinking {
		var deltas []obj
		if shownThinking != "" {
			for _, w := range words(shownThinking, 4) {
				deltas = append(deltas, obj{{"type", "thinking_delta"}, {"thinking", w}})
			}
		}
		deltas = append(deltas, obj{{"type", "signature_delta"}, {"signature", signature}})
		block(obj{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, deltas)
	}
	var deltas []obj
	if tool != nil {
		for _, p := range pieces(tool.args, 10) {
			deltas = append(deltas, obj{{"type", "input_json_delta"}, {"partial_json", p}})
		}
		block(obj{{"type", "tool_use"}, {"id", toolID}, {"name", tool.name}, {"input", obj{}}}, deltas)
	} else {
		for _, w := range words(ReplyText, 1) {
			deltas = append(deltas, obj{{"type", "text_delta"}, {"text", w}})
		}
		block(obj{{"type", "text"}, {"text", ""}}, deltas)
	}
	final := []field{{"delta", obj{{"stop_reason", stopReason}, {"stop_sequence", nil}}}}
	if !c.beh.noUsage {
		final = append(final, field{"usage", usage(true, false)})
	}
	emit("message_delta", final...)
	events[len(events)-1].final = true
	emit("message_stop")
	c.writeStream(events)
}
