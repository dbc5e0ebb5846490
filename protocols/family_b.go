package protocols

import (
	"encoding/json"
	"net/http"
)

// familyB holds what the messages operations share: Anthropic's error envelope
// {"type":"error","error":{"type","message"},"request_id"}, x-api-key authentication
// and the anthropic-version header.
type familyB struct{}

func (familyB) errorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

type familyBEnvelope struct {
	Type      string       `json:"type"`
	Error     familyBError `json:"error"`
	RequestID string       `json:"request_id,omitempty"`
}

type familyBError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

func (familyB) errorBody(e *APIError, requestID string) []byte {
	out, _ := json.Marshal(familyBEnvelope{
		Type:      "error",
		Error:     familyBError{Type: e.nativeType(), Message: e.Message, Code: e.Code},
		RequestID: requestID,
	})
	return out
}

func (familyB) upstreamAuth(out, client http.Header, credential string) {
	if v := VersionHeader(client); v != "" {
		out["Anthropic-Version"] = []string{v}
	}
	if credential != "" {
		out["X-Api-Key"] = []string{credential}
	}
}

// VersionHeader returns the Family B version a client sent, from the native header or the
// specification's name for it.
func VersionHeader(h http.Header) string {
	if v := h.Get("Anthropic-Version"); v != "" {
		return v
	}
	return h.Get("Family-B-Version")
}
