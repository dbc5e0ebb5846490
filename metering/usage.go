// Package metering turns what an upstream reported into exact token counts and a price,
// and keeps a ledger of one record per request that loses nothing: every record is in a
// local journal before the answer's last byte reaches the client, and reaches the
// database from there. It knows nothing about Caddy.
package metering

import (
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Usage is what one request consumed, in the gateway's own terms.
type Usage struct {
	// Input counts every input token, cached ones included.
	Input int64 `json:"input"`
	// CachedInput is the part of Input read from the upstream's prompt cache.
	CachedInput int64 `json:"cached_input"`
	// CacheWrite is the part of Input written to the upstream's prompt cache.
	CacheWrite int64 `json:"cache_write"`
	// Output counts every output token, reasoning included.
	Output int64 `json:"output"`
	// Reasoning is the part of Output spent on reasoning or thinking.
	Reasoning int64 `json:"reasoning"`
	// Estimated says a count had to be derived rather than read from the upstream.
	Estimated bool `json:"estimated"`
}

// Observed is what the relay saw of an answer, for Extract.
type Observed struct {
	// Usage is the raw usage JSON (the last one of a stream).
	Usage []byte
	// StartUsage is Family B's message_start usage (input and cache counts).
	StartUsage []byte
	// ThinkingChars counts the thinking text forwarded to the client (Family B), used
	// when the upstream does not split thinking tokens out.
	ThinkingChars int64
	// OutputChars counts the text forwarded to the client, used when a stream ended
	// before its usage arrived.
	OutputChars int64
	// Complete says the answer reached its natural end.
	Complete bool
	// RequestTextBytes is the text size of the request (protocols.TextBytes), used when
	// the upstream's usage never arrived; a function so that it is only counted then.
	RequestTextBytes func() int64
}

// charsPerToken is the rough ratio used only where a count must be estimated.
const charsPerToken = 4

func estimateTokens(chars int64) int64 {
	if chars <= 0 {
		return 0
	}
	return (chars + charsPerToken - 1) / charsPerToken
}

// Extract reads the usage of one answer of kind from where its native shape keeps it.
func Extract(kind protocols.Kind, o Observed) Usage {
	u := gjson.ParseBytes(o.Usage)
	var out Usage
	switch kind {
	case protocols.KindChat:
		out = Usage{
			Input:       u.Get("prompt_tokens").Int(),
			CachedInput: u.Get("prompt_tokens_details.cached_tokens").Int(),
			CacheWrite:  u.Get("prompt_tokens_details.cache_write_tokens").Int(),
			Output:      u.Get("completion_tokens").Int(),
			Reasoning:   u.Get("completion_tokens_details.reasoning_tokens").Int(),
		}
	case protocols.KindResponses, protocols.KindResponsesCompact:
		out = Usage{
			Input:       u.Get("input_tokens").Int(),
			CachedInput: u.Get("input_tokens_details.cached_tokens").Int(),
			CacheWrite:  u.Get("input_tokens_details.cache_write_tokens").Int(),
			Output:      u.Get("output_tokens").Int(),
			Reasoning:   u.Get("output_tokens_details.reasoning_tokens").Int(),
		}
	case protocols.KindMessages:
		// Input and cache counts come from message_start in a stream (a final
		// message_delta may repeat them); Family B counts cache reads and writes beside
		// input_tokens, not inside it.
		start := gjson.ParseBytes(o.StartUsage)
		pick := func(field string) int64 {
			if v := u.Get(field); v.Exists() {
				return v.Int()
			}
			return start.Get(field).Int()
		}
		read, write := pick("cache_read_input_tokens"), pick("cache_creation_input_tokens")
		out = Usage{
			Input:       pick("input_tokens") + read + write,
			CachedInput: read,
			CacheWrite:  write,
			Output:      pick("output_tokens"),
		}
		if thinking := u.Get("output_tokens_details.thinking_tokens"); thinking.Exists() {
			out.Reasoning = thinking.Int()
		} else if o.ThinkingChars > 0 {
			// Thinking is inside output_tokens but not split out: derive it from the
			// thinking text that was forwarded, and say so.
			out.Reasoning = min(estimateTokens(o.ThinkingChars), out.Output)
			out.Estimated = true
		}
	default:
		return Usage{} // token counts and the like produce nothing to bill
	}
	if !o.Complete || len(o.Usage) == 0 && len(o.StartUsage) == 0 {
		// The answer ended before the upstream reported its final usage (a client that
		// left, a stream cut short): bill at least what was forwarded, and say it is an
		// estimate.
		if est := estimateTokens(o.OutputChars + o.ThinkingChars); est > out.Output {
			out.Output = est
		}
		if est := estimateTokens(o.ThinkingChars); est > out.Reasoning {
			out.Reasoning = est
		}
		if out.Input == 0 && o.RequestTextBytes != nil {
			// The prompt was sent and processed: never bill it as nothing.
			out.Input = estimateTokens(o.RequestTextBytes())
		}
		out.Estimated = true
	}
	out.CachedInput = min(out.CachedInput, out.Input)
	out.CacheWrite = min(out.CacheWrite, out.Input-out.CachedInput)
	out.Reasoning = min(out.Reasoning, out.Output)
	return out
}

// Cost prices a usage in micro-units: each kind of token at its own price per million,
// summed exactly and rounded once, half up.
func Cost(p routing.Prices, u Usage) int64 {
	uncached := u.Input - u.CachedInput - u.CacheWrite
	visible := u.Output - u.Reasoning
	total := uncached*p.Input + u.CachedInput*cachedPrice(p) + u.CacheWrite*cacheWritePrice(p) +
		visible*p.Output + u.Reasoning*p.Reasoning
	return (total + 500_000) / 1_000_000
}

// A cached or cache-write price that is not configured falls back to the input price:
// an operator who sets none is not billing caching separately.
func cachedPrice(p routing.Prices) int64 {
	if p.CachedInput == 0 {
		return p.Input
	}
	return p.CachedInput
}

func cacheWritePrice(p routing.Prices) int64 {
	if p.CacheWrite == 0 {
		return p.Input
	}
	return p.CacheWrite
}
