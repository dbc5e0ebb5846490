package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/console"
)

// Every route that changes keys, limits or projects refuses a request without the
// console's header, and changes nothing: a page on another site can make a logged-in
// operator's browser send a form or a simple request, never a custom header. The same
// request with the header succeeds, so the refusal is the header's alone.
func TestEveryChangeNeedsTheConsoleHeader(t *testing.T) {
	api, h := newLimitsAPI(t)
	api.RequireHeader = console.ConsoleHeader
	header := []string{console.ConsoleHeader, "1"}
	w := do(h, "POST", "/api/projects", `{"id":"platform"}`, header...)
	require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
	newKey := func() string {
		w := do(h, "POST", "/api/keys", `{"name":"target"}`, header...)
		require.Equal(t, http.StatusCreated, w.Code, w.Body.String())
		return gjson.Get(w.Body.String(), "key.id").Str
	}
	// What a forged change could alter: the keys, the projects and the audit trail.
	state := func() string {
		var b strings.Builder
		for _, path := range []string{"/api/keys", "/api/projects", "/api/audit"} {
			w := do(h, "GET", path, "")
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			b.WriteString(w.Body.String())
		}
		return b.String()
	}

	changes := []struct {
		method, path, body string
		done               int
	}{
		{"POST", "/api/keys", `{"name":"forged"}`, http.StatusCreated},
		{"POST", "/api/keys/{key}/rotate", `{"grace":"1h"}`, http.StatusCreated},
		{"POST", "/api/keys/{key}/revoke", ``, http.StatusOK},
		{"DELETE", "/api/keys/{key}", ``, http.StatusOK},
		{"PUT", "/api/keys/{key}/limits", `{"budget":"1/day","rpm":1}`, http.StatusOK},
		{"PUT", "/api/keys/{key}/project", `{"project_id":"platform"}`, http.StatusOK},
		{"POST", "/api/projects", `{"id":"forged","limits":{"budget":"1000/month"}}`, http.StatusCreated},
		{"PUT", "/api/projects/platform/limits", `{"budget":"1000/month"}`, http.StatusOK},
	}
	for _, c := range changes {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			path := strings.ReplaceAll(c.path, "{key}", newKey())
			before := state()
			for _, value := range []string{"", "absent"} {
				var hdr []string
				if value == "" {
					hdr = []string{console.ConsoleHeader, ""} // present but empty
				}
				w := do(h, c.method, path, c.body, hdr...)
				assert.Equal(t, http.StatusForbidden, w.Code, "without the header: %s", w.Body.String())
				assert.Contains(t, gjson.Get(w.Body.String(), "error").Str, console.ConsoleHeader, "the refusal says what is missing")
			}
			assert.Equal(t, before, state(), "a refused change changed nothing, and left no audit entry")

			w := do(h, c.method, path, c.body, header...)
			assert.Equal(t, c.done, w.Code, "with the header: %s", w.Body.String())
		})
	}

	// No other method on these paths changes anything without the header either.
	key := newKey()
	before := state()
	for _, path := range []string{"/api/keys", "/api/keys/" + key, "/api/keys/" + key + "/rotate", "/api/keys/" + key + "/revoke",
		"/api/keys/" + key + "/limits", "/api/keys/" + key + "/project", "/api/projects", "/api/projects/platform",
		"/api/projects/platform/limits", "/api/audit"} {
		for _, method := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			w := do(h, method, path, `{"name":"forged","id":"forged2","project_id":"","rpm":1,"budget":"1/day"}`)
			assert.GreaterOrEqual(t, w.Code, 400, "%s %s without the header: %s", method, path, w.Body.String())
		}
	}
	assert.Equal(t, before, state(), "no method on any route changed anything without the header")
}
