package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testToken = "syt_abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrstuvw"

// received is one call a fake server got: what, where, and the Authorization it carried.
type received struct{ method, uri, body, authorization string }

// recorder is a fake gateway door (the console under /console, or the admin endpoint)
// that records every call and answers "METHOD path" from answers (else 404).
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []received
	answers map[string]func(w http.ResponseWriter)
}

func newRecorder(t *testing.T, answers map[string]string) *recorder {
	f := &recorder{answers: map[string]func(http.ResponseWriter){}}
	for route, body := range answers {
		f.answers[route] = func(w http.ResponseWriter) { _, _ = io.WriteString(w, body) }
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, received{r.Method, r.URL.RequestURI(), string(body), r.Header.Get("Authorization")})
		answer := f.answers[r.Method+" "+r.URL.Path]
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if answer == nil {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"no such route"}`)
			return
		}
		answer(w)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *recorder) got() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.calls...)
}

// runCLI runs `caddy switchyard args...` as a user would, flags and environment
// included, and returns what it printed.
func runCLI(args ...string) (string, error) {
	var out bytes.Buffer
	root := &cobra.Command{Use: "switchyard", SilenceUsage: true, SilenceErrors: true}
	buildCLIWith(root, &out)
	root.SetOut(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// clearDoorEnv makes the test independent of the environment it runs in.
func clearDoorEnv(t *testing.T) {
	for _, v := range []string{tokenEnv, consoleEnv, "CADDY_ADMIN"} {
		t.Setenv(v, "")
	}
}

const tokenJSON = `{"id":"tok_1","name":"ci","prefix":"syt_abcd","grant":{"role":"project_admin","projects":["team-a"]},` +
	`"created_by":"user ana@example.com (sub 1)","created_at":"2026-11-01T00:00:00Z","expires_at":"2099-12-01T00:00:00Z"}`

// With a token, every command goes to <console>/api/<route> with the token as a bearer
// credential, and nothing goes to the admin endpoint; without one, every command goes
// to the admin endpoint as before, with no Authorization at all.
func TestCLIWithATokenCallsTheConsoleAPIAndOnlyIt(t *testing.T) {
	clearDoorEnv(t)
	routes := map[string]string{
		"GET /keys":                   `{"keys":[]}`,
		"POST /keys":                  `{"key":{"id":"key_1","name":"ci","status":"active","owner":"svc:ci"},"secret":"sk-sy-new"}`,
		"GET /projects/team-a":        `{"project":{"id":"team-a","name":"A"}}`,
		"GET /audit":                  `{"entries":[]}`,
		"GET /usage":                  `{"from":"2026-11-01","to":"2026-11-30","group":["day"],"rows":[],"total":{}}`,
		"GET /requests":               `{"requests":[]}`,
		"GET /connect/openai":         `{"setup":{"client":"openai","text":"OPENAI_BASE_URL=x\n"}}`,
		"POST /health/m/c/reset":      `{"model":"m","was":"open","candidate":{"name":"c","state":"closed"}}`,
		"POST /tokens":                `{"token":` + tokenJSON + `,"secret":"syt_newsecret"}`,
		"GET /tokens":                 `{"tokens":[` + tokenJSON + `]}`,
		"POST /tokens/tok_1/revoke":   `{"token":` + tokenJSON + `}`,
		"GET /people":                 `{"people":[{"id":"usr_1","email":"ana@example.com","grants":[{"role":"owner"}]}]}`,
		"POST /people/usr_1/disable":  `{"person":{"id":"usr_1","disabled_at":"2026-11-02T00:00:00Z"}}`,
		"POST /people/usr_1/enable":   `{"person":{"id":"usr_1"}}`,
		"GET /sessions":               `{"sessions":[]}`,
		"POST /sessions/ses_1/revoke": `{"session":{"id":"ses_1","kind":"user","user_id":"usr_1","revoked_at":"2026-11-02T00:00:00Z"}}`,
	}
	consoleRoutes, adminRoutes := map[string]string{}, map[string]string{}
	for route, answer := range routes {
		method, path, _ := strings.Cut(route, " ")
		consoleRoutes[method+" /console/api"+path] = answer
		adminRoutes[method+" /switchyard"+path] = answer
	}
	commands := [][]string{
		{"keys", "list"},
		{"keys", "create", "--name", "ci", "--owner", "svc:ci"},
		{"projects", "show", "team-a"},
		{"audit"},
		{"usage"},
		{"requests"},
		{"connect", "openai", "--base-url", "https://gw.example.com"},
		{"health", "reset", "m", "c"},
		{"tokens", "create", "--name", "ci", "--role", "project_admin", "--projects", "team-a", "--expires-in", "30d"},
		{"tokens", "list"},
		{"tokens", "revoke", "tok_1"},
		{"people", "list"},
		{"people", "disable", "usr_1"},
		{"people", "enable", "usr_1"},
		{"sessions", "list"},
		{"sessions", "revoke", "ses_1"},
	}

	console, admin := newRecorder(t, consoleRoutes), newRecorder(t, adminRoutes)
	t.Setenv("CADDY_ADMIN", admin.srv.URL)
	for _, args := range commands {
		_, err := runCLI(append(args, "--token", testToken, "--console", console.srv.URL+"/console/")...)
		require.NoError(t, err, "%q", args)
	}
	require.Len(t, console.got(), len(commands))
	for _, r := range console.got() {
		assert.True(t, strings.HasPrefix(r.uri, "/console/api/"), "%s %s", r.method, r.uri)
		assert.Equal(t, "Bearer "+testToken, r.authorization, "%s %s", r.method, r.uri)
	}
	assert.Empty(t, admin.got(), "with a token nothing reaches the admin endpoint")

	// The same commands without a token: the admin endpoint, no Authorization sent.
	for _, args := range commands {
		_, err := runCLI(args...)
		require.NoError(t, err, "%q", args)
	}
	require.Len(t, admin.got(), len(commands))
	for _, r := range admin.got() {
		assert.True(t, strings.HasPrefix(r.uri, "/switchyard/"), "%s %s", r.method, r.uri)
		assert.Empty(t, r.authorization, "%s %s", r.method, r.uri)
	}
	assert.Len(t, console.got(), len(commands), "without a token nothing reaches the console")
}

// $SWITCHYARD_TOKEN and $SWITCHYARD_CONSOLE stand for the flags; a flag wins over its
// variable.
func TestCLITokenAndConsoleFromTheEnvironment(t *testing.T) {
	clearDoorEnv(t)
	console := newRecorder(t, map[string]string{"GET /console/api/tokens": `{"tokens":[]}`, "GET /other/api/tokens": `{"tokens":[]}`})
	t.Setenv(tokenEnv, testToken)
	t.Setenv(consoleEnv, console.srv.URL+"/console")
	_, err := runCLI("tokens", "list")
	require.NoError(t, err)
	_, err = runCLI("tokens", "list", "--token", "syt_fromflag", "--console", console.srv.URL+"/other")
	require.NoError(t, err)
	got := console.got()
	require.Len(t, got, 2)
	assert.Equal(t, received{"GET", "/console/api/tokens", "", "Bearer " + testToken}, got[0])
	assert.Equal(t, received{"GET", "/other/api/tokens", "", "Bearer syt_fromflag"}, got[1])

	// $SWITCHYARD_CONSOLE alone changes nothing: without a token, the admin endpoint.
	admin := newRecorder(t, map[string]string{"GET /switchyard/tokens": `{"tokens":[]}`})
	t.Setenv(tokenEnv, "")
	t.Setenv("CADDY_ADMIN", admin.srv.URL)
	_, err = runCLI("tokens", "list")
	require.NoError(t, err)
	assert.Equal(t, []received{{"GET", "/switchyard/tokens", "", ""}}, admin.got())
	assert.Len(t, console.got(), 2)
}

// A token is sent over https, or plain http only to this machine; a mistaken set-up
// is refused before anything is sent, saying what is wrong, and never shows the token.
func TestCLITokenDoorRefusals(t *testing.T) {
	clearDoorEnv(t)
	console := newRecorder(t, nil)
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"token without a console", []string{"--token", testToken}, nil, "a token needs the console's address"},
		{"token from the environment without a console", nil, map[string]string{tokenEnv: testToken}, "a token needs the console's address"},
		{"plain http to another host", []string{"--token", testToken, "--console", "http://gw.example.com/console"}, nil,
			"refusing to send the token to http://gw.example.com: over plain http it would cross the network in clear"},
		{"plain http to a private address", nil, map[string]string{tokenEnv: testToken, consoleEnv: "http://10.1.2.3:8080/console"},
			"refusing to send the token to http://10.1.2.3:8080"},
		{"a host that only starts like localhost", []string{"--token", testToken, "--console", "http://localhost.evil.example/console"}, nil, "plain http"},
		{"no scheme", []string{"--token", testToken, "--console", "gw.example.com/console"}, nil, "must be a URL such as https://"},
		{"a query", []string{"--token", testToken, "--console", "https://gw.example.com/console?x=1"}, nil, "only a scheme, a host and a path"},
		{"a user", []string{"--token", testToken, "--console", "https://u:p@gw.example.com/console"}, nil, "only a scheme, a host and a path"},
		{"console without a token", []string{"--console", console.srv.URL}, nil, "no token was given"},
		{"token with the admin address", []string{"--token", testToken, "--console", console.srv.URL, "--address", console.srv.URL}, nil,
			"--address is the admin endpoint, which takes no token"},
		{"a key instead of a token", []string{"--token", "sk-sy-abcdef", "--console", console.srv.URL}, nil, "not a Switchyard API token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := runCLI(append([]string{"keys", "list"}, c.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.NotContains(t, err.Error(), testToken[4:12], "the token is never shown")
			assert.NotContains(t, err.Error(), "abcdef")
		})
	}
	assert.Empty(t, console.got(), "nothing was sent")

	// Plain http to this machine is a gateway run locally: allowed.
	for _, base := range []string{"http://localhost", "http://127.0.0.1:2080", "http://[::1]:8080/console/", "https://gw.example.com/console/"} {
		got, err := consoleBase(base)
		require.NoError(t, err, base)
		assert.Equal(t, strings.TrimSuffix(base, "/"), got)
	}
}

// A token follows no redirect: the console's API never redirects, and a token goes to
// the address it was given for and to no other.
func TestCLITokenFollowsNoRedirect(t *testing.T) {
	clearDoorEnv(t)
	elsewhere := newRecorder(t, map[string]string{"GET /api/keys": `{"keys":[]}`})
	console := newRecorder(t, nil)
	console.answers["GET /console/api/keys"] = func(w http.ResponseWriter) {
		w.Header().Set("Location", elsewhere.srv.URL+"/api/keys")
		w.WriteHeader(http.StatusFound)
	}
	_, err := runCLI("keys", "list", "--token", testToken, "--console", console.srv.URL+"/console")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redirect (HTTP 302), which a token does not follow")
	assert.Len(t, console.got(), 1)
	assert.Empty(t, elsewhere.got(), "the redirect's target received nothing")
}

// 401 and 403 say in one line what happened to the token; an answer that echoes the
// token (or any token) shows it masked.
func TestCLITokenRefusedAndMasked(t *testing.T) {
	clearDoorEnv(t)
	console := newRecorder(t, nil)
	answer := func(status int, body string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { w.WriteHeader(status); _, _ = io.WriteString(w, body) }
	}
	console.answers["GET /api/keys"] = answer(http.StatusUnauthorized, `{"error":"sign in first","sign_in":"auth/login"}`)
	console.answers["GET /api/people"] = answer(http.StatusForbidden, `{"error":"needs people.read"}`)
	console.answers["GET /api/tokens"] = answer(http.StatusBadRequest, `{"error":"bad token `+testToken+` (also syt_someoneelse)"}`)
	console.answers["GET /api/sessions"] = answer(http.StatusBadGateway, "<html>upstream got Authorization: Bearer "+testToken+"</html>")
	console.answers["GET /api/audit"] = answer(http.StatusOK, `not json `+testToken)
	for _, c := range []struct{ args, want string }{
		{"keys list", "the token was refused (expired or revoked?) (HTTP 401)"},
		{"people list", "the token's role does not allow this: needs people.read (HTTP 403)"},
		{"tokens list", "bad token syt_… (also syt_…) (HTTP 400)"},
		{"sessions list", "unexpected answer (HTTP 502): <html>upstream got Authorization: Bearer syt_…</html>"},
		{"audit", "unexpected answer (HTTP 200): not json syt_…"},
	} {
		_, err := runCLI(append(strings.Fields(c.args), "--token", testToken, "--console", console.srv.URL)...)
		require.Error(t, err, c.args)
		assert.Equal(t, c.want, err.Error(), c.args)
		assert.NotContains(t, err.Error(), testToken, c.args)
		assert.NotContains(t, err.Error(), "\n", c.args)
	}
}

// `tokens create` sends the grant as the API reads it and prints the secret once; a grant
// the gateway would refuse is refused without a call. `keys create --owner` sends the
// owner.
func TestCLITokensCreateAndKeyOwner(t *testing.T) {
	clearDoorEnv(t)
	f := newFakeAdmin(t, map[string]string{
		"POST /switchyard/tokens": `{"token":` + tokenJSON + `,"secret":"syt_newsecret"}`,
		"POST /switchyard/keys":   `{"key":{"id":"key_1","name":"ci","status":"active","owner":"usr_ab"},"secret":"sk-sy-new"}`,
		"GET /switchyard/tokens":  `{"tokens":[` + tokenJSON + `]}`,
	})
	out, err := f.run(t, "tokens", "create", "--name", "ci", "--role", "project_admin", "--projects", "team-a,team-b", "--expires-in", "30d")
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"ci","role":"project_admin","projects":["team-a","team-b"],"expires_in":"30d"}`,
		strings.TrimPrefix(f.sent()[0], "POST /switchyard/tokens "))
	assert.Equal(t, 1, strings.Count(out, "syt_newsecret"), out)
	assert.Contains(t, out, "secret (shown this once, store it now): syt_newsecret\n")
	assert.Contains(t, out, "role:       project_admin(team-a)\n")

	out, err = f.run(t, "tokens", "list")
	require.NoError(t, err)
	assert.Regexp(t, `tok_1\s+ci\s+syt_abcd…\s+active\s+project_admin\(team-a\)`, out)

	for args, want := range map[string]string{
		"--name ci --role member":                  "role member needs the projects it is for",
		"--name ci --role admin --projects team-a": "role admin reaches every project",
		"--name ci --role root":                    `unknown role "root"`,
		"--name= --role viewer":                    "--name: required",
	} {
		before := len(f.sent())
		_, err := f.run(t, append([]string{"tokens", "create"}, strings.Fields(args)...)...)
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want, args)
		assert.Len(t, f.sent(), before, "%s: nothing was sent", args)
	}

	out, err = f.run(t, "keys", "create", "--name", "ci", "--owner", "usr_ab")
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"ci","owner":"usr_ab"}`, strings.TrimPrefix(f.sent()[len(f.sent())-1], "POST /switchyard/keys "))
	assert.Contains(t, out, "owner:      usr_ab\n")
	before := len(f.sent())
	for _, owner := range []string{"ana@example.com", "usr_", "svc:", "svc:a b"} {
		_, err := f.run(t, "keys", "create", "--name", "ci", "--owner", owner)
		require.Error(t, err, owner)
		assert.Contains(t, err.Error(), "--owner: want a person's id (usr_…) or a service account (svc:<name>)")
	}
	assert.Len(t, f.sent(), before, "no refused owner reached the gateway")
}

// The live health list is the admin endpoint's: with a token, a console that has no such
// route is told apart from a typo, and the way to the list is named.
func TestCLIHealthWithATokenNamesTheAdminEndpoint(t *testing.T) {
	clearDoorEnv(t)
	console := newRecorder(t, nil)
	_, err := runCLI("health", "--token", testToken, "--console", console.srv.URL)
	require.Error(t, err)
	assert.Equal(t, "this gateway's console API has no live health list; run `caddy switchyard health` on the admin endpoint "+
		"(without a token), or see the console's Models view (HTTP 404)", err.Error())
	require.Len(t, console.got(), 1)
	assert.Equal(t, "/api/health", console.got()[0].uri)

	// On the admin endpoint a 404 stays what it was.
	admin := newRecorder(t, nil)
	_, err = runCLI("health", "--address", admin.srv.URL)
	require.Error(t, err)
	assert.Equal(t, "no such route (HTTP 404)", err.Error())
}
