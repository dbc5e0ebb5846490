package metering

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

// The journal is read back with encoding/json (after a restart, by an operator's
// tools): the hand-written encoder must write exactly what encoding/json writes.
func TestJournalLineIsWhatEncodingJSONWrites(t *testing.T) {
	texts := []string{"", "sy_0192f3a4b5c6d7e8f9a0b1c2", "key_a", "gpt-4o", `say "hi"`, `back\slash`,
		"tab\there", "<html>&amp;", "caf\u00e9", "\u2028line", "bad\xffbyte", "emoji \U0001F600", "nul\x00"}
	times := []time.Time{
		time.Date(2026, 11, 22, 23, 59, 59, 123456789, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 100000000, time.FixedZone("x", 3600)),
	}
	for i, text := range texts {
		r := Record{
			RequestID: text, KeyID: texts[(i+1)%len(texts)], ProjectID: texts[(i+2)%len(texts)],
			Model: texts[(i+3)%len(texts)], Candidate: text, Channel: texts[(i+4)%len(texts)], Protocol: "family_a", Operation: "chat_completions",
			Status: 200 + i, Usage: Usage{Input: int64(i) * 1000, CachedInput: -1, CacheWrite: 7, Output: 1 << 40, Reasoning: 3, Estimated: i%2 == 0},
			CostMicros: -5, LatencyMs: 12, TTFBMs: 3, Attempts: i, Time: times[i%len(times)],
		}
		if i%3 == 1 {
			r.Outcome, r.RefusedBy = OutcomeRefused, text
		}
		if i%2 == 1 { // server tool uses, some tools only
			r.ToolUses[protocols.ToolWebSearch] = int64(i)
			r.ToolUses[protocols.ToolMCP] = protocols.MaxToolUses
		}
		if i%3 == 2 {
			r.Outcome = OutcomeFailed
			r.Tries = []Try{{Candidate: text, Status: 503, Reason: texts[(i+5)%len(texts)], DurationMs: 4},
				{Candidate: "b", Retry: i%2 + 1, WaitMs: int64(i), DurationMs: 0}}
		}
		want, err := json.Marshal(&r)
		require.NoError(t, err)
		got, err := appendJournalLine(nil, &r)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "record %d", i)
		var back Record
		require.NoError(t, json.Unmarshal(got, &back))
		assert.Equal(t, r.ToolUses, back.ToolUses, "record %d: the tool uses read back", i)
	}
	_, err := appendJournalLine(nil, &Record{RequestID: "x", Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	assert.Error(t, err, "a time encoding/json refuses is refused")
}

// Lines journaled before the request log existed carry no outcome and no attempts: they
// replay as served answers.
func TestJournalLineWithoutRequestLogFieldsReplaysAsServed(t *testing.T) {
	old := `{"request_id":"r1","key_id":"k","model":"m","candidate":"c","protocol":"family_a","operation":"chat_completions",` +
		`"status":200,"input":1,"cached_input":0,"cache_write":0,"output":2,"reasoning":0,"estimated":false,` +
		`"cost_micros":3,"latency_ms":4,"ttfb_ms":1,"attempts":1,"time":"2026-01-02T03:04:05Z"}`
	var r Record
	require.NoError(t, json.Unmarshal([]byte(old), &r))
	assert.Empty(t, r.Outcome)
	assert.Empty(t, r.RefusedBy)
	assert.Empty(t, r.Tries)
	again, err := appendJournalLine(nil, &r)
	require.NoError(t, err)
	assert.Equal(t, old, string(again), "an old record is written back as it was")
}
