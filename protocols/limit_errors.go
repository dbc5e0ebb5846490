package protocols

import (
	"net/http"
	"strconv"
	"time"
)

// The answers to a request over one of the gateway's own limits: given before any
// upstream is called, in the family's native envelope, with the headers clients' retry
// logic reads.

// Codes of the gateway's limit errors.
const (
	CodeRateLimited       = "rate_limit_exceeded"
	CodeBudgetExceeded    = "budget_exceeded"
	CodeLimitsUnavailable = "limits_unavailable"
)

// ErrRateLimited is the 429 for a request over a rate or concurrency limit. wait is the
// real time until it would fit; Retry-After carries it in whole seconds (rounded up) and
// Retry-After-Ms exactly, which the SDKs prefer.
func ErrRateLimited(f Family, message string, wait time.Duration) *APIError {
	e := Errorf(f, http.StatusTooManyRequests, CodeRateLimited, "%s", message)
	e.Type = "rate_limit_error"
	ms := max(1, (wait+time.Millisecond-1)/time.Millisecond)
	e.RetryAfterMillis = int64(ms)
	e.RetryAfter = int((ms + 999) / 1000)
	return e
}

// maxBudgetRetryWait is the longest wait a budget refusal tells clients to sit out: a
// client told to retry in days would hold a request open or back off pointlessly.
const maxBudgetRetryWait = time.Hour

// ErrBudgetExceeded is the 429 for a request that does not fit a spend budget. Clients
// are told not to retry (x-should-retry: false); Retry-After is sent only when the
// budget's period resets within the hour (untilReset zero: it never resets).
func ErrBudgetExceeded(f Family, message string, untilReset time.Duration) *APIError {
	e := Errorf(f, http.StatusTooManyRequests, CodeBudgetExceeded, "%s", message)
	e.Type = "rate_limit_error"
	if f == FamilyA {
		e.Type = "insufficient_quota"
	}
	e.NoRetry = true
	if untilReset > 0 && untilReset <= maxBudgetRetryWait {
		e.RetryAfter = int((untilReset + time.Second - 1) / time.Second)
	}
	return e
}

// ErrLimitsUnavailable is the 503 for a request whose spend limit cannot be checked (the
// shared counters are unreachable and the operator chose to refuse rather than overspend).
func ErrLimitsUnavailable(f Family) *APIError {
	e := Errorf(f, http.StatusServiceUnavailable, CodeLimitsUnavailable,
		"the gateway cannot check this key's spend limit right now; retry shortly")
	e.RetryAfter = 1
	return e
}

// LimitKind names the two per-minute allowances the rate-limit headers describe.
type LimitKind string

// The allowances.
const (
	LimitRequests LimitKind = "requests"
	LimitTokens   LimitKind = "tokens"
)

// SetRateLimitHeaders writes the gateway's own per-minute allowance in the headers the
// family's clients read: x-ratelimit-{limit,remaining,reset}-{kind} (the reset a
// duration such as "1s" or "6m0s") for Family A, anthropic-ratelimit-{kind}-{limit,
// remaining,reset} (the reset an RFC 3339 time) for Family B. reset is how long until the
// allowance is whole again.
func SetRateLimitHeaders(f Family, h http.Header, kind LimitKind, limit, remaining int64, reset time.Duration, now time.Time) {
	remaining = max(0, remaining)
	if f == FamilyB {
		prefix := "Anthropic-Ratelimit-" + capitalized(kind) + "-"
		h[prefix+"Limit"] = []string{strconv.FormatInt(limit, 10)}
		h[prefix+"Remaining"] = []string{strconv.FormatInt(remaining, 10)}
		h[prefix+"Reset"] = []string{now.Add(reset).UTC().Truncate(time.Second).Format(time.RFC3339)}
		return
	}
	suffix := capitalized(kind)
	h["X-Ratelimit-Limit-"+suffix] = []string{strconv.FormatInt(limit, 10)}
	h["X-Ratelimit-Remaining-"+suffix] = []string{strconv.FormatInt(remaining, 10)}
	h["X-Ratelimit-Reset-"+suffix] = []string{max(0, reset).Round(time.Millisecond).String()}
}

func capitalized(k LimitKind) string {
	if k == LimitTokens {
		return "Tokens"
	}
	return "Requests"
}
