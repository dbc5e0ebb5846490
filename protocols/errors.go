package protocols

import (
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
	// RetryAfterMillis, when positive, is also sent as Retry-After-Ms, which the SDKs
	// read before Retry-After.
	RetryAfterMillis int64
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
	return rulesOf(e.Family).errorType(e.Status)
}

// Body renders the error in its family's native JSON envelope. requestID is included
// where the native shape has a place for it (Family B).
func (e *APIError) Body(requestID string) []byte {
	return rulesOf(e.Family).errorBody(e, requestID)
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
	if e.RetryAfterMillis > 0 {
		h.Set("Retry-After-Ms", strconv.FormatInt(e.RetryAfterMillis, 10))
	}
	if e.NoRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}
