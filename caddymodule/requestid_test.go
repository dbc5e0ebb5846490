package caddymodule

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Request ids are also the ledger's primary key: they must be unique, keep their
// published form, and sort by when they were made, so that inserts go to the end of the
// database's index.
func TestRequestIDsAreUniqueAndSortByTime(t *testing.T) {
	form := regexp.MustCompile(`^sy_[0-9a-f]{24}$`)
	seen := make(map[string]bool, 20000)
	for range 20000 {
		id := newRequestID()
		require.Regexp(t, form, id)
		require.False(t, seen[id], "id %s made twice", id)
		seen[id] = true
	}
	earlier := newRequestID()
	time.Sleep(2 * time.Millisecond)
	later := newRequestID()
	assert.Less(t, earlier, later, "an id made later sorts later")
	assert.Less(t, earlier[:15], later[:15], "the time is in the leading digits")
}
