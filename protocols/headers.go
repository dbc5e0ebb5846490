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
	"Forwarded":           true,
	"X-Forwarded-For":     true,
	"X-Forwarded-Host":    true,
	"X-Forwarded-Proto":   true,
	"X-Real-Ip":           true,
	"Via":                 true,
}

// UpstreamRequestHeader builds the headers of an upstream request: the client's headers
// that describe the request (anthropic-beta, user agent, SDK telemetry, session ids, …),
// the candidate's credential in its family's native header, and for Family B the version.
func UpstreamRequestHeader(client http.Header, family Family, credential string) http.Header {
	out := make(http.Header, len(client)+3)
	for name, values := range client {
		if requestHeadersDropped[name] || strings.HasPrefix(name, "X-Switchyard-") {
			continue
		}
		out[name] = values
	}
	out["Accept-Encoding"] = []string{"identity"}
	if family == FamilyB {
		if v := VersionHeader(client); v != "" {
			out["Anthropic-Version"] = []string{v}
		}
		if credential != "" {
			out["X-Api-Key"] = []string{credential}
		}
	} else if credential != "" {
		out["Authorization"] = []string{"Bearer " + credential}
	}
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
