package caddymodule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A key hammering its limit gets its refusals logged at most ten times a second, and
// another key's refusals are counted apart.
func TestTheRequestLogKeepsAFewRefusalsOfAKeyPerSecond(t *testing.T) {
	var s refusalSampler
	at := time.Unix(1_800_000_000, 0)
	logged := 0
	for range 1000 {
		if s.admit("key_hammer", at.Add(300*time.Millisecond)) {
			logged++
		}
	}
	assert.Equal(t, refusalsLoggedPerSecond, logged)
	assert.True(t, s.admit("key_other", at.Add(500*time.Millisecond)), "another key has its own count")
	assert.True(t, s.admit("key_hammer", at.Add(time.Second)), "the next second starts again")
}
