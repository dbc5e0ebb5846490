package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Per-round ratios pair each round's two measurements, leave out a round the divisor
// missed, and show as a range only when there is more than one.
func TestRoundRatiosPairEachRoundAndShowTheirRange(t *testing.T) {
	got := pairedRatios([]float64{110, 90, 120, 100}, []float64{100, 100, 0})
	assert.Equal(t, []float64{1.1, 0.9}, got)
	assert.Equal(t, " (rounds 0.90×–1.10×)", spread(got))
	assert.Equal(t, "", spread([]float64{1.2}))
}
