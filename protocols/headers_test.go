package protocols_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/switchyard-gw/switchyard/protocols"
)

// header builds an http.Header the way net/http hands it to the gateway: canonical names.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// A Family B coding agent's request, as seen by the gateway.
func agentHeaders() http.Header {
	return header(
		"Authorization", "Bearer sk-gw-client-0123456789abcdef",
		"X-Api-Key", "sk-gw-client-0123456789abcdef",
		"Api-Key", "sk-gw-client-0123456789abcdef",
		"Anthropic-Version", "2023-06-01",
		"Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14",
		"Anthropic-Dangerous-Direct-Browser-Access", "true",
		"User-Agent", "claude-cli/2.1.197 (external, cli)",
		"X-App", "cli",
		"X-Stainless-Lang", "js",
		"X-Stainless-Package-Version", "0.60.0",
		"X-Stainless-Retry-Count", "0",
		"X-Stainless-Timeout", "600",
		"X-Claude-Code-Session-Id", "6c1f8a0e-3b7d-4c55-9a3e-0d2f1b7e4a11",
		"Session-Id", "019a5f3c-0000-7000-8000-000000000001",
		"Accept", "application/json",
		"Accept-Encoding", "gzip, deflate, br, zstd",
		"Content-Type", "application/json",
		"Content-Length", "5123",
		"Connection", "keep-alive",
		"Keep-Alive", "timeout=5",
		"Te", "trailers",
		"Transfer-Encoding", "chunked",
		"Upgrade", "h2c",
		"Proxy-Authorization", "Basic dXNlcjpwYXNz",
		"Proxy-Connection", "keep-alive",
		"Cookie", "session=abc",
		"Openai-Organization", "org-client123456",
		"Openai-Project", "proj_client12345",
		"Host", "gateway.example",
		"X-Forwarded-For", "203.0.113.7",
		"X-Real-Ip", "203.0.113.7",
		"Forwarded", "for=203.0.113.7",
		"Via", "1.1 caddy",
		"X-Switchyard-Candidate", "internal",
	)
}

func TestUpstreamRequestHeaderFamilyB(t *testing.T) {
	got := protocols.UpstreamRequestHeader(agentHeaders(), nil, protocols.FamilyB, "sk-ant-upstream-credential")
	want := header(
		"X-Api-Key", "sk-ant-upstream-credential",
		"Anthropic-Version", "2023-06-01",
		"Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14",
		"User-Agent", "claude-cli/2.1.197 (external, cli)",
		"X-App", "cli",
		"X-Stainless-Lang", "js",
		"X-Stainless-Package-Version", "0.60.0",
		"X-Stainless-Retry-Count", "0",
		"X-Stainless-Timeout", "600",
		"X-Claude-Code-Session-Id", "6c1f8a0e-3b7d-4c55-9a3e-0d2f1b7e4a11",
		"Session-Id", "019a5f3c-0000-7000-8000-000000000001",
		"Accept", "application/json",
		"Accept-Encoding", "identity",
		"Content-Type", "application/json",
	)
	assert.Equal(t, want, got)
}

func TestUpstreamRequestHeaderFamilyA(t *testing.T) {
	client := header(
		"Authorization", "Bearer sk-gw-client-0123456789abcdef",
		"User-Agent", "codex_exec/0.169.0 (Debian 12.0.0; x86_64)",
		"Originator", "codex_exec",
		"Session-Id", "019a5f3c",
		"Thread-Id", "019a5f3c",
		"X-Client-Request-Id", "019a5f3c",
		"X-Codex-Beta-Features", "remote_compaction_v2",
		"Openai-Beta", "responses=v1",
		"Openai-Organization", "org-client123456",
		"Openai-Project", "proj_client12345",
		"Anthropic-Version", "2023-06-01",
		"Accept", "text/event-stream",
		"Accept-Encoding", "gzip",
		"Content-Type", "application/json",
	)
	got := protocols.UpstreamRequestHeader(client, nil, protocols.FamilyA, "sk-proj-upstream")
	want := header(
		"Authorization", "Bearer sk-proj-upstream",
		"User-Agent", "codex_exec/0.169.0 (Debian 12.0.0; x86_64)",
		"Originator", "codex_exec",
		"Session-Id", "019a5f3c",
		"Thread-Id", "019a5f3c",
		"X-Client-Request-Id", "019a5f3c",
		"X-Codex-Beta-Features", "remote_compaction_v2",
		"Openai-Beta", "responses=v1",
		"Accept", "text/event-stream",
		"Accept-Encoding", "identity",
		"Content-Type", "application/json",
	)
	assert.Equal(t, want, got)
}

