package main

import (
	"encoding/json"
	"testing"
)

// The coding-agent bodies must be valid JSON of about the size asked for, in each
// client's shape, and differ between stream and JSON only in the stream field.
func TestAgentBodies(t *testing.T) {
	for _, c := range agentCases() {
		for _, body := range [][]byte{c.stream, c.single} {
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatalf("%s: not JSON: %v", c.name, err)
			}
			want := agentTurnBytes
			if len(body) > 100<<10 {
				want = agentSessionBytes
			}
			if got := len(body); got < want*9/10 || got > want*11/10 {
				t.Errorf("%s: %d bytes, want about %d", c.name, got, want)
			}
			if v["model"] != c.model {
				t.Errorf("%s: model %v, want %s", c.name, v["model"], c.model)
			}
			turns := "messages"
			if c.path == "/v1/responses" {
				turns = "input"
			}
			if items, _ := v[turns].([]any); len(items) < 3 {
				t.Errorf("%s: %d %s, want a conversation of several turns", c.name, len(items), turns)
			}
			if tools, _ := v["tools"].([]any); len(tools) < 8 {
				t.Errorf("%s: %d tools", c.name, len(tools))
			}
		}
		if d := len(c.single) - len(c.stream); d != 1 { // "false" against "true"
			t.Errorf("%s: stream and JSON bodies differ by %d bytes", c.name, d)
		}
		t.Logf("%s: %d bytes", c.name, len(c.stream))
	}
}
