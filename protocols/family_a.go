package protocols

import (
	"encoding/json"
	"net/http"
)

// familyA holds what chat completions and responses share: OpenAI's error envelope
// {"error":{"message","type","param","code"}} and Bearer authentication.
type familyA struct{}

func (familyA) errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type familyAEnvelope struct {
	Error familyAError `json:"error"`
}

type familyAError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (familyA) errorBody(e *APIError, _ string) []byte {
	out, _ := json.Marshal(familyAEnvelope{Error: familyAError{
		Message: e.Message, Type: e.nativeType(), Param: optional(e.Param), Code: optional(e.Code),
	}})
	return out
}

func (familyA) upstreamAuth(out, _ http.Header, credential string) {
	if credential != "" {
		out["Authorization"] = []string{"Bearer " + credential}
	}
}