func TestUpstreamRequestHeaderVersionAndCredential(t *testing.T) {
	t.Run("specification's version header is sent under the native name", func(t *testing.T) {
		got := protocols.UpstreamRequestHeader(header("Family-B-Version", "2026-10-21", "X-Api-Key", "sk-gw-x"), nil, protocols.FamilyB, "up")
		assert.Equal(t, []string{"2026-10-21"}, got["Anthropic-Version"])
		assert.Empty(t, got.Values("Family-B-Version"))
		assert.Equal(t, []string{"up"}, got["X-Api-Key"])
	})
	t.Run("native version wins over the specification's", func(t *testing.T) {
		got := protocols.UpstreamRequestHeader(header("Family-B-Version", "2026-10-21", "Anthropic-Version", "2023-06-01"), nil, protocols.FamilyB, "up")
		assert.Equal(t, []string{"2023-06-01"}, got["Anthropic-Version"])
	})
	t.Run("bearer from a family B client becomes x-api-key", func(t *testing.T) {
		got := protocols.UpstreamRequestHeader(header("Authorization", "Bearer sk-gw-x", "Anthropic-Version", "2026-10-21"), nil, protocols.FamilyB, "up")
		assert.Empty(t, got.Values("Authorization"))
		assert.Equal(t, []string{"up"}, got["X-Api-Key"])
	})
	t.Run("x-api-key from a family A client becomes bearer", func(t *testing.T) {
		got := protocols.UpstreamRequestHeader(header("X-Api-Key", "sk-gw-x"), nil, protocols.FamilyA, "up")
		assert.Empty(t, got.Values("X-Api-Key"))
		assert.Equal(t, []string{"Bearer up"}, got["Authorization"])
	})
	t.Run("keyless upstream gets no credential header at all", func(t *testing.T) {
		for _, f := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
			got := protocols.UpstreamRequestHeader(header("Authorization", "Bearer sk-gw-x", "X-Api-Key", "sk-gw-x"), nil, f, "")
			assert.Empty(t, got.Values("Authorization"), f)
			assert.Empty(t, got.Values("X-Api-Key"), f)
		}
	})
	t.Run("client header map is not modified", func(t *testing.T) {
		client := agentHeaders()
		before := client.Clone()
		protocols.UpstreamRequestHeader(client, nil, protocols.FamilyB, "up")
		assert.Equal(t, before, client)
	})
}

func TestCopyResponseHeader(t *testing.T) {
	upstream := header(
		// Kept: what SDKs and clients need.
		"Content-Type", "text/event-stream; charset=utf-8",
		"Cache-Control", "no-cache",
		"Retry-After", "20",
		"Retry-After-Ms", "19500",
		"X-Should-Retry", "true",
		"X-Request-Id", "req_8f2e0c",
		"Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy",
		// Dropped: the upstream account, network and framing.
		"Openai-Organization", "org-upstream123456",
		"Openai-Project", "proj_upstream1234",
		"Openai-Processing-Ms", "412",
		"Openai-Version", "2020-10-01",
		"Anthropic-Organization-Id", "0b1e4d7a-1111-2222-3333-444455556666",
		"X-Ratelimit-Limit-Requests", "10000",
		"X-Ratelimit-Remaining-Tokens", "29000",
		"X-Ratelimit-Reset-Requests", "6ms",
		"Anthropic-Ratelimit-Requests-Limit", "4000",
		"Anthropic-Ratelimit-Input-Tokens-Remaining", "399000",
		"Anthropic-Ratelimit-Tokens-Reset", "2026-11-22T00:00:01Z",
		"Set-Cookie", "__cf_bm=abc; path=/; domain=.upstream-a.example",
		"Set-Cookie", "_cfuvid=def; path=/",
		"Server", "cloudflare",
		"Cf-Ray", "8f2e0c1a2b3c4d5e-FRA",
		"Strict-Transport-Security", "max-age=31536000",
		"Alt-Svc", `h3=":443"`,
		"Via", "1.1 upstream",
		"Connection", "keep-alive",
		"Content-Length", "1234",
		"Transfer-Encoding", "chunked",
	)
	dst := header("X-Switchyard-Request-Id", "gw-1")
	protocols.CopyResponseHeader(dst, upstream)
	want := header(
		"X-Switchyard-Request-Id", "gw-1",
		"Content-Type", "text/event-stream; charset=utf-8",
		"Cache-Control", "no-cache",
		"Retry-After", "20",
		"Retry-After-Ms", "19500",
		"X-Should-Retry", "true",
		"X-Request-Id", "req_8f2e0c",
		"Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy",
	)
	assert.Equal(t, want, dst)
}

