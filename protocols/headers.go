package protocols

import (
	"net/http"
	"strings"
)

// requestHeadersDropped are client headers that never reach an upstream: the gateway key
// (in every header a client might put it), the client's own account selectors, hop-by-hop
// and framing headers the transport sets itself, and headers that would expose the client
// or the gateway's network.
var requestHeadersDropped = map[string]bool{
	"Authorization":       true,
	"X-Api-Key":           true,
	"Api-Key":             true,
	"X-Goog-Api-Key":      true,
	"Proxy-Authorization": true,
	"Cookie":              true,
	"Openai-Organization": true,
	"Openai-Project":      true,
	"Family-B-Version":    true,
	"Anthropic-Version":   true, // re-set below from either version header
	"Accept-Encoding":     true, // re-set: the gateway must read the body to rewrite model
	"Host":                true,
	"Content-Length":      true,
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
	"Expect":              true,
	"Content-Encoding":    true, // only identity bodies are accepted; see RequestEncodingOK
	// Who the client is and how it reached the gateway is not the provider's business.
	"Forwarded":                true,
	"X-Forwarded-For":          true,
	"X-Forwarded-Host":         true,
	"X-Forwarded-Proto":        true,
	"X-Forwarded-Port":         true,
	"X-Forwarded-Server":       true,
	"X-Real-Ip":                true,
	"X-Client-Ip":              true,
	"X-Cluster-Client-Ip":      true,
	"True-Client-Ip":           true,
	"Cf-Connecting-Ip":         true,
	"Fastly-Client-Ip":         true,
	"X-Original-Forwarded-For": true,
	"Via":                      true,
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
// that describe the request (anthropic-beta, user agent, SDK telemetry, session ids, …),
// the candidate's credential in its family's native header, and for Family B the version.
func UpstreamRequestHeader(client http.Header, family Family, credential string) http.Header {
	out := make(http.Header, len(client)+3)
	hop := connectionNamed(client)
	for name, values := range client {
		if requestHeadersDropped[name] || hop[name] || strings.HasPrefix(name, "X-Switchyard-") {
			continue
		}
		out[name] = values
	}
	out["Accept-Encoding"] = []string{"identity"}
	rulesOf(family).upstreamAuth(out, client, credential)
	return out
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
