package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminServer serves the admin module's one route as Caddy's admin endpoint mounts it.
func adminServer(t *testing.T, app *App) *httptest.Server {
	t.Helper()
	a := new(AdminAPI)
	a.serveApp(app)
	routes := a.Routes()
	require.Len(t, routes, 1, "one route: /switchyard/")
	mux := http.NewServeMux()
	mux.Handle(routes[0].Pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := routes[0].Handler.ServeHTTP(w, r); err != nil {
			apiErr, _ := err.(caddy.APIError)
			http.Error(w, err.Error(), apiErr.HTTPStatus)
		}
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func status(t *testing.T, srv *httptest.Server, method, path string) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Each path under /switchyard/ reaches what served it when each had a module of its own:
// health, set-ups and the console API answer; other paths are not found.
func TestAdminRouteReachesEachPart(t *testing.T) {
	srv := adminServer(t, exampleApp(t))
	for path, want := range map[string]int{
		"/switchyard/health":    http.StatusOK,
		"/switchyard/keys":      http.StatusOK,
		"/switchyard/keys/nope": http.StatusNotFound,
		"/switchyard/models":    http.StatusOK,
		"/switchyard/projects":  http.StatusOK,
		"/switchyard/audit":     http.StatusOK,
		"/switchyard/usage":     http.StatusOK,
		"/switchyard/connect/openai?base_url=http://gw.example.com": http.StatusOK,
		"/switchyard/":             http.StatusNotFound,
		"/switchyard/nope":         http.StatusNotFound,
		"/switchyard/models/extra": http.StatusNotFound,
		"/switchyard/health/extra": http.StatusNotFound,
	} {
		assert.Equal(t, want, status(t, srv, "GET", path), path)
	}
	assert.Equal(t, http.StatusMethodNotAllowed, status(t, srv, "POST", "/switchyard/health"))
}

// Without a switchyard app health lists nothing, the store's routes say there is no
// store, and set-ups say there is no app.
func TestAdminRouteWithoutAnApp(t *testing.T) {
	srv := adminServer(t, nil)
	answer := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := answer("/switchyard/health")
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"candidates":[]}`, body, "no app: no candidates, not an error")
	for _, path := range []string{"/switchyard/keys", "/switchyard/projects/p1"} {
		code, body = answer(path)
		assert.Equal(t, http.StatusServiceUnavailable, code, path)
		assert.Contains(t, body, "no key store configured", path)
	}
	code, body = answer("/switchyard/connect/openai")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "no switchyard app", "a set-up needs the app, not a store: the answer says which is missing")
}

// The CLI reads what the admin route answers: a project with a budget, a key in it, a
// rotation, a change of limits that keeps what it does not name, and the audit trail.
func TestCLIAgainstTheAdminRoute(t *testing.T) {
	srv := adminServer(t, exampleApp(t))
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		root := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
		buildCLIWith(root, &out)
		root.SetArgs(append(args, "--address", srv.URL))
		require.NoError(t, root.Execute(), "%q: %s", args, out.String())
		return out.String()
	}
	out := run("projects", "create", "p1", "--name", "Platform", "--budget", "50/month")
	assert.Contains(t, out, "name:       Platform")
	assert.Contains(t, out, "limits:     budget 50/month")

	out = run("keys", "create", "--name", "ci", "--project", "p1")
	assert.Contains(t, out, "project:    p1")
	assert.Contains(t, out, "secret (shown this once, store it now): sk-sy-")
	id := regexp.MustCompile(`id:\s+(\S+)`).FindStringSubmatch(out)
	require.Len(t, id, 2, out)

	out = run("keys", "rotate", id[1], "--grace", "1h")
	assert.Contains(t, out, "replaces "+id[1]+", now active until ")

	out = run("projects", "limits", "p1", "--rpm", "5")
	assert.Contains(t, out, "limits:     budget 50/month, 5 rpm", "the budget the flags left out is kept")

	out = run("projects", "show", "p1")
	assert.Contains(t, out, "keys (2):")
	assert.Contains(t, out, id[1])

	out = run("audit")
	assert.Contains(t, out, id[1])
	assert.Contains(t, out, "p1")
}
