package protocols

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// CodeNoChannel is the error code for "no executable candidate for this model on this
// protocol", named by the specification.
const CodeNoChannel = "routing_no_available_channel"

// APIError is an error the gateway answers itself, in the native envelope of Family.
// Handlers return it (wrapped in Caddy's handler error) and the error writer renders it.
type APIError struct {
	Family  Family
	Status  int
	Type    string // native error type; derived from Status when empty
	Code    string // optional machine-readable code
	Param   string // Family A: the offending request field, when there is one
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header (whole seconds).
	RetryAfter int
	// NoRetry tells SDKs (through x-should-retry: false) that repeating the request
	// cannot help, so a misconfigured client fails at once instead of backing off.
	NoRetry bool
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.nativeType(), e.Message)
}

// Errorf builds an APIError with a formatted message.
func Errorf(family Family, status int, code, format string, args ...any) *APIError {
	return &APIError{Family: family, Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// InvalidParam is the 400 for a request field that is missing or malformed.
func InvalidParam(family Family, param, format string, args ...any) *APIError {
	return &APIError{Family: family, Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

func (e *APIError) nativeType() string {
	if e.Type != "" {
		return e.Type
	}
	if e.Family == FamilyB {
		return familyBType(e.Status)
	}
	return familyAType(e.Status)
}

func familyAType(status int) string {
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

func familyBType(status int) string {
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

type familyAEnvelope struct {
	Error familyAError `json:"error"`
}

type familyAError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
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

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Body renders the error in its family's native JSON envelope. requestID is included
// where the native shape has a place for it (Family B).
func (e *APIError) Body(requestID string) []byte {
	var out []byte
	if e.Family == FamilyB {
		out, _ = json.Marshal(familyBEnvelope{
			Type:      "error",
			Error:     familyBError{Type: e.nativeType(), Message: e.Message, Code: e.Code},
			RequestID: requestID,
		})
	} else {
		out, _ = json.Marshal(familyAEnvelope{Error: familyAError{
			Message: e.Message, Type: e.nativeType(), Param: optional(e.Param), Code: optional(e.Code),
		}})
	}
	return out
}

// Write sends the error as a complete response.
func (e *APIError) Write(w http.ResponseWriter, requestID string) {
	body := e.Body(requestID)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.NoRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// StreamErrorEvent is the native in-band error event that ends a stream which already
// started: Family B `event: error`, Responses `event: error` with the next sequence
// number, Chat a data frame carrying an `error` object.
func StreamErrorEvent(kind Kind, e *APIError, nextSequence int64) []byte {
	switch kind {
	case KindMessages:
		return fmt.Appendf(nil, "event: error\ndata: %s\n\n", e.Body(""))
	case KindResponses:
		ev, _ := json.Marshal(struct {
			Type     string  `json:"type"`
			Code     string  `json:"code"`
			Message  string  `json:"message"`
			Param    *string `json:"param"`
			Sequence int64   `json:"sequence_number"`
		}{"error", e.nativeType(), e.Message, nil, nextSequence})
		return fmt.Appendf(nil, "event: error\ndata: %s\n\n", ev)
	}
	return fmt.Appendf(nil, "data: %s\n\n", e.Body(""))
}
