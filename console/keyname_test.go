package console_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// A key's name is printable text of at most 100 characters: NUL, terminal escape
// sequences and bidirectional overrides are refused with 400 and a message that names
// the character by its code point, and nothing is stored.
func TestKeyNamesArePrintableText(t *testing.T) {
	h := newAPI(t, "")
	body := func(name string) string {
		b, err := json.Marshal(map[string]string{"name": name})
		require.NoError(t, err)
		return string(b)
	}
	for _, c := range []struct{ name, want string }{
		{"bad\x00name", "U+0000"},
		{"red\x1b[31malert", "U+001B"},
		{"two\nlines", "U+000A"},
		{"admin\u202egnp.exe", "U+202E"},
		{"zero\u200bwidth", "U+200B"},
		{strings.Repeat("n", 101), "at most 100 characters"},
		{"   ", "name: required"},
	} {
		w := do(h, "POST", "/api/keys", body(c.name))
		assert.Equal(t, http.StatusBadRequest, w.Code, "%q", c.name)
		msg := gjson.Get(w.Body.String(), "error").Str
		assert.Contains(t, msg, c.want, "%q", c.name)
		assert.NotContains(t, w.Body.String(), "\x1b")
		assert.NotContains(t, w.Body.String(), "\u202e")
	}
	assert.Empty(t, gjson.Get(do(h, "GET", "/api/keys", "").Body.String(), "keys").Array(), "no refused name was stored")

	// Accepted names are kept, without the white space around them.
	w := do(h, "POST", "/api/keys", body("  équipe données / nightly 🚀  "))
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	assert.Equal(t, "équipe données / nightly 🚀", gjson.Get(w.Body.String(), "key.name").Str)
	w = do(h, "POST", "/api/keys", body(strings.Repeat("n", 100)))
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
}