// Headers that say who the client is, how it reached the gateway, or what the gateway
// itself consumes never reach a provider, whatever their name: only listed headers leave.
func TestUpstreamRequestHeaderForwardsNothingUnlisted(t *testing.T) {
	dropped := []string{
		// The list: network identity a denylist missed.
		"X-Envoy-External-Address", "X-Azure-ClientIP", "Client-IP", "X-Originating-IP", "Referer", "Origin",
		// More of the same kind.
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "Forwarded",
		"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Cluster-Client-IP",
		"X-Client-IP", "X-Original-Forwarded-For", "X-Azure-SocketIP", "X-Envoy-Peer-Metadata", "Via",
		"Cf-Ipcountry", "X-Amzn-Trace-Id", "Traceparent", "Tracestate", "X-Request-Id", "X-Correlation-Id",
		// Keys, accounts, cookies, framing.
		"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Proxy-Authorization", "Cookie",
		"Openai-Organization", "Openai-Project", "Content-Length", "Content-Encoding", "Transfer-Encoding",
		"Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection", "Expect", "Host", "Connection",
		// What the gateway consumes or sets itself, and client telemetry nobody upstream needs.
		"X-Switchyard-Candidate", "X-Conversation-Id", "Family-B-Version",
		"Anthropic-Dangerous-Direct-Browser-Access", "X-Codex-Turn-Metadata", "X-Codex-Window-Id",
		"Accept-Language", "Sec-Fetch-Mode", "Dnt",
		// A header nobody thought of.
		"X-Whatever",
	}
	client := http.Header{}
	for _, name := range dropped {
		client.Set(name, "203.0.113.9")
	}
	client.Set("Anthropic-Beta", "tools-2024-04-04")
	for _, family := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		out := protocols.UpstreamRequestHeader(client, nil, family, "cand-cred")
		for _, name := range dropped {
			for _, v := range out.Values(name) {
				assert.NotEqual(t, "203.0.113.9", v, "%s reached a %s upstream", name, family)
			}
		}
		assert.Equal(t, "tools-2024-04-04", out.Get("Anthropic-Beta"), "a listed header sent alongside still passes")
	}
}

// Every header a provider or SDK feature relies on reaches the upstream as sent: the
// headers real clients send (reference/clients.md) and the ones their features need.
func TestUpstreamRequestHeaderForwardsWhatProvidersUse(t *testing.T) {
	forwarded := map[string]string{
		"Content-Type":                "application/json",
		"Accept":                      "text/event-stream",
		"Anthropic-Beta":              "claude-code-20250219,context-1m-2025-08-07",
		"Openai-Beta":                 "responses_websockets=2026-02-06",
		"Idempotency-Key":             "stainless-node-retry-6c1f8a0e",
		"User-Agent":                  "OpenAI/JS 7.57.0",
		"X-Stainless-Retry-Count":     "1",
		"X-Stainless-Timeout":         "600",
		"X-Stainless-Read-Timeout":    "600",
		"X-Stainless-Lang":            "js",
		"X-Stainless-Package-Version": "7.57.0",
		"X-Stainless-Os":              "Linux",
		"X-Stainless-Arch":            "x64",
		"X-Stainless-Runtime":         "node",
		"X-Stainless-Runtime-Version": "v20.20.2",
		"X-Stainless-Async":           "false",
		"X-Stainless-Helper-Method":   "stream",
		"X-App":                       "cli",
		"Originator":                  "codex_exec",
		"X-Codex-Beta-Features":       "remote_compaction_v2",
		"X-Claude-Code-Session-Id":    "6c1f8a0e-3b7d-4c55-9a3e-0d2f1b7e4a11",
		"Session-Id":                  "019a5f3c-0000-7000-8000-000000000001",
		"Thread-Id":                   "019a5f3c-0000-7000-8000-000000000001",
		"X-Client-Request-Id":         "019a5f3c-0000-7000-8000-000000000001",
	}
	client := header("Authorization", "Bearer sk-sy-client-0123456789abcdef")
	for name, v := range forwarded {
		client.Set(name, v)
	}
	for _, family := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		out := protocols.UpstreamRequestHeader(client, nil, family, "cand-cred")
		for name, v := range forwarded {
			assert.Equal(t, []string{v}, out[name], "%s to a %s upstream", name, family)
		}
	}
}

