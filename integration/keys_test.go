package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/auth"
)

// adminCall sends one request to the gateway's admin API and decodes the answer.
func (g *gateway) adminCall(t *testing.T, method, path, body string) (int, gjson.Result) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.admin+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, gjson.ParseBytes(b)
}

func (g *gateway) createKey(t *testing.T, body string) (id, secret string) {
	t.Helper()
	status, answer := g.adminCall(t, "POST", "/switchyard/keys", body)
	require.Equal(t, 201, status, "%s", answer.Raw)
	return answer.Get("key.id").Str, answer.Get("secret").Str
}

func TestKeysFromTheStoreWorkOnBothFamilies(t *testing.T) {
	g := startGateway(t)
	id, secret := g.createKey(t, `{"name":"ci-bot"}`)
	require.True(t, strings.HasPrefix(secret, "sk-sy-"), "a recognisable prefix")
	require.True(t, strings.HasPrefix(id, "key_"))
	listed := func() gjson.Result {
		t.Helper()
		status, list := g.adminCall(t, "GET", "/switchyard/keys", "")
		require.Equal(t, 200, status)
		assert.NotContains(t, list.Raw, secret)
		return list.Get(`keys.#(id=="` + id + `")`)
	}
	assert.False(t, listed().Get("last_used_at").Exists(), "a key never used has no last-used time")

	usedFrom := time.Now()
	r := g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+secret)
	assert.Equal(t, 200, r.Status, "%s", r.Body)
	r = g.call(t, "POST", "/v1/messages", messagesBody, "x-api-key", secret, "anthropic-version", v1)
	assert.Equal(t, 200, r.Status, "one key serves both families")
	usedUntil := time.Now()

	// The list shows the key without its secret, with a display prefix and, once the next
	// batch of last-used times is written (every auth.DefaultTouchInterval), when it was
	// last used, to the second.
	var k gjson.Result
	require.Eventually(t, func() bool {
		resp, err := http.Get(g.admin + "/switchyard/keys")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		k = gjson.GetBytes(b, `keys.#(id=="`+id+`")`)
		return err == nil && resp.StatusCode == 200 && k.Get("last_used_at").Exists()
	}, auth.DefaultTouchInterval+time.Second, 100*time.Millisecond, "no last-used time within a batch interval of the use")
	t.Logf("last-used time listed %v after the key was used", time.Since(usedUntil).Round(time.Millisecond))
	lastUsed, err := time.Parse(time.RFC3339Nano, k.Get("last_used_at").Str)
	require.NoError(t, err)
	assert.WithinRange(t, lastUsed, usedFrom.Truncate(time.Second), usedUntil, "the time of the last use")
	assert.Equal(t, "ci-bot", k.Get("name").Str)
	assert.Equal(t, "active", k.Get("status").Str)
	assert.True(t, strings.HasPrefix(secret, k.Get("prefix").Str) && len(k.Get("prefix").Str) < 16)

	// Revocation is immediate on this gateway.
	status, revoked := g.adminCall(t, "POST", "/switchyard/keys/"+id+"/revoke", "")
	require.Equal(t, 200, status)
	assert.Equal(t, "revoked", revoked.Get("key.status").Str)
	familyA(t, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+secret), 401, "authentication_error")
	familyA(t, g.call(t, "POST", "/v1/messages", messagesBody, "x-api-key", secret, "anthropic-version", v1), 401, "authentication_error")
}

func TestKeyModelAllowlistAndExpiry(t *testing.T) {
	g := startGateway(t)
	_, secret := g.createKey(t, `{"name":"only-chat","models":["chat-a"]}`)
	r := g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+secret)
	ids := gjson.GetBytes(r.Body, "data.#.id").Array()
	require.Len(t, ids, 1)
	assert.Equal(t, "chat-a", ids[0].Str)
	familyB(t, g.call(t, "POST", "/v1/messages", messagesBody, "x-api-key", secret, "anthropic-version", v1), 404, "not_found_error")

	status, answer := g.adminCall(t, "POST", "/switchyard/keys", `{"name":"typo","models":["no-such-model"]}`)
	assert.Equal(t, 400, status)
	assert.Contains(t, answer.Get("error").Str, "no-such-model")
	status, _ = g.adminCall(t, "POST", "/switchyard/keys", `{"name":""}`)
	assert.Equal(t, 400, status)
	status, _ = g.adminCall(t, "POST", "/switchyard/keys", `{"name":"x","expires_at":"2001-01-01T00:00:00Z"}`)
	assert.Equal(t, 400, status, "an expiry in the past is refused")

	created := time.Now()
	_, short := g.createKey(t, `{"name":"short-lived","expires_in":"1s"}`)
	assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+short).Status)
	refusedAfter := untilRefused(t, g, "Bearer "+short, created)
	assert.GreaterOrEqual(t, refusedAfter, time.Second-10*time.Millisecond, "refused before it expired")
	familyA(t, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+short), 401, "authentication_error")
}

