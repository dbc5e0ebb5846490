package metering

import "github.com/switchyard-gw/switchyard/routing"

// EstimateInputTokens is the input of a request whose text is textBytes long, by the same
// rule Bill uses when an answer carries no usage (four characters a token).
func EstimateInputTokens(textBytes int64) int64 { return estimateTokens(textBytes) }

// WorstCaseCost is the most a request of input tokens, allowed output tokens of output,
// can cost at the model's prices: every input token at the dearer of the uncached and
// cache-write prices, every output token at the dearer of the visible and reasoning
// prices. It is what admission reserves against a budget; the metered cost of the same
// token counts is never more.
func WorstCaseCost(p routing.Prices, input, output int64) int64 {
	u := Usage{Input: input, Output: output}
	if cacheWritePrice(p) > p.Input {
		u.CacheWrite = input
	}
	if p.Reasoning > p.Output {
		u.Reasoning = output
	}
	return Cost(p, u)
}
