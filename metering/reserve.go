package metering

import (
	"math"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// EstimateInputTokens is the input admission reserves for a request body: the rule of
// protocols.EstimateInputTokens, which Answer.RequestInputTokens gives Bill when an answer
// carries no usage, so that what is reserved and what is billed agree.
func EstimateInputTokens(body []byte) int64 { return protocols.EstimateInputTokens(body) }

// WorstCaseCost is the most a request of input tokens, allowed output tokens of output,
// can cost at the model's prices: every input token at the dearer of the uncached and
// cache-write prices, every output token at the dearer of the visible and reasoning
// prices. It is what admission reserves against a budget; the metered cost of the same
// token counts is never more.
//
// A client may claim any output cap (max_tokens of 10^17 passes the shapes' checks on a
// model that declares no cap), and such counts times a price per million overflow int64
// into a negative cost that any budget would admit. A worst case that would not fit is
// math.MaxInt64: more than any budget.
func WorstCaseCost(p routing.Prices, input, output int64) int64 {
	const headroom = math.MaxInt64 / 4 // two products and the rounding stay below MaxInt64
	for _, f := range []struct{ tokens, price int64 }{
		{input, max(p.Input, cacheWritePrice(p))},
		{output, max(p.Output, p.Reasoning)},
	} {
		if f.tokens < 0 || (f.price > 0 && f.tokens > headroom/f.price) {
			return math.MaxInt64
		}
	}
	u := Usage{Input: input, Output: output}
	if cacheWritePrice(p) > p.Input {
		u.CacheWrite = input
	}
	if p.Reasoning > p.Output {
		u.Reasoning = output
	}
	return Cost(p, u)
}

// WorstCaseToolCost is the most a request's server-side tool uses can cost: each tool
// it declares used as many times as it may (its max_uses, else the default), at its
// price; or, when the request bounds all its tool calls together (Responses'
// max_tool_calls), that many uses of the dearest tool it declares. What it is billed
// for the same uses is never more.
func WorstCaseToolCost(p routing.ToolPrices, a protocols.ToolAllowance) int64 {
	if a.Total <= 0 {
		return ToolCost(p, a.Uses)
	}
	dearest := protocols.NumServerTools // none declared
	for t, n := range a.Uses {
		if n > 0 && (dearest == protocols.NumServerTools || p[t] > p[dearest]) {
			dearest = protocols.ServerTool(t)
		}
	}
	var uses protocols.ToolUses
	if dearest < protocols.NumServerTools {
		uses[dearest] = min(a.Total, protocols.MaxToolUses)
	}
	return ToolCost(p, uses)
}
