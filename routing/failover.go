package routing

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Reason names why an attempt on a candidate did not complete a request.
type Reason string

const (
	ReasonNone       Reason = ""
	ReasonConnect    Reason = "connect"      // dial or TLS failure: nothing reached the upstream
	ReasonTimeout    Reason = "timeout"      // no response headers (or first event) in time
	ReasonStatus     Reason = "status"       // a failover status (5xx, 429, 408, 401, 403, 404)
	ReasonRateLimit  Reason = "rate_limit"   // 429 in particular
	ReasonInBand     Reason = "inband_error" // a stream whose first event is an error
	ReasonBrokenBody Reason = "broken_body"  // the body ended or failed before it was complete
	ReasonClientGone Reason = "client_gone"  // the client left during the attempt: not the candidate's fault
	// ReasonClientBody is a request body that failed its checks, or stopped coming, while
	// it was being forwarded: the request ends with the client's error, and the
	// candidate's health does not move.
	ReasonClientBody Reason = "client_body"
	// ReasonBadResponse is an answer that is not what was asked for: a 1xx or 3xx, a 2xx
	// that is neither JSON nor the stream asked for, JSON that does not parse, or a body
	// or event over the gateway's limits. Its bytes never reach the client.
	ReasonBadResponse Reason = "bad_response"
	// ReasonNotOffered is a sub-operation the candidate does not serve (404 or 405): the
	// request moves on, and the candidate's health does not move.
	ReasonNotOffered Reason = "not_offered"
	// ReasonDeadline is an attempt the request's own deadline ended before the
	// candidate's limits did: the candidate was not given its full time, so its health
	// does not move.
	ReasonDeadline Reason = "deadline"
)

// FailoverStatus reports whether an upstream status is the candidate's fault, so that the
// request moves to the next candidate. A 400 (and other 4xx) is the client's and is
// passed back.
func FailoverStatus(code int) bool {
	switch {
	case code >= 500:
		return true
	case code == http.StatusTooManyRequests, code == http.StatusRequestTimeout,
		code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusNotFound:
		return true
	}
	return false
}

// RetryAfterSeconds reads an upstream's retry hint, preferring the millisecond header; a
// date is read as the time left from now. It returns 0 when neither is set or parsable.
func RetryAfterSeconds(h http.Header, now time.Time) float64 {
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if v, err := strconv.ParseFloat(ms, 64); err == nil && v > 0 && !math.IsInf(v, 1) {
			return v / 1000
		}
	}
	if s := h.Get("Retry-After"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 && !math.IsInf(v, 1) {
			return v
		}
		if t, err := http.ParseTime(s); err == nil {
			if d := t.Sub(now).Seconds(); d > 0 {
				return d
			}
		}
	}
	return 0
}

// ParsePrice turns a decimal price per million tokens ("0.15", "3", "12.5") into
// micro-units without going through floating point.
func ParsePrice(s string) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" && frac == "" {
		return 0, fmt.Errorf("price %q: not a number", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("price %q: at most 6 decimal places", s)
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseUint(whole, 10, 40)
	if err != nil {
		return 0, fmt.Errorf("price %q: not a non-negative decimal number", s)
	}
	var f uint64
	if frac != "" {
		f, err = strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("price %q: not a non-negative decimal number", s)
		}
	}
	return int64(w*1_000_000 + f), nil
}