// untilRefused calls GET /v1/models with a key until it is refused (401), and returns the
// time from since. Meanwhile it must be accepted.
func untilRefused(t *testing.T, g *gateway, bearer string, since time.Time) time.Duration {
	t.Helper()
	var r *result
	var err error
	require.Eventually(t, func() bool {
		r, err = g.send("GET", "/v1/models", "", "Authorization", bearer)
		return err != nil || r.Status != 200
	}, waitShort, pollEvery, "the key was never refused")
	require.NoError(t, err)
	require.Equal(t, 401, r.Status, "%s", r.Body)
	return time.Since(since)
}

func TestKeyRotation(t *testing.T) {
	g := startGateway(t)
	id, old := g.createKey(t, `{"name":"deploy","models":["chat-a","msg-b"]}`)

	// Without grace, the old key stops at once and the new one works.
	status, rotated := g.adminCall(t, "POST", "/switchyard/keys/"+id+"/rotate", `{}`)
	require.Equal(t, 201, status, "%s", rotated.Raw)
	fresh := rotated.Get("secret").Str
	assert.NotEqual(t, old, fresh)
	assert.Equal(t, "deploy", rotated.Get("key.name").Str)
	assert.Equal(t, `["chat-a","msg-b"]`, rotated.Get("key.models").Raw)
	assert.Equal(t, rotated.Get("key.id").Str, rotated.Get("replaced.replaced_by").Str)
	familyA(t, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+old), 401, "authentication_error")
	assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+fresh).Status)

	// With grace, both work until the grace period ends.
	rotatedAt := time.Now()
	status, graced := g.adminCall(t, "POST", "/switchyard/keys/"+rotated.Get("key.id").Str+"/rotate", `{"grace":"1s"}`)
	require.Equal(t, 201, status)
	newest := graced.Get("secret").Str
	assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+fresh).Status, "the old key works during the grace period")
	assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+newest).Status)
	refusedAfter := untilRefused(t, g, "Bearer "+fresh, rotatedAt)
	assert.GreaterOrEqual(t, refusedAfter, time.Second-10*time.Millisecond, "refused before its grace period ended")
	familyA(t, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+fresh), 401, "authentication_error")
	assert.Equal(t, 200, g.call(t, "GET", "/v1/models", "", "Authorization", "Bearer "+newest).Status)

	status, _ = g.adminCall(t, "POST", "/switchyard/keys/key_doesnotexist/rotate", `{}`)
	assert.Equal(t, 404, status)
}

func TestKeysCLI(t *testing.T) {
	g := startGateway(t)
	caddy := buildCaddyCLI(t)
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := caddy(append([]string{"switchyard", "keys"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("create", "--address", strings.TrimPrefix(g.admin, "http://"), "--name", "from-cli", "--models", "chat-a")
	require.NoError(t, err, out)
	secret := ""
	for _, line := range strings.Split(out, "\n") {
		if _, s, ok := strings.Cut(line, "store it now): "); ok {
			secret = strings.TrimSpace(s)
		}
	}
	require.True(t, strings.HasPrefix(secret, "sk-sy-"), "the secret is printed once: %s", out)
	assert.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+secret).Status)

	out, err = run("list", "--address", g.admin)
	require.NoError(t, err, out)
	assert.Contains(t, out, "from-cli")
	assert.NotContains(t, out, secret, "a list never shows a secret")

	var listed struct {
		Keys []struct{ ID, Name string } `json:"keys"`
	}
	out, err = run("list", "--json", "--address", g.admin)
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Keys, 1)

	out, err = run("revoke", listed.Keys[0].ID, "--address", g.admin)
	require.NoError(t, err, out)
	assert.Contains(t, out, "revoked")
	familyA(t, g.call(t, "POST", "/v1/chat/completions", chatBody, "Authorization", "Bearer "+secret), 401, "authentication_error")

	out, err = run("revoke", "key_nope", "--address", g.admin)
	assert.Error(t, err)
	assert.Contains(t, out, "no key with that id")
	// The calls above were metered: `caddy switchyard usage` sums them.
	usage := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := caddy(append([]string{"switchyard", "usage", "--address", g.admin}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	assert.Eventually(t, func() bool {
		out, err = usage("--group", "model")
		return err == nil && strings.Contains(out, "chat-a")
	}, waitShort, 100*time.Millisecond, "the usage of the calls above was never listed")
	require.NoError(t, err, out)
	assert.Contains(t, out, "MODEL")
	assert.Contains(t, out, "chat-a")
	assert.Contains(t, out, "TOTAL")
	out, err = usage("--group", "candidate,channel")
	require.NoError(t, err, out)
	assert.Contains(t, out, "CANDIDATE")
	assert.Contains(t, out, "CHANNEL")
	assert.Contains(t, out, "main")
	assert.Contains(t, out, "api")
	out, err = usage("--from", "not-a-date")
	assert.Error(t, err)
	assert.Contains(t, out, "YYYY-MM-DD")
}

// buildCaddyCLI builds a Caddy with the switchyard modules (the same main xcaddy
// generates) and returns a way to run it.
func buildCaddyCLI(t *testing.T) func(args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	main := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(main, []byte(`package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/switchyard-gw/switchyard/caddymodule"
)

func main() { caddycmd.Main() }
`), 0o644))
	bin := filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-o", bin, main)
	build.Dir = ".."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return func(args ...string) *exec.Cmd { return exec.Command(bin, args...) }
}
