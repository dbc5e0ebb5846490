package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// forwardedRequestHeaders are the client headers the gateway passes to an upstream
// (protocols/headers.go, docs/configuration.md), each with a value an SDK or agent sends.
var forwardedRequestHeaders = map[string]string{
	"Content-Type":                "application/json",
	"Accept":                      "application/json, text/event-stream",
	"Anthropic-Beta":              "tools-2024-04-04",
	"Openai-Beta":                 "assistants=v2",
	"Idempotency-Key":             "idem-5c1e",
	"X-Stainless-Retry-Count":     "0",
	"X-Stainless-Timeout":         "600",
	"X-Stainless-Read-Timeout":    "600",
	"User-Agent":                  "my-tool/1.0",
	"X-Stainless-Lang":            "python",
	"X-Stainless-Package-Version": "1.2.3",
	"X-Stainless-Os":              "Linux",
	"X-Stainless-Arch":            "x64",
	"X-Stainless-Runtime":         "CPython",
	"X-Stainless-Runtime-Version": "3.12.1",
	"X-Stainless-Async":           "false",
	"X-Stainless-Helper-Method":   "stream",
	"X-App":                       "cli",
	"Originator":                  "codex_cli_rs",
	"X-Codex-Beta-Features":       "remote_compaction_v2",
	"X-Claude-Code-Session-Id":    "cc-session-1",
	"Session-Id":                  "codex-session-1",
	"Thread-Id":                   "codex-thread-1",
	"X-Client-Request-Id":         "client-req-1",
}

// holdingKey is the value of a forwarded header that carries key the ways clients put
// one there: the whole value, or inside it (a user agent string, a custom header).
func holdingKey(name, value, key string) string {
	switch name {
	case "Session-Id", "Idempotency-Key", "X-Client-Request-Id":
		return key
	case "User-Agent":
		return value + " (key=" + key + ")"
	}
	return value + ";" + key
}

// assertKeyNowhere fails when key is anywhere in what the upstream received from its
// request number from on: path, query, any header name or value, body.
func assertKeyNowhere(t *testing.T, up *upstream, key string, from int) {
	t.Helper()
	up.mu.Lock()
	defer up.mu.Unlock()
	require.Greater(t, len(up.requests), from, "the upstream received no request: the check would be vacuous")
	for i, r := range up.requests[from:] {
		var all bytes.Buffer
		all.WriteString(r.Path + "?" + r.RawQuery + "\n")
		for name, values := range r.Header {
			all.WriteString(name + ": " + strings.Join(values, ", ") + "\n")
		}
		all.Write(r.Body)
		assert.NotContains(t, all.String(), key, "upstream request %d (%s) holds the client's key", from+i, r.Path)
	}
}

