package metering

import (
	"encoding/json"
	"strconv"
	"time"
)

// appendJournalLine appends r as the JSON line the journal keeps, byte for byte what
// encoding/json makes of a Record, without its reflection: Append runs on every request
// and json.Marshal was most of its cost under load.
func appendJournalLine(dst []byte, r *Record) ([]byte, error) {
	dst = append(dst, `{"request_id":`...)
	dst = appendJSONText(dst, r.RequestID)
	dst = append(dst, `,"key_id":`...)
	dst = appendJSONText(dst, r.KeyID)
	if r.ProjectID != "" {
		dst = append(dst, `,"project_id":`...)
		dst = appendJSONText(dst, r.ProjectID)
	}
	dst = append(dst, `,"model":`...)
	dst = appendJSONText(dst, r.Model)
	dst = append(dst, `,"candidate":`...)
	dst = appendJSONText(dst, r.Candidate)
	if r.Channel != "" {
		dst = append(dst, `,"channel":`...)
		dst = appendJSONText(dst, r.Channel)
	}
	dst = append(dst, `,"protocol":`...)
	dst = appendJSONText(dst, r.Protocol)
	dst = append(dst, `,"operation":`...)
	dst = appendJSONText(dst, r.Operation)
	dst = appendJSONInt(dst, `,"status":`, int64(r.Status))
	dst = appendJSONInt(dst, `,"input":`, r.Input)
	dst = appendJSONInt(dst, `,"cached_input":`, r.CachedInput)
	dst = appendJSONInt(dst, `,"cache_write":`, r.CacheWrite)
	dst = appendJSONInt(dst, `,"output":`, r.Output)
	dst = appendJSONInt(dst, `,"reasoning":`, r.Reasoning)
	dst = append(dst, `,"estimated":`...)
	dst = strconv.AppendBool(dst, r.Estimated)
	if !r.ToolUses.IsZero() {
		dst = append(dst, `,"tool_uses":`...)
		dst = r.ToolUses.AppendJSON(dst)
	}
	dst = appendJSONInt(dst, `,"cost_micros":`, r.CostMicros)
	dst = appendJSONInt(dst, `,"latency_ms":`, r.LatencyMs)
	dst = appendJSONInt(dst, `,"ttfb_ms":`, r.TTFBMs)
	dst = appendJSONInt(dst, `,"attempts":`, int64(r.Attempts))
	dst = append(dst, `,"time":`...)
	if y := r.Time.Year(); y < 0 || y > 9999 {
		// encoding/json's error for a time it cannot write.
		_, err := r.Time.MarshalJSON()
		return dst, err
	}
	dst = append(dst, '"')
	dst = r.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if r.Outcome != "" {
		dst = append(dst, `,"outcome":`...)
		dst = appendJSONText(dst, r.Outcome)
	}
	if r.RefusedBy != "" {
		dst = append(dst, `,"refused_by":`...)
		dst = appendJSONText(dst, r.RefusedBy)
	}
	if len(r.Tries) > 0 {
		dst = append(dst, `,"tries":[`...)
		for i := range r.Tries {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendTry(dst, &r.Tries[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

func appendTry(dst []byte, t *Try) []byte {
	dst = append(dst, `{"candidate":`...)
	dst = appendJSONText(dst, t.Candidate)
	if t.Retry != 0 {
		dst = appendJSONInt(dst, `,"retry":`, int64(t.Retry))
	}
	if t.WaitMs != 0 {
		dst = appendJSONInt(dst, `,"wait_ms":`, t.WaitMs)
	}
	if t.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONText(dst, t.Reason)
	}
	if t.Status != 0 {
		dst = appendJSONInt(dst, `,"status":`, int64(t.Status))
	}
	dst = appendJSONInt(dst, `,"duration_ms":`, t.DurationMs)
	return append(dst, '}')
}

func appendJSONInt(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(append(dst, name...), v, 10)
}

// appendJSONText appends s as a JSON string. Printable ASCII other than the characters
// encoding/json escapes is copied as is; anything else takes encoding/json's own path.
func appendJSONText(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