func TestUpstreamRequestHeaderDropsHopByHop(t *testing.T) {
	client := http.Header{}
	client.Set("Connection", "keep-alive, X-Stainless-Timeout")
	client.Add("Connection", "session-id")
	client.Set("X-Stainless-Timeout", "600")
	client.Set("Session-Id", "s1")
	client.Set("Anthropic-Beta", "tools-2024-04-04")
	out := protocols.UpstreamRequestHeader(client, nil, protocols.FamilyB, "cred")
	assert.Empty(t, out.Values("X-Stainless-Timeout"), "a listed header the Connection header names ends at the gateway")
	assert.Empty(t, out.Values("Session-Id"), "named in a second Connection header, lower case")
	assert.Equal(t, "tools-2024-04-04", out.Get("Anthropic-Beta"))
}

// A client that repeats its key in a forwarded header (a user agent string, a custom
// header of ANTHROPIC_CUSTOM_HEADERS) does not send it to the provider that way. The key
// headers themselves are gone by then (auth.TakeKeyHeaders): the key is passed in.
func TestUpstreamRequestHeaderDropsAForwardedHeaderHoldingTheKey(t *testing.T) {
	const key = "sk-sy-client-0123456789abcdef"
	client := header(
		"User-Agent", "my-tool/1.0 key="+key,
		"Session-Id", key,
		"Idempotency-Key", key,
		"Anthropic-Beta", "tools-2024-04-04")
	for _, family := range []protocols.Family{protocols.FamilyA, protocols.FamilyB} {
		out := protocols.UpstreamRequestHeader(client, []string{"sk-other-secret-0123456789", key}, family, "cand-cred")
		for name, values := range out {
			for _, v := range values {
				assert.NotContains(t, v, key, "the key reached a %s upstream in %s", family, name)
			}
		}
		assert.Equal(t, "tools-2024-04-04", out.Get("Anthropic-Beta"), "headers without the key still pass")
		out = protocols.UpstreamRequestHeader(client, nil, family, "cand-cred")
		assert.Equal(t, key, out.Get("Session-Id"), "without the key told, nothing is dropped")
	}
}

// A header map not built by net/http may spell names in any case: the list still decides.
func TestUpstreamRequestHeaderNonCanonicalNames(t *testing.T) {
	client := http.Header{
		"anthropic-beta":        {"a"},
		"Anthropic-Beta":        {"b"},
		"x-forwarded-for":       {"203.0.113.9"},
		"x-envoy-original-path": {"/secret"},
	}
	out := protocols.UpstreamRequestHeader(client, nil, protocols.FamilyB, "cand-cred")
	assert.ElementsMatch(t, []string{"a", "b"}, out["Anthropic-Beta"])
	assert.NotContains(t, out, "x-forwarded-for")
	assert.NotContains(t, out, "X-Forwarded-For")
	assert.NotContains(t, out, "x-envoy-original-path")
	assert.Equal(t, []string{"a"}, client["anthropic-beta"], "the client's map is not changed")
	assert.Equal(t, []string{"b"}, client["Anthropic-Beta"])
}

func TestRequestEncodingOK(t *testing.T) {
	for value, ok := range map[string]bool{"": true, "identity": true, "Identity": true, "gzip": false, "identity, br": false, "deflate": false} {
		h := http.Header{}
		if value != "" {
			h.Set("Content-Encoding", value)
		}
		assert.Equal(t, ok, protocols.RequestEncodingOK(h), value)
	}
}
