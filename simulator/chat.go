package simulator

import (
	"time"

	"github.com/tidwall/gjson"
)

func (c *call) chat(streaming bool) {
	req := gjson.ParseBytes(c.body)
	effort := req.Get("reasoning_effort").String()
	reasoning := 0
	if effort != "" && effort != "none" {
		reasoning = reasoningTokens
	}
	last := lastTurn(req.Get("messages")).Get("role").String()
	tool := c.pickToolCall(req.Get("tools"), func(t gjson.Result) string {
		if t.Get("type").String() != "function" {
			return ""
		}
		return t.Get("function.name").String()
	}, last == "tool" || last == "function")

	completion := tokens(len(ReplyText))
	finish := "stop"
	if tool != nil {
		completion = tool.outputTokens()
		finish = "tool_calls"
	}
	completion += reasoning
	prompt := c.inputTokens()
	usage := obj{
		{"prompt_tokens", prompt},
		{"completion_tokens", completion},
		{"total_tokens", prompt + completion},
		{"prompt_tokens_details", obj{{"cached_tokens", 0}, {"audio_tokens", 0}}},
		{"completion_tokens_details", obj{
			{"reasoning_tokens", reasoning},
			{"audio_tokens", 0},
			{"accepted_prediction_tokens", 0},
			{"rejected_prediction_tokens", 0},
		}},
	}
	id := newID("chatcmpl-")
	created := time.Now().Unix()
	callID := newID("call_")

	if !streaming {
		message := obj{{"role", "assistant"}, {"content", ReplyText}, {"refusal", nil}, {"annotations", list{}}}
		if tool != nil {
			message = obj{{"role", "assistant"}, {"content", nil}, {"refusal", nil},
				{"tool_calls", list{obj{
					{"id", callID},
					{"type", "function"},
					{"function", obj{{"name", tool.name}, {"arguments", tool.args}}},
				}}},
				{"annotations", list{}}}
		}
		reply := obj{
			{"id", id},
			{"object", "chat.completion"},
			{"created", created},
			{"model", c.model},
			{"choices", list{obj{{"index", 0}, {"message", message}, {"logprobs", nil}, {"finish_reason", finish}}}},
		}
		if !c.beh.noUsage {
			reply = append(reply, field{"usage", usage})
		}
		c.writeJSON(append(reply, field{"service_tier", "default"}))
		return
	}

	includeUsage := req.Get("stream_options.include_usage").Bool() && !c.beh.noUsage
	var events []event
	chunk := func(choices list, usage any) {
		o := obj{
			{"id", id},
			{"object", "chat.completion.chunk"},
			{"created", created},
			{"model", c.model},
			{"service_tier", "default"},
			{"choices", choices},
		}
		if includeUsage {
			o = append(o, field{"usage", usage})
		}
		events = append(events, event{data: mustJSON(o)})
	}
	delta := func(d obj, finish any) {
		chunk(list{obj{{"index", 0}, {"delta", d}, {"logprobs", nil}, {"finish_reason", finish}}}, nil)
	}

	if tool != nil {
		delta(obj{{"role", "assistant"}, {"content", nil}, {"refusal", nil}, {"tool_calls", list{obj{
			{"index", 0},
			{"id", callID},
			{"type", "function"},
			{"function", obj{{"name", tool.name}, {"arguments", ""}}},
		}}}}, nil)
		for _, p := range pieces(tool.args, 10) {
			delta(obj{{"tool_calls", list{obj{{"index", 0}, {"function", obj{{"arguments", p}}}}}}}, nil)
		}
	} else {
		delta(obj{{"role", "assistant"}, {"content", ""}, {"refusal", nil}}, nil)
		for _, w := range words(ReplyText, 1) {
			delta(obj{{"content", w}}, nil)
		}
	}
	delta(obj{}, finish)
	final := len(events) // the usage chunk, or [DONE]
	if includeUsage {
		chunk(list{}, usage)
	}
	if !c.beh.noDone {
		events = append(events, event{data: []byte("[DONE]")})
	}
	if final < len(events) { // with no-done and no usage chunk there is no final event to delay
		events[final].final = true
	}
	c.writeStream(events)
}