// The client's key never leaves the gateway (docs/security.md): it is not forwarded in
// the header it came in, and a forwarded header that holds it (a user agent string, a
// session or idempotency id) is dropped, whichever header carried the key, for both
// families, streamed or not. The same headers without the key reach the upstream, so
// the drop is the key's doing.
func TestClientKeyNeverReachesTheUpstream(t *testing.T) {
	g := startGateway(t)
	for _, c := range []struct {
		name, path, body string
		extra            []string
	}{
		{"family A", "/v1/chat/completions", chatBody, nil},
		{"family A stream", "/v1/chat/completions", `{"model":"chat-a","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"family B", "/v1/messages", messagesBody, []string{"anthropic-version", v1}},
		{"family B stream", "/v1/messages", `{"model":"msg-b","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, []string{"anthropic-version", v1}},
	} {
		for _, carrier := range []string{"Authorization", "X-Api-Key"} {
			t.Run(c.name+" key in "+carrier, func(t *testing.T) {
				keyHeader := []string{carrier, testKey}
				if carrier == "Authorization" {
					keyHeader[1] = "Bearer " + testKey
				}
				from := g.up.count()
				plain, keyed := append(keyHeader, c.extra...), append(keyHeader, c.extra...)
				for name, value := range forwardedRequestHeaders {
					plain = append(plain, name, value)
					keyed = append(keyed, name, holdingKey(name, value, testKey))
				}

				r := g.call(t, "POST", c.path, c.body, plain...)
				require.Equal(t, 200, r.Status, "%s", r.Body)
				seen := g.up.last(t)
				for name, value := range forwardedRequestHeaders {
					assert.Equal(t, value, seen.Header.Get(name), "without the key, %s is forwarded", name)
				}

				r = g.call(t, "POST", c.path, c.body, keyed...)
				require.Equal(t, 200, r.Status, "%s", r.Body)
				if strings.Contains(c.name, "stream") {
					require.Contains(t, string(r.Body), "data: ", "a streamed answer")
				}
				seen = g.up.last(t)
				for name, value := range forwardedRequestHeaders {
					got := seen.Header.Values(name)
					switch name {
					case "Content-Type":
						// The gateway names the body's type itself when the client's is dropped.
						assert.Equal(t, []string{"application/json"}, got)
					case "User-Agent":
						// Go's HTTP client names itself when no user agent is set.
						assert.Equal(t, []string{"Go-http-client/1.1"}, got, "User-Agent held the key and was forwarded")
					default:
						assert.Empty(t, got, "%s held the key and was forwarded (its plain value was %q)", name, value)
					}
				}
				// The key's own header, where the family's credential goes too, holds the
				// candidate's credential, checked with every other header below.
				assertKeyNowhere(t, g.up, testKey, from)
			})
		}
	}
}

// A key put in the URL path is never forwarded and never logged: the path is no
// operation's, so it is answered 404 (or 401 without a key in a header) by the gateway
// itself, and the access log of Caddyfile.example's keyless_log masks it.
func TestKeyInThePathReachesNeitherUpstreamNorLog(t *testing.T) {
	up := newUpstream(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	snippet, store := exampleLogSnippet(t, logPath), storeOption(t, "")
	ports, _ := startCaddy(t, 1, func(ports []int) string {
		return snippet + "{\n\tadmin off\n\tdefault_bind 127.0.0.1\n\tswitchyard {\n" +
			"\t\tkey test " + testKey + "\n" + store + standardModels(up) + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n\tlog {\n\t\timport keyless_log\n\t}\n" +
			"\tswitchyard_auth\n\tswitchyard_model\n\tswitchyard_proxy\n\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), up: up}
	g.waitReady(t)

	var ids []string
	for _, c := range []struct {
		path, body string
		headers    []string
		status     int
	}{
		{"/v1/" + testKey + "/chat/completions", chatBody, nil, 404},
		{"/v1/" + testKey + "/messages", messagesBody, []string{"anthropic-version", v1}, 404},
		{"/v1/" + testKey + "/chat/completions", chatBody, []string{"Authorization", ""}, 401},
		{"/v1/" + testKey + "/messages", messagesBody, []string{"Authorization", "", "anthropic-version", v1}, 401},
	} {
		before := up.count()
		r := g.call(t, "POST", c.path, c.body, c.headers...)
		require.Equal(t, c.status, r.Status, "%s: %s", c.path, r.Body)
		assert.Equal(t, before, up.count(), "%s reached the upstream", c.path)
		ids = append(ids, r.Header.Get("X-Switchyard-Request-Id"))
	}
	// A request that passes, so the log and the upstream are not empty.
	r := g.call(t, "POST", "/v1/chat/completions", chatBody)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assertKeyNowhere(t, up, testKey, 0)

	var lines []string
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(logPath)
		lines = lines[:0]
		for _, line := range strings.Split(string(b), "\n") {
			for _, id := range ids {
				if id != "" && gjson.Get(line, "switchyard_request_id").Str == id {
					lines = append(lines, line)
				}
			}
		}
		return len(lines) == len(ids)
	}, waitShort, pollEvery, "an access log entry per request with the key in its path")
	for _, line := range lines {
		assert.Contains(t, gjson.Get(line, "request.uri").Str, "/v1/REDACTED/", "the path is logged masked")
		assert.NotContains(t, line, testKey, "the access log holds the key")
		assert.NotContains(t, line, strings.TrimPrefix(testKey, "sk-"), "the access log holds the key")
	}
}
