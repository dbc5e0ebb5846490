package protocols

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"time"
)

// The errors the gateway answers itself, named, so that every handler and the relay say
// the same thing the same way. Each is in the native envelope of the family given.

// ErrInvalidKey is the 401 for a missing, wrong or revoked key. Authentication comes
// before protocol handling, so it uses the generic Family A envelope on every path.
func ErrInvalidKey() *APIError {
	return &APIError{Family: FamilyA, Status: http.StatusUnauthorized, Code: "invalid_api_key",
		Message: "missing or invalid API key; send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"}
}

// ErrKeyInQuery refuses a request that carries a key in its URL.
func ErrKeyInQuery(f Family) *APIError {
	return Errorf(f, http.StatusBadRequest, "",
		"API keys go in the 'Authorization: Bearer <key>' or 'x-api-key' header, never in the URL; remove the key from the query string")
}

// ErrUnknownPath is the 404 for a path that names no operation.
func ErrUnknownPath(f Family, method, path string) *APIError {
	return Errorf(f, http.StatusNotFound, "unknown_url", "unknown path %s %s", method, path)
}

// ErrMethodNotAllowed is the 405 for a known path with another method.
func ErrMethodNotAllowed(op Operation, method, path string) *APIError {
	return Errorf(op.Family, http.StatusMethodNotAllowed, "", "%s is not allowed on %s; use %s", method, path, op.AllowedMethods())
}

// ErrNotServed is the 501 for a Responses operation out of the gateway's scope; retrying
// cannot change it, so SDKs are told not to.
func ErrNotServed(op Operation) *APIError {
	message := "this operation needs server-side response state, which this gateway does not keep"
	if op.Kind == KindResponsesWebSocket {
		message = "the WebSocket transport is not served; use HTTP POST /v1/responses"
	}
	e := Errorf(FamilyA, http.StatusNotImplemented, "unsupported_operation", "%s", message)
	e.NoRetry = true
	return e
}

// ErrCompressedBody is the 415 for a body with a Content-Encoding (see RequestEncodingOK).
func ErrCompressedBody(f Family) *APIError {
	return Errorf(f, http.StatusUnsupportedMediaType, "", "compressed request bodies are not accepted; send the body without Content-Encoding")
}

// ErrBodyTooLarge is the 413 for a body over the gateway's limit.
func ErrBodyTooLarge(f Family, limit int64) *APIError {
	return Errorf(f, http.StatusRequestEntityTooLarge, "", "the request body exceeds the gateway's limit of %d bytes", limit)
}

// ErrBodyUnreadable is the 400 for a body that broke off.
func ErrBodyUnreadable(f Family) *APIError {
	return Errorf(f, http.StatusBadRequest, "", "the request body could not be read")
}

// ErrBodyTimeout is the 408 for a body that did not arrive within the gateway's time
// limits (an idle gap, or too slow on average). SDKs retry a 408 on their own.
func ErrBodyTimeout(f Family) *APIError {
	return Errorf(f, http.StatusRequestTimeout, "request_timeout",
		"the request body did not arrive in time: the gateway stops waiting when a body pauses too long or arrives too slowly")
}

// ErrBodyRead is the client's answer for a body whose read failed with err: 408 when a
// read deadline ended it, else 400.
func ErrBodyRead(f Family, err error) *APIError {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ErrBodyTimeout(f)
	}
	return ErrBodyUnreadable(f)
}

// ErrModelNotFound is the 404 for a model that does not exist or that the key may not
// call: the two are not told apart, so a key learns nothing of other keys' models.
func ErrModelNotFound(f Family, model string) *APIError {
	e := Errorf(f, http.StatusNotFound, "model_not_found",
		"the model '%s' does not exist or you do not have access to it; GET /v1/models lists the models you can call (ids are case-sensitive)", model)
	e.Param = "model"
	return e
}

// ErrModelNotListed is the 404 of GET /v1/models/{id} for such a model.
func ErrModelNotListed(model string) *APIError {
	return Errorf(FamilyA, http.StatusNotFound, "model_not_found", "the model '%s' does not exist or you do not have access to it", model)
}

// ErrProtocolNotOffered is the 503 for a model that lacks the request's family. It is
// answered from configuration and will not change by retrying, so SDKs are told not to.
func ErrProtocolNotOffered(f Family, model string) *APIError {
	e := Errorf(f, http.StatusServiceUnavailable, CodeNoChannel,
		"%s: model '%s' is not offered on the %s protocol; GET /v1/models lists the protocols of each model", CodeNoChannel, model, f.Token())
	e.NoRetry = true
	return e
}

// ErrNoChannel is the 503 when no candidate could serve; retryAfter is when the soonest
// leaves its cooldown, in whole seconds (at least one).
func ErrNoChannel(f Family, model string, retryAfter int) *APIError {
	e := Errorf(f, http.StatusServiceUnavailable, CodeNoChannel,
		"%s: model '%s' has no candidate available to serve this request right now; retry later", CodeNoChannel, model)
	e.RetryAfter = max(1, retryAfter)
	return e
}

// CodeShuttingDown is the code of ErrShuttingDown.
const CodeShuttingDown = "gateway_shutting_down"

