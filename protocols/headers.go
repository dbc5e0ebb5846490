package protocols

import (
	"net/http"
	"slices"
	"strings"
)

// requestHeadersForwarded are the only client headers an upstream receives, each for
// what it does there. Every other header stays at the gateway: the key in whatever header
// a client put it, account selectors (OpenAI-Organization, OpenAI-Project), cookies,
// hop-by-hop and framing headers, and whatever tells the provider who the client is or
// how it reached the gateway (X-Forwarded-For, X-Envoy-External-Address, Client-IP,
// Referer, Origin, traceparent, X-Request-Id of a proxy in front, …). A list of what may
// leave cannot forward a header nobody thought of. The gateway sets Accept-Encoding and,
// for Family B, Anthropic-Version itself (see UpstreamRequestHeader).
var requestHeadersForwarded = map[string]bool{
	"Content-Type": true, // how the upstream parses the body
	"Accept":       true, // JSON or an event stream: what the client can read

	// Protocol features: the upstream answers differently with them.
	"Anthropic-Beta": true, // Family B beta features; Claude Code depends on its list
	"Openai-Beta":    true, // Family A beta features (assistants=v2, responses_websockets=…)

	// Retries and deadlines: what an upstream may do with a repeated or abandoned request.
	"Idempotency-Key":          true, // a retry answered from the first attempt is not done (or billed) twice
	"X-Stainless-Retry-Count":  true, // which attempt this is: a retry is told from a new request
	"X-Stainless-Timeout":      true, // how long the client waits (JS and Go SDKs, Claude Code)
	"X-Stainless-Read-Timeout": true, // the same, as the Python SDKs name it

	// The client software, as every SDK tells the provider when called directly: providers
	// serve known clients' behaviour by it. It names a program and platform, not a person
	// or a network.
	"User-Agent":                  true,
	"X-Stainless-Lang":            true,
	"X-Stainless-Package-Version": true,
	"X-Stainless-Os":              true,
	"X-Stainless-Arch":            true,
	"X-Stainless-Runtime":         true,
	"X-Stainless-Runtime-Version": true,
	"X-Stainless-Async":           true, // Python SDKs: sync or async client
	"X-Stainless-Helper-Method":   true, // which SDK helper made the call (messages.stream)
	"X-App":                       true, // Claude Code's surface (cli, sdk-cli)
	"Originator":                  true, // Codex's client name (codex_exec, codex_cli_rs)
	"X-Codex-Beta-Features":       true, // Codex's Responses features (remote_compaction_v2)

	// Sessions: an upstream keeps a conversation's turns on the same prompt cache by them.
	"X-Claude-Code-Session-Id": true, // Claude Code
	"Session-Id":               true, // Codex
	"Thread-Id":                true, // Codex
	"X-Client-Request-Id":      true, // OpenAI records it with the request: the client's own trace id

	// Deliberately absent: Anthropic-Dangerous-Direct-Browser-Access (only a browser's
	// cross-origin call needs it, and Origin never leaves), X-Codex-Turn-Metadata and
	// X-Codex-Window-Id (Codex telemetry carrying its installation id), X-Request-Id (set
	// by proxies in front of the gateway, which has its own id).
}

// connectionNamed returns the headers the client's Connection header lists: hop-by-hop
// by definition (RFC 9110 section 7.6.1), so they end at the gateway.
func connectionNamed(client http.Header) map[string]bool {
	values := client["Connection"]
	if len(values) == 0 {
		return nil
	}
	named := map[string]bool{}
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				named[http.CanonicalHeaderKey(name)] = true
			}
		}
	}
	return named
}

// RequestEncodingOK reports whether the request body is sent as is. The gateway reads
// and rewrites the body, so a compressed one would be forwarded with a model it never
// saw; it is refused (415) rather than decoded.
func RequestEncodingOK(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for token := range strings.SplitSeq(v, ",") {
			if t := strings.TrimSpace(token); t != "" && !strings.EqualFold(t, "identity") {
				return false
			}
		}
	}
	return true
}

// UpstreamRequestHeader builds the headers of an upstream request: the client's headers
// on the forwarded list (content type, anthropic-beta, SDK and session headers, …), the
// candidate's credential in its family's native header, and for Family B the version.
// A forwarded header is still dropped when the client's Connection header names it
// (hop-by-hop by definition) or when its value holds one of clientKeys: the secrets the
// client sent in its key headers, which switchyard_auth took off the request before
// anything was forwarded (auth.TakeKeyHeaders), so they are passed in, not looked for.
func UpstreamRequestHeader(client http.Header, clientKeys []string, family Family, credential string) http.Header {
	out := make(http.Header, min(len(client), len(requestHeadersForwarded))+3)
	hop := connectionNamed(client)
	for name, values := range client {
		name = http.CanonicalHeaderKey(name)
		if !requestHeadersForwarded[name] || hop[name] || anyHolds(values, clientKeys) {
			continue
		}
		if prior, ok := out[name]; ok {
			// Two spellings of one name in a map not built by net/http: keep both values
			// without writing into the client's slices.
			values = append(slices.Clip(prior), values...)
		}
		out[name] = values
	}
	out["Accept-Encoding"] = []string{"identity"}
	rulesOf(family).upstreamAuth(out, client, credential)
	return out
}

// anyHolds reports whether one of values contains one of keys.
func anyHolds(values, keys []string) bool {
	for _, k := range keys {
		for _, v := range values {
			if strings.Contains(v, k) {
				return true
			}
		}
	}
	return false
}

// responseHeadersKept are the upstream response headers a client may see. Everything
// else (organisation and project ids, rate-limit headers of the upstream account,
// cookies, server and CDN identification) is dropped: a list of what is allowed cannot
// leak a header nobody thought of.
var responseHeadersKept = map[string]bool{
	"Content-Type":   true,
	"Cache-Control":  true,
	"Retry-After":    true,
	"Retry-After-Ms": true,
	"X-Should-Retry": true,
	"X-Request-Id":   true,
	"Request-Id":     true,
}

// CopyResponseHeader copies the upstream headers a client may see into dst.
func CopyResponseHeader(dst, upstream http.Header) {
	for name, values := range upstream {
		if responseHeadersKept[name] {
			dst[name] = values
		}
	}
}
