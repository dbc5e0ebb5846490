package metering

import (
	"time"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Usage is what one request consumed, in the gateway's own terms.
type Usage = protocols.Usage

// charsPerToken is the rough ratio used only where a count must be estimated.
const charsPerToken = 4

func estimateTokens(chars int64) int64 {
	if chars <= 0 {
		return 0
	}
	return (chars + charsPerToken - 1) / charsPerToken
}

// Bill is the usage to charge for an answer, from what its shape observed: the
// upstream's own counts where it reported them, estimates (flagged) where it did not.
// requestInputTokens, the request's input estimated (EstimateInputTokens), is asked for
// only when the input must be estimated.
func Bill(o protocols.Observation, requestInputTokens func() int64) Usage {
	if !o.Billable {
		return Usage{} // token counts and the like produce nothing to bill
	}
	out := o.Usage
	if !o.ReasoningReported && o.ThinkingChars > 0 {
		// Thinking is inside the output count but not split out: derive it from the
		// thinking text that was forwarded, and say so.
		out.Reasoning = min(estimateTokens(o.ThinkingChars), out.Output)
		out.Estimated = true
	}
	if !o.UsageFinal {
		// The upstream never reported its final usage (a stream cut short, or one that
		// reported only partial counts): bill at least the text it carried, and say it
		// is an estimate. Final usage is billed as reported, terminator or not.
		if est := estimateTokens(o.OutputChars + o.ThinkingChars); est > out.Output {
			out.Output = est
		}
		if est := estimateTokens(o.ThinkingChars); est > out.Reasoning {
			out.Reasoning = est
		}
		if out.Input == 0 && requestInputTokens != nil {
			// The prompt was sent and processed: never bill it as nothing.
			out.Input = requestInputTokens()
		}
		out.Estimated = true
	}
	out.CachedInput = min(out.CachedInput, out.Input)
	out.CacheWrite = min(out.CacheWrite, out.Input-out.CachedInput)
	out.Reasoning = min(out.Reasoning, out.Output)
	return out
}

// Cost prices a usage in micro-units: each kind of token at its own price per million,
// summed exactly and rounded once, half up; plus each server-side tool's uses at its
// price per 1,000 uses (ToolCost).
func Cost(p routing.Prices, u Usage) int64 {
	uncached := u.Input - u.CachedInput - u.CacheWrite
	visible := u.Output - u.Reasoning
	total := uncached*p.Input + u.CachedInput*cachedPrice(p) + u.CacheWrite*cacheWritePrice(p) +
		visible*p.Output + u.Reasoning*p.Reasoning
	return (total+500_000)/1_000_000 + ToolCost(p.Tools, u.ToolUses)
}

// ToolCost prices server-side tools' uses in micro-units: each tool's uses at its price
// per 1,000 uses, summed exactly and rounded once, half up. Counts are held to
// protocols.MaxToolUses and prices to routing.MaxToolPrice, so nothing overflows.
func ToolCost(prices routing.ToolPrices, uses protocols.ToolUses) int64 {
	var whole, thousandths int64
	for t, n := range uses {
		v := min(max(n, 0), protocols.MaxToolUses) * min(max(prices[t], 0), routing.MaxToolPrice) // at most 10^18
		whole += v / 1_000
		thousandths += v % 1_000
	}
	return whole + (thousandths+500)/1_000
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

// Answer is what the gateway knows of one answer when its record is made.
type Answer struct {
	RequestID, KeyID, Model, Candidate, Channel string
	Op                                          protocols.Operation
	Status                                      int
	// Obs is what the answer's shape observed; RequestInputTokens estimates the
	// request's input (EstimateInputTokens), asked for only when no usage came.
	Obs                protocols.Observation
	RequestInputTokens func() int64
	Prices             routing.Prices
	Latency, TTFB      time.Duration
	Attempts           int
	// Abandoned counts attempts given up after their upstream had the whole request
	// (the gateway's own timeout) besides the one the answer stands for: the upstream
	// started that work too, so each adds the request's input, estimated.
	Abandoned int
}

// NewRecord bills and prices an answer and makes its ledger record.
func NewRecord(a Answer, now time.Time) *Record {
	u := Bill(a.Obs, a.RequestInputTokens)
	if a.Abandoned > 0 && a.Obs.Billable && a.RequestInputTokens != nil {
		u.Input += int64(a.Abandoned) * a.RequestInputTokens()
		u.Estimated = true
	}
	return &Record{
		RequestID:  a.RequestID,
		KeyID:      a.KeyID,
		Model:      a.Model,
		Candidate:  a.Candidate,
		Channel:    a.Channel,
		Protocol:   a.Op.Family.Token(),
		Operation:  a.Op.Kind.String(),
		Status:     a.Status,
		Usage:      u,
		CostMicros: Cost(a.Prices, u),
		LatencyMs:  a.Latency.Milliseconds(),
		TTFBMs:     a.TTFB.Milliseconds(),
		Attempts:   a.Attempts,
		Time:       now.UTC(),
	}
}
