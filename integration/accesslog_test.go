package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// exampleLogSnippet is the `(keyless_log)` snippet of Caddyfile.example, the log
// configuration docs/operations.md gives, with its output sent to the file at path.
func exampleLogSnippet(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	src := string(b)
	start := strings.Index(src, "(keyless_log) {\n")
	require.GreaterOrEqual(t, start, 0, "Caddyfile.example has no (keyless_log) snippet")
	end := strings.Index(src[start:], "\n}\n")
	require.Greater(t, end, 0)
	snippet := src[start : start+end+3]
	require.Contains(t, snippet, "output stderr")
	return strings.Replace(snippet, "output stderr", "output file "+path, 1)
}

// The access log names the service model, the serving candidate, the attempts and the
// failover reasons, and nothing that identifies an upstream or a key. The log
// configuration is the one Caddyfile.example gives.
func TestAccessLogFields(t *testing.T) {
	up := newUpstream(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	snippet, store := exampleLogSnippet(t, logPath), storeOption(t, "")
	ports, _ := startCaddy(t, 1, func(ports []int) string {
		return snippet + "{\n\tadmin off\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n" +
			"\t\tkey test " + testKey + "\n" + store + standardModels(up) +
			"\t\tmodel retried {\n" + candidate("once", "family_a", "http://"+up.hostport()+"/v1", upstreamPrefix+"-r+fail-500+first-1") + "\t\t}\n" +
			"\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n\tlog {\n\t\timport keyless_log\n\t}\n" +
			"\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), up: up}
	g.waitReady(t)

	entryFor := func(id string) gjson.Result {
		var entry gjson.Result
		require.Eventually(t, func() bool {
			b, _ := os.ReadFile(logPath)
			for _, line := range strings.Split(string(b), "\n") {
				if e := gjson.Parse(line); e.Get("switchyard_request_id").Str == id {
					entry = e
					return true
				}
			}
			return false
		}, waitShort, pollEvery, "no access log entry for request %s", id)
		return entry
	}

	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"failover-a","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.Status)
	entry := entryFor(r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, "failover-a", entry.Get("switchyard_model").Str)
	assert.Equal(t, "good", entry.Get("switchyard_candidate").Str)
	assert.Equal(t, int64(5), entry.Get("switchyard_attempts").Int())
	assert.Equal(t, `["refused:connect","broken:status","limited:rate_limit","inband:status"]`, entry.Get("switchyard_failovers").Raw)
	assert.Equal(t, "static:test", entry.Get("switchyard_key_id").Str)
	assert.False(t, entry.Get("switchyard_retries").Exists(), "no retry, no retry fields")

	// A one-off 500 on a model's only candidate is retried, and the line says so.
	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"retried","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, 200, r.Status)
	entry = entryFor(r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, int64(2), entry.Get("switchyard_attempts").Int())
	assert.Equal(t, int64(1), entry.Get("switchyard_retries").Int())
	assert.True(t, entry.Get("switchyard_retry_wait_ms").Exists())
	assert.LessOrEqual(t, entry.Get("switchyard_retry_wait_ms").Int(), int64(500), "within the first back-off's bound")
	assert.Equal(t, `["once:status"]`, entry.Get("switchyard_failovers").Raw)

	// A Family B client sends its key in x-api-key, a header Caddy's log does not redact.
	r = g.call(t, "POST", "/v1/messages", messagesBody, "anthropic-version", v1, "x-api-key", testKey)
	require.Equal(t, 200, r.Status)
	entry = entryFor(r.Header.Get("X-Switchyard-Request-Id"))
	assert.False(t, entry.Get("request.headers.X-Api-Key").Exists(), "x-api-key is deleted from the entry")
	assert.Equal(t, "application/json", entry.Get("request.headers.Content-Type.0").Str, "other headers stay")
	b, err := os.ReadFile(logPath)
	require.NoError(t, err)
	up.assertNoLeakIn(t, "the access log", string(b))
}

// Caddyfile.example as it is (only its ports changed), run by the built binary: no key
// reaches any line the process writes, whatever header it came in or wherever in the URL
// (a key's parameter name, any other name, a path segment, percent-encoded), for the
// gateway's site, for a host name the example serves no site for (answered 404, not an
// empty 200), and for the admin endpoint.
func TestExampleConfigKeepsKeysOutOfEveryLogLine(t *testing.T) {
	caddy := buildCaddyCLI(t)
	dir := t.TempDir()
	src, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)

	var out *lockedBuffer
	ports := onFreePorts(t, 3, func(ports []int) error {
		gwPort, simPort, adminPort := ports[0], ports[1], ports[2]
		cfg := strings.NewReplacer(
			":8080", ":"+strconv.Itoa(gwPort), ":8081", ":"+strconv.Itoa(simPort), ":2019", ":"+strconv.Itoa(adminPort),
		).Replace(string(src))
		require.NotContains(t, cfg, ":8080")
		cfgPath := filepath.Join(dir, "Caddyfile")
		require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o600))

		out = &lockedBuffer{}
		cmd := caddy("run", "--config", cfgPath, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
		up := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(gwPort)}
		var exited bool
		require.Eventually(t, func() bool {
			select {
			case <-done:
				exited = true
				return true
			default:
				return up.answers()
			}
		}, waitLong, pollEvery, "the gateway did not start:\n%s", out)
		if exited {
			return fmt.Errorf("the gateway exited at start:\n%s", out)
		}
		return nil
	})

	gw := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	admin := "http://127.0.0.1:" + strconv.Itoa(ports[2])
	const demoKey = "sk-sy-demo-0000000000000000" // the example's static key: valid
	// Keys that must not appear anywhere: one per header and per query parameter.
	secrets := map[string]string{}
	for i, where := range []string{"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key",
		"?api_key", "?api-key", "?apikey", "?key", "?access_token", "?token"} {
		secrets[where] = "sk-sy-logprobe-" + strconv.Itoa(i) + "-7f3a9c0d1e2b"
	}
	for i, where := range []string{"?foo", "a path segment", "an encoded query value"} {
		secrets[where] = "sk-sy-urlprobe-" + strconv.Itoa(i) + "-5e1c8a2f4b6d"
	}
	secrets["?Key without sk-"] = "plain-static-secret-9d3f7a1c" // a static key need not start with sk-
	// The encoded probe as a client library might escape it: s, k and - as %73 %6B %2D.
	encoded := "%73%6B%2D" + strings.TrimPrefix(secrets["an encoded query value"], "sk-")
	query := "?api_key=" + secrets["?api_key"] + "&api-key=" + secrets["?api-key"] + "&apikey=" + secrets["?apikey"] +
		"&key=" + secrets["?key"] + "&access_token=" + secrets["?access_token"] + "&token=" + secrets["?token"] + "&page=2"

	send := func(base, host, method, path, body string, headers map[string]string) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}

	every := map[string]string{
		"Authorization":  "Bearer " + secrets["Authorization"],
		"X-Api-Key":      secrets["X-Api-Key"],
		"Api-Key":        secrets["Api-Key"],
		"X-Goog-Api-Key": secrets["X-Goog-Api-Key"],
	}
	// A host name the example serves no site for.
	assert.Equal(t, 404, send(gw, "unknown.example", "GET", "/v1/models"+query, "", every))
	assert.Equal(t, 404, send(gw, "localhost", "POST", "/v1/messages", messagesBody, every))
	// The gateway's own site, with keys it refuses and with the example's valid key.
	assert.NotEqual(t, 200, send(gw, "", "GET", "/v1/models"+query, "", every))
	assert.Equal(t, 200, send(gw, "", "POST", "/v1/messages",
		`{"model":"sim-claude","max_tokens":64,"messages":[{"role":"user","content":"Hello"}]}`,
		map[string]string{"X-Api-Key": demoKey, "Anthropic-Version": "2023-06-01", "Content-Type": "application/json"}))
	assert.Equal(t, 200, send(gw, "", "GET", "/v1/models", "", map[string]string{"Authorization": "Bearer " + demoKey}))
	// Keys elsewhere in the URL: refused (400) or not found (404), and logged masked.
	demo := map[string]string{"Authorization": "Bearer " + demoKey}
	assert.Equal(t, 400, send(gw, "", "GET", "/v1/models?page=2&foo="+secrets["?foo"], "", demo))
	assert.Equal(t, 400, send(gw, "", "GET", "/v1/models?x="+encoded, "", demo))
	assert.Equal(t, 400, send(gw, "", "GET", "/v1/models?Key="+secrets["?Key without sk-"], "", demo))
	assert.Equal(t, 404, send(gw, "", "GET", "/v1/"+secrets["a path segment"]+"/models", "", demo))
	// A name that merely holds "sk-" is not a key, and stays readable.
	send(gw, "", "GET", "/v1/models/desk-model-2026", "", demo)
	// The admin endpoint logs every request it receives, with its headers and URI.
	send(admin, "", "GET", "/switchyard/keys"+query, "", every)
	send(admin, "", "GET", "/switchyard/"+secrets["a path segment"]+"?foo="+secrets["?foo"]+"&x="+encoded, "", every)

	// Every request above is in the log, its URI masked where a key was, so the check
	// below is not vacuous.
	var unknown gjson.Result
	masked := []string{"/v1/models?page=2&foo=REDACTED", "/v1/models?x=REDACTED", "/v1/models?Key=REDACTED",
		"/v1/REDACTED/models", "/v1/models/desk-model-2026", "/switchyard/REDACTED?foo=REDACTED&x=REDACTED"}
	var missing []string
	require.Eventually(t, func() bool {
		var site, adminSeen bool
		uris := map[string]bool{}
		for _, line := range strings.Split(out.String(), "\n") {
			e := gjson.Parse(line)
			uris[e.Get("request.uri").Str], uris[e.Get("uri").Str] = true, true
			switch {
			case e.Get("request.host").Str == "unknown.example":
				unknown = e
			case e.Get("switchyard_model").Str == "sim-claude" && e.Get("status").Int() == 200:
				site = true
			case e.Get("logger").Str == "admin.api" && strings.HasPrefix(e.Get("uri").Str, "/switchyard/keys"):
				adminSeen = true
			}
		}
		missing = missing[:0]
		for _, uri := range masked {
			if !uris[uri] {
				missing = append(missing, uri)
			}
		}
		return len(missing) == 0 && unknown.Exists() && site && adminSeen
	}, waitShort, pollEvery, "the log lacks an expected entry (URIs missing: %q):\n%s", &missing, out)
	assert.Equal(t, int64(404), unknown.Get("status").Int(), "the unknown host's entry: %s", unknown.Raw)
	assert.Contains(t, unknown.Get("request.uri").Str, "page=2", "other query parameters are kept")

	secrets["the example's key"] = demoKey
	secrets["the upstream credential"] = "sim-upstream-secret"
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, line := range lines {
		for where, secret := range secrets {
			// Without its sk- too: a key whose prefix was escaped must not slip past the mask.
			if strings.Contains(line, secret) || strings.Contains(line, strings.TrimPrefix(secret, "sk-")) {
				t.Errorf("the key sent in %s is in a %q log line: %s", where, gjson.Get(line, "logger").Str, line)
			}
		}
	}
	t.Logf("%d log lines checked for %d keys", len(lines), len(secrets))
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