// ErrShuttingDown is the 503 for a request whose answer had not begun when the gateway's
// grace period for requests in flight ran out: another gateway can take it at once.
func ErrShuttingDown(f Family, model string) *APIError {
	e := Errorf(f, http.StatusServiceUnavailable, CodeShuttingDown,
		"%s: the gateway stopped before model '%s' answered; retry the request", CodeShuttingDown, model)
	e.RetryAfter = 1
	return e
}

// CodeDeadline is the code of ErrDeadline.
const CodeDeadline = "request_deadline_exceeded"

// ErrDeadline is the 504 for a request whose deadline (the model's request_timeout, from
// its whole body on) ran out before any candidate's answer began: the candidates may be
// fine, the request was not given the time to fail over or wait for one. timeout is the
// deadline, zero when it is not known.
func ErrDeadline(f Family, model string, timeout time.Duration) *APIError {
	limit := ""
	if timeout > 0 {
		limit = " (" + timeout.String() + ")"
	}
	return Errorf(f, http.StatusGatewayTimeout, CodeDeadline,
		"the request's time ran out: model '%s' gave no answer within its request deadline%s; "+
			"a slow or silent candidate used it up before another could be tried", model, limit)
}

// CodeUpstreamTimeout is the code of ErrUpstreamTimeout.
const CodeUpstreamTimeout = "upstream_timeout"

// ErrUpstreamTimeout is the 504 for a request whose upstream had the whole request and
// did not answer within the gateway's limit, named as the configuration names it
// (header_timeout, first_byte_timeout, first_token_timeout, idle_timeout,
// request_timeout). The upstream may still be doing the work, which is billed, so the
// gateway did not send it again, and SDKs are told not to either: a retry would start
// the work once more, and likely time out the same way.
func ErrUpstreamTimeout(f Family, model, limit string, d time.Duration) *APIError {
	e := Errorf(f, http.StatusGatewayTimeout, CodeUpstreamTimeout,
		"model '%s': the upstream had the whole request but did not answer within the gateway's %s (%s); it may still be working on it, so the request was not sent again",
		model, limit, d)
	e.NoRetry = true
	return e
}

// ErrSubOperationNotOffered is the 404 when no candidate of the model offers a
// sub-operation (token counts, compaction).
func ErrSubOperationNotOffered(op Operation, model string) *APIError {
	e := Errorf(op.Family, http.StatusNotFound, "unsupported_operation", "model '%s' does not offer %s", model, op.Kind)
	e.NoRetry = true
	return e
}

// Why a stream that already reached the client ended early.
const (
	StreamInterrupted = "the upstream stream was interrupted before it completed"
	StreamStalled     = "the upstream stream stalled and was ended by the gateway"
	StreamOversized   = "the upstream sent an event larger than the gateway's limit"
	StreamMalformed   = "the upstream sent a malformed event (not one JSON object), which the gateway does not pass on; the stream was ended there"
	StreamShutdown    = "the gateway is shutting down and its grace period for answers in flight ran out; what was sent is billed, retry the rest elsewhere"
)

// ErrStreamEnded is the error carried by the native error event that ends such a stream.
func ErrStreamEnded(f Family, why string) *APIError {
	return Errorf(f, http.StatusBadGateway, "", "%s", why)
}

// ErrMisconfigured is the 500 for handlers set up in the wrong order.
func ErrMisconfigured(f Family, message string) *APIError {
	return Errorf(f, http.StatusInternalServerError, "", "gateway misconfigured: %s", message)
}

// ErrGeneric renders a status the gateway met without phrasing it (a Caddy error): the
// status text, never the internal error.
func ErrGeneric(f Family, status int) *APIError {
	message := "the request could not be handled"
	switch t := http.StatusText(status); {
	case status >= 500:
		message = "the gateway could not complete the request"
	case t != "":
		message = strings.ToLower(t)
	}
	return Errorf(f, status, "", "%s", message)
}

// CodeBodyMemoryFull is the code of ErrBodyMemory.
const CodeBodyMemoryFull = "gateway_busy"

// ErrBodyMemory is the 503 for a body the gateway has no memory for right now: too many
// bodies are being received at once. It passes soon, so clients are told to retry.
func ErrBodyMemory(f Family) *APIError {
	e := Errorf(f, http.StatusServiceUnavailable, CodeBodyMemoryFull,
		"the gateway is receiving as many request bodies as it can hold; retry shortly")
	e.RetryAfter = 1
	return e
}

// CodeKeyBodyMemory is the code of ErrKeyBodyMemory.
const CodeKeyBodyMemory = "key_body_memory_exceeded"

// ErrKeyBodyMemory is the 429 for a body whose key's bodies already hold the key's share
// of the gateway's request-body memory (share bytes): the key's own uploads in progress
// fill it, and other keys are still served. It passes once some of them end.
func ErrKeyBodyMemory(f Family, share int64) *APIError {
	e := Errorf(f, http.StatusTooManyRequests, CodeKeyBodyMemory,
		"this API key's request bodies still being received already hold its share of the gateway's request-body memory (%d bytes); retry once some of its uploads have finished", share)
	e.RetryAfter = 1
	return e
}
