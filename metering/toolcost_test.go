package metering

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// Tool uses are priced per 1,000 uses, rounded once; the largest counts and prices the
// gateway accepts cannot overflow into a small or negative cost.
func TestToolCost(t *testing.T) {
	var prices routing.ToolPrices
	prices[protocols.ToolWebSearch] = 10_000_000    // 10 per 1,000 uses
	prices[protocols.ToolFileSearch] = 2_500_000    // 2.5 per 1,000
	prices[protocols.ToolImageGeneration] = 333_333 // 0.333333 per 1,000
	var uses protocols.ToolUses
	uses[protocols.ToolWebSearch], uses[protocols.ToolFileSearch], uses[protocols.ToolWebFetch] = 25, 3, 7
	assert.Equal(t, int64(250_000+7_500), ToolCost(prices, uses), "a tool without a price costs nothing")
	uses = protocols.ToolUses{protocols.ToolImageGeneration: 3}
	assert.Equal(t, int64(1_000), ToolCost(prices, uses), "999.999 rounds half up to 1,000")

	for i := range prices {
		prices[i] = routing.MaxToolPrice
		uses[i] = 1 << 62 // more than any count read is held to
	}
	want := int64(protocols.NumServerTools) * protocols.MaxToolUses * (routing.MaxToolPrice / 1_000)
	assert.Equal(t, want, ToolCost(prices, uses))
}

// With max_tool_calls, the worst case is that many uses of the dearest tool declared.
func TestWorstCaseToolCostUnderATotal(t *testing.T) {
	var prices routing.ToolPrices
	prices[protocols.ToolWebSearch], prices[protocols.ToolImageGeneration], prices[protocols.ToolCodeInterpreter] = 10_000_000, 40_000_000, 99_000_000
	a := protocols.ToolAllowance{Uses: protocols.ToolUses{protocols.ToolWebSearch: 10, protocols.ToolImageGeneration: 10}}
	assert.Equal(t, int64(500_000), WorstCaseToolCost(prices, a), "10 of each at its price")
	a.Total = 4
	assert.Equal(t, int64(160_000), WorstCaseToolCost(prices, a), "4 images, the dearest declared (code interpreter is not)")
	a.Total = 100
	assert.Equal(t, int64(4_000_000), WorstCaseToolCost(prices, a), "more than the defaults when the request allows more")
}
