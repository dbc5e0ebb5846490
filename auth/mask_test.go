package auth_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/auth"
)

func TestMaskKeys(t *testing.T) {
	isKey := func(s string) bool { return s == "plain-static-secret-9d3f" }
	for _, c := range []struct{ in, want string }{
		{"/v1/chat/completions", "/v1/chat/completions"},
		{"/v1/sk-test-key-0123456789abcdef/chat/completions", "/v1/REDACTED/chat/completions"},
		{"/v1/%73%6B%2Dtest-key-0123/models", "/v1/REDACTED/models"},
		{"/v1/SK-upper/models", "/v1/REDACTED/models"},
		{"/v1/models/desk-model-2026", "/v1/models/desk-model-2026"},
		{"/v1/plain-static-secret-9d3f/messages", "/v1/REDACTED/messages"},
		{"/v1/plain-static-secret-9d3x/messages", "/v1/plain-static-secret-9d3x/messages"},
		{"/v1/models?api_key=abc&page=2", "/v1/models?api_key=REDACTED&page=2"},
		{"my-tool/1.0 (key=the-clients-key-0123456789)", "my-tool/1.0 (key=REDACTED)"},
	} {
		assert.Equal(t, c.want, auth.MaskKeys(c.in, []string{"the-clients-key-0123456789"}, isKey), c.in)
	}
	t.Run("a URI without a key is the same string", func(t *testing.T) {
		in := "/v1/chat/completions"
		assert.Equal(t, in, auth.MaskKeys(in, nil, isKey))
	})
	t.Run("a bounded number of segments is looked up", func(t *testing.T) {
		looked := 0
		path := strings.Repeat("/segment-long-enough-0123", 100)
		auth.MaskKeys(path, nil, func(string) bool { looked++; return false })
		assert.LessOrEqual(t, looked, 16)
	})
}

// Caddyfile.example's keyless_log masks URIs by the very rules MaskKeys masks a trace
// by: a key is kept out of logs and spans alike. The example carries them twice (the
// access and error logs' request>uri, the admin log's uri).
func TestExampleLogMasksURIsByTheSameRules(t *testing.T) {
	b, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	for _, p := range auth.URIKeyPatterns {
		assert.Equal(t, 2, strings.Count(string(b), "regexp `"+p+"` ${1}REDACTED"), "keyless_log masks by %s", p)
	}
}
