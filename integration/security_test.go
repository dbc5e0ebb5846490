package integration

// The promises of docs/security.md that no other test of this package proves end to end:
// a key's secret shown once and stored only as its hash, key names refused with control
// or formatting characters, every change audited, metrics and the request log free of
// secrets, upstream names and prompts, and the example's console behind its login and its
// header. The table at the end of docs/security.md names the test of each promise.

import (
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	_ "modernc.org/sqlite"
)

// storeGateway runs the gateway with the standard models and its key store in a SQLite
// file the test can read.
func storeGateway(t *testing.T) (*gateway, string) {
	t.Helper()
	up := newUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "keys.db")
	return startGatewayWith(t, up, standardModels(up), "\t\tstore sqlite "+dbPath+"\n"), dbPath
}

// A key is sk-sy- and 52 base32 characters (256 random bits), none drawn twice; its
// secret is in the answer that made it and in no later one (the list, the key, the audit
// trail); the store keeps its SHA-256 and a display prefix, and no other part of it, in
// any byte of the database or its write-ahead log. The gateway finds a key by that hash:
// each one works.
func TestAKeyIsShownOnceAndStoredOnlyAsItsHash(t *testing.T) {
	g, dbPath := storeGateway(t)
	format := regexp.MustCompile(`^sk-sy-[a-z2-7]{52}$`)
	secretOf := map[string]string{} // key id → secret
	for i := range 8 {
		id, secret := g.createKey(t, `{"name":"key `+strconv.Itoa(i)+`"}`)
		require.Regexp(t, format, secret)
		for _, other := range secretOf {
			require.NotEqual(t, other, secret, "a secret drawn twice")
		}
		secretOf[id] = secret
	}
	var first string
	for id := range secretOf {
		first = id
		break
	}
	status, rotated := g.adminCall(t, "POST", "/switchyard/keys/"+first+"/rotate", `{"grace":"1h"}`)
	require.Equal(t, 201, status, "%s", rotated.Raw)
	require.Regexp(t, format, rotated.Get("secret").Str, "a rotation shows the new secret once")
	secretOf[rotated.Get("key.id").Str] = rotated.Get("secret").Str

	for _, secret := range secretOf {
		assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+secret).Status)
	}

	// What must never be shown again or stored: each secret past its display prefix,
	// whole or in part.
	var hidden []string
	check := func(where, text string) {
		t.Helper()
		for _, h := range hidden {
			if strings.Contains(strings.ToLower(text), h) {
				t.Errorf("%s holds part of a secret: %q", where, h)
			}
		}
	}
	_, list := g.adminCall(t, "GET", "/switchyard/keys", "")
	require.Len(t, list.Get("keys").Array(), len(secretOf))
	for _, k := range list.Get("keys").Array() {
		secret, prefix := secretOf[k.Get("id").Str], k.Get("prefix").Str
		require.NotEmpty(t, secret, "a listed key no test made: %s", k.Raw)
		require.True(t, strings.HasPrefix(secret, prefix) && len(prefix) < 16, "the display prefix %q of %q", prefix, secret)
		body := strings.TrimPrefix(secret, prefix)
		hidden = append(hidden, body, body[:len(body)/2], body[len(body)/2:])
	}
	check("the key list", list.Raw)
	for id := range secretOf {
		status, k := g.adminCall(t, "GET", "/switchyard/keys/"+id, "")
		require.Equal(t, 200, status)
		check("the key "+id, k.Raw)
	}
	_, audit := g.adminCall(t, "GET", "/switchyard/audit", "")
	require.NotEmpty(t, audit.Get("entries").Array())
	check("the audit trail", audit.Raw)

	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT id, hash FROM api_keys`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var id string
		var hash []byte
		require.NoError(t, rows.Scan(&id, &hash))
		want := sha256.Sum256([]byte(secretOf[id]))
		assert.Equal(t, want[:], hash, "the key %s is stored as the SHA-256 of its secret", id)
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(secretOf), n)
	for _, file := range []string{dbPath, dbPath + "-wal"} {
		b, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		check(filepath.Base(file), string(b))
	}
}

// A key's name is printable text of 1 to 100 characters, trimmed: a name with a control
// character, an escape sequence or an invisible formatting character (a bidi override, a
// zero-width space) is refused with 400 by the admin API and by the CLI, and nothing is
// made; a name stored before the rule is printed escaped by `keys list` and `keys show`.
func TestKeyNamesWithControlOrFormatCharactersAreRefused(t *testing.T) {
	g, dbPath := storeGateway(t)
	for what, name := range map[string]string{
		"an escape sequence":   "\x1b[2J\x1b[31mops",
		"a bidi override":      "invoice\u202efdp.exe",
		"a zero-width space":   "ci\u200bbot",
		"a tab":                "ci\tbot",
		"a line break":         "ci\nbot",
		"a NUL":                "ci\x00bot",
		"101 characters":       strings.Repeat("é", 101),
		"nothing but spaces":   "   ",
		"a line separator":     "ci\u2028bot",
		"a C1 control (CSI)":   "ci\u009bbot",
		"a right-to-left mark": "\u200fci-bot",
	} {
		body, err := json.Marshal(map[string]string{"name": name})
		require.NoError(t, err)
		status, answer := g.adminCall(t, "POST", "/switchyard/keys", string(body))
		assert.Equal(t, 400, status, "%s: %s", what, answer.Raw)
		assert.Contains(t, answer.Get("error").Str, "name", "%s", what)
	}
	_, list := g.adminCall(t, "GET", "/switchyard/keys", "")
	assert.Empty(t, list.Get("keys").Array(), "a refused name made a key")

	// The limits: 100 characters (not bytes), surrounding spaces trimmed.
	longest := strings.Repeat("é", 100)
	id, _ := g.createKey(t, `{"name":"  `+longest+`  "}`)
	_, k := g.adminCall(t, "GET", "/switchyard/keys/"+id, "")
	assert.Equal(t, longest, k.Get("key.name").Str)

	// The CLI refuses such a name before it asks the gateway.
	out, err := switchyardCLIErr(g, "keys", "create", "--name", "\x1b]0;pwned\x07ci")
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "U+001B", "the error names the character by its code point")
	assert.NotContains(t, out+err.Error(), "\x1b", "and never prints it")
	_, list = g.adminCall(t, "GET", "/switchyard/keys", "")
	assert.Len(t, list.Get("keys").Array(), 1, "the CLI's refused name made a key")

	// A name stored before the rule existed, written straight into the database.
	const stored = "evil\x1b[2J\u202etxt.exe"
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	defer db.Close()
	res, err := db.Exec(`UPDATE api_keys SET name = ? WHERE id = ?`, stored, id)
	require.NoError(t, err)
	changed, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(1), changed)
	for _, args := range [][]string{{"keys", "list"}, {"keys", "show", id}} {
		out := switchyardCLI(t, g, args...)
		assert.Contains(t, out, `evil\x1b[2J\u202etxt.exe`, "%v prints the stored name escaped:\n%s", args, out)
		assert.NotContains(t, out, "\x1b", "%v prints an escape sequence", args)
		assert.NotContains(t, out, "\u202e", "%v prints a bidi override", args)
	}
}

// Every change to a key, a project or their limits made through the admin API is in the
// audit trail, newest first, with the admin API as its actor and its target, and never a
// secret; a change refused (a bad name, limits for an unknown model, an unknown key)
// records nothing.
func TestEveryChangeToAKeyProjectOrLimitIsAudited(t *testing.T) {
	g, _ := storeGateway(t)
	change := func(method, path, body string, want int) gjson.Result {
		t.Helper()
		status, answer := g.adminCall(t, method, path, body)
		require.Equal(t, want, status, "%s %s: %s", method, path, answer.Raw)
		return answer
	}
	change("POST", "/switchyard/projects", `{"id":"platform","limits":{"budget":"5/month"}}`, 201)
	change("PUT", "/switchyard/projects/platform/limits", `{"rpm":100}`, 200)
	created := change("POST", "/switchyard/keys", `{"name":"deploy","project_id":"platform"}`, 201)
	id := created.Get("key.id").Str
	change("PUT", "/switchyard/keys/"+id+"/limits", `{"budget":"1/month"}`, 200)
	change("PUT", "/switchyard/keys/"+id+"/project", `{"project_id":""}`, 200)
	rotated := change("POST", "/switchyard/keys/"+id+"/rotate", `{"grace":"1h"}`, 201)
	newID := rotated.Get("key.id").Str
	change("POST", "/switchyard/keys/"+newID+"/revoke", "", 200)
	change("DELETE", "/switchyard/keys/"+id, "", 200) // the old key, still in its grace

	// Refused: nothing to record.
	change("POST", "/switchyard/keys", `{"name":"bad\u202ename"}`, 400)
	change("PUT", "/switchyard/keys/"+id+"/limits", `{"models":{"no-such-model":{"rpm":1}}}`, 400)
	change("POST", "/switchyard/keys/key_nosuchkey/rotate", `{}`, 404)
	change("PUT", "/switchyard/projects/nosuch/limits", `{"rpm":1}`, 404)

	type entry struct{ Action, Target string }
	want := []entry{
		{"key.revoke", id}, {"key.revoke", newID}, {"key.rotate", id}, {"key.project", id},
		{"key.limits", id}, {"key.create", id}, {"project.limits", "platform"}, {"project.create", "platform"},
	}
	audit := change("GET", "/switchyard/audit", "", 200)
	var got []entry
	for _, e := range audit.Get("entries").Array() {
		got = append(got, entry{e.Get("action").Str, e.Get("target").Str})
		assert.Equal(t, "admin API", e.Get("actor").Str, "%s", e.Raw)
		assert.NotEmpty(t, e.Get("at").Str, "%s", e.Raw)
	}
	assert.Equal(t, want, got, "every change, once, newest first")
	secret := rotated.Get("secret").Str
	require.NotEmpty(t, secret)
	for _, s := range []string{created.Get("secret").Str, secret} {
		assert.NotContains(t, audit.Raw, strings.TrimPrefix(s, "sk-sy-"), "the audit trail holds a secret")
	}
}

// What the gateway tells its operators about requests (the metrics on Caddy's endpoint,
// the request log through the admin API and the CLI) holds no key, no upstream name,
// host or credential and no prompt, for requests served, failed over, retried, failed
// and refused, streamed or not.
func TestMetricsAndTheRequestLogHoldNoSecretUpstreamOrPrompt(t *testing.T) {
	g := requestLogGateway(t)
	_, secret := g.createKey(t, `{"name":"probe"}`)
	const prompt = "zz-prompt-launch-codes-4471"
	const system = "zz-system-prompt-9d2e"
	chat := func(model, key string, stream bool) *result {
		body := `{"model":"` + model + `","stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + prompt + `"}]}`
		return g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+key)
	}
	sent := 0
	for _, model := range []string{"flaky", "again", "down"} {
		for _, stream := range []bool{false, true} {
			chat(model, secret, stream)
			sent++
		}
	}
	require.Equal(t, 200, chat("flaky", limitedKey, false).Status)
	require.Equal(t, 429, chat("flaky", limitedKey, true).Status)
	sent += 2

	var rows []byte
	require.Eventually(t, func() bool {
		page := g.requestLog(t, nil)
		rows = mustJSON(t, page)
		return len(page.Requests) == sent
	}, waitShort, pollEvery, "the request log never held the %d requests", sent)
	_, metrics := g.scrapeMetrics(t)
	out := switchyardCLI(t, g, "requests")
	// The log is not empty of what it should show: the check below is not vacuous.
	require.Contains(t, string(rows), `"probe"`)
	require.Contains(t, metrics, `model="flaky"`)
	for where, text := range map[string]string{"the metrics": metrics, "the request log": string(rows), "`caddy switchyard requests`": out} {
		g.up.assertNoLeakIn(t, where, text, secret, strings.TrimPrefix(secret, "sk-"), prompt, system)
	}
}

// demoPasswordCost4 is bcrypt of the example's demo password, switchyard-demo, at cost 4.
const demoPasswordCost4 = "$2a$04$VDJi/oWK7Wv/UAF7wyX8G.Htvpg/BpHsqhdIzMpYIl.GIG7wr9i1i"

// Caddyfile.example's console, as an operator runs it: without its login, or with a
// wrong one, it answers 401 and does nothing, with the console's header or without;
// with the login but without the header a change is refused with 403; with both it is
// made. Nothing refused made a key.
func TestTheExampleConsoleIsBehindItsLoginAndItsHeader(t *testing.T) {
	src, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	dbPath := filepath.Join(t.TempDir(), "keys.db")
	ports, _ := startCaddy(t, 3, func(ports []int) string {
		cfg := strings.NewReplacer(
			":8080", ":"+strconv.Itoa(ports[0]), ":8081", ":"+strconv.Itoa(ports[1]), ":2019", ":"+strconv.Itoa(ports[2]),
			"\t\tstore sqlite\n", "\t\tstore sqlite "+dbPath+"\n",
		).Replace(string(src))
		require.Contains(t, cfg, dbPath, "the example's store line changed: keep this test's store out of the user's data directory")
		// The demo login's bcrypt hash (cost 14) takes seconds to check under the race
		// detector: the same login with a hash of cost 4, the example's mount unchanged.
		demo := regexp.MustCompile(`admin \$2a\$14\$\S+`)
		require.Regexp(t, demo, cfg, "the example's console login changed")
		return demo.ReplaceAllLiteralString(cfg, "admin "+demoPasswordCost4)
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[2])}
	g.waitReady(t)
	const header = "X-Switchyard-Console"
	login := basicAuth("admin", "switchyard-demo") // the example's demo login (docs/security.md)
	wrong := basicAuth("admin", "not-the-password")
	for _, c := range []struct {
		method, path, body string
		headers            []string
		want               int
	}{
		{"GET", "/console/api/keys", "", nil, 401},
		{"GET", "/console/api/me", "", nil, 401},
		{"GET", "/console/api/keys", "", []string{"Authorization", wrong}, 401},
		{"POST", "/console/api/keys", `{"name":"forged"}`, []string{header, "1", "Authorization", ""}, 401},
		{"POST", "/console/api/keys", `{"name":"forged"}`, []string{header, "1", "Authorization", wrong}, 401},
		{"POST", "/console/api/keys", `{"name":"forged"}`, []string{"Authorization", login}, 403},
		{"POST", "/console/api/projects", `{"id":"forged"}`, []string{"Authorization", login}, 403},
		{"POST", "/console/api/keys", `{"name":"real"}`, []string{header, "1", "Authorization", login}, 201},
	} {
		headers := c.headers
		if headers == nil {
			headers = []string{"Authorization", ""} // no login at all
		}
		r := g.call(t, c.method, c.path, c.body, headers...)
		assert.Equal(t, c.want, r.Status, "%s %s with %d headers: %s", c.method, c.path, len(c.headers)/2, r.Body)
	}
	r := g.call(t, "GET", "/console/api/keys", "", "Authorization", login)
	require.Equal(t, 200, r.Status)
	var names []string
	for _, k := range gjson.GetBytes(r.Body, "keys").Array() {
		names = append(names, k.Get("name").Str)
	}
	assert.Equal(t, []string{"real"}, names, "only the change with the login and the header was made")
	r = g.call(t, "GET", "/console/api/projects", "", "Authorization", login)
	assert.Empty(t, gjson.GetBytes(r.Body, "projects").Array())

	// A browser comes in by the break-glass door once and carries a session after it;
	// the wrong password opens nothing.
	assert.Equal(t, 401, g.call(t, "GET", "/console/auth/break-glass", "", "Authorization", wrong).Status)
	r = callAt(t, g.base, "GET", "/console/auth/break-glass", "", "Authorization", login)
	require.Equal(t, http.StatusFound, r.Status, "%s", r.Body)
	var session string
	for _, c := range (&http.Response{Header: r.Header}).Cookies() {
		if c.Name == "switchyard_session" {
			session = c.Value
			assert.True(t, c.HttpOnly, "the session cookie is out of the page's scripts' reach")
			assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
		}
	}
	require.NotEmpty(t, session, "break-glass gives the browser a session")
	r = g.call(t, "GET", "/console/api/me", "", "Authorization", "", "Cookie", "switchyard_session="+session)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "break_glass", gjson.GetBytes(r.Body, "principal.kind").Str)
}

// A cloud channel's error reaches the client in its family's envelope with the
// candidate's account, ARN, project, service account and region masked, as the plain
// API's host and credential are: Bedrock's and Vertex's own error shapes included,
// streamed or not.
func TestCloudChannelErrorsNameNoAccountProjectOrRegion(t *testing.T) {
	sim := newChannelSim(t)
	failingVertex := strings.Replace(sim.vertex("0"), "endpoint "+sim.up.URL, "endpoint "+sim.up.URL+"/vx+fail-400", 1)
	require.Contains(t, failingVertex, "/vx+fail-400")
	models := "\t\tmodel bad-bedrock {\n" + sim.bedrock(bedrockARN+"+fail-400", "0") + "\t\t}\n" +
		"\t\tmodel bad-vertex {\n" + failingVertex + "\t\t}\n"
	g := startGatewayWith(t, sim.up, models, "")
	for _, model := range []string{"bad-bedrock", "bad-vertex"} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + model + `","max_tokens":16,"stream":` + strconv.FormatBool(stream) +
				`,"messages":[{"role":"user","content":"hi"}]}`
			r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1)
			e := familyB(t, r, 400, "invalid_request_error")
			assert.NotEmpty(t, e.Get("message").Str, "the upstream's own message is passed on")
			all := string(r.Body)
			for name, values := range r.Header {
				all += "\n" + name + ": " + strings.Join(values, ",")
			}
			assertNoChannelLeak(t, sim.up, model+"'s answer", all)
		}
	}
	require.Len(t, seenAll(sim.up), 4, "each request reached its channel")
}
