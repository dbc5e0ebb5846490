package routing

import (
	"errors"
	"fmt"
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

// RetryAfter reads an upstream's request for a pause, preferring the millisecond header
// (a date is read as the time left from now), bounded by limit: every hint, from a live
// answer, a probe or a channel, is read here, so none can pause a candidate for longer
// than its configuration allows. A value past limit, however large (one that would
// overflow a time.Duration too), is read as limit, never as no hint at all. It returns 0
// when neither header is set, parses or is positive.
func RetryAfter(h http.Header, now time.Time, limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	seconds := 0.0
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if v, ok := positiveNumber(ms); ok {
			seconds = v / 1000
		}
	}
	if s := h.Get("Retry-After"); seconds == 0 && s != "" {
		if v, ok := positiveNumber(s); ok {
			seconds = v
		} else if t, err := http.ParseTime(s); err == nil && t.After(now) {
			// Sub saturates at the largest duration rather than overflowing.
			seconds = t.Sub(now).Seconds()
		}
	}
	// NaN fails both comparisons and gives no hint; +Inf and anything past limit is limit.
	switch {
	case !(seconds > 0):
		return 0
	case seconds >= limit.Seconds():
		return limit
	}
	return time.Duration(seconds * float64(time.Second))
}

// positiveNumber reads a positive number; one too large for a float64 reads as +Inf (a
// very long pause, not junk).
func positiveNumber(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return v, v > 0
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
