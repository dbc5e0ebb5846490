package auth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeyInQuery(t *testing.T) {
	known := func(v string) bool { return v == "opaque-known-key-0123456789" }
	for q, want := range map[string]bool{
		"":                                       false,
		"beta=true":                              false,
		"api_key=sk-sy-abc":                      true,
		"API_KEY=x":                              true,
		"key=whatever":                           true,
		"access_token=t":                         true,
		"beta=true&x=sk-sy-0000":                 true,
		"q=opaque-known-key-0123456789":          true,
		"q=an-unknown-value-0123456789":          false,
		"%zz=1&apikey=sk-x":                      true,
		"beta=true&key":                          true,
		"note=sk-" + "sy-ahead-of-a-malformed=%": true,
	} {
		assert.Equal(t, want, KeyInQuery(q, known), q)
	}
}

func TestKeyInQueryLooksUpABoundedNumberOfValues(t *testing.T) {
	lookups := 0
	isKey := func(string) bool { lookups++; return false }
	q := strings.Repeat("v=an-opaque-value-0123456789&", 10_000)
	assert.False(t, KeyInQuery(q, isKey))
	assert.Equal(t, maxVerifiedQueryValues, lookups, "a long query costs a bounded number of key hashes")
}
