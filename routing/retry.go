package routing

import (
	"net/http"
	"time"
)

// Retry says how a request tries one candidate again after a failure that another
// attempt can fix.
type Retry struct {
	// Retries is how many further attempts one request may make on the candidate.
	Retries int
	// Backoff bounds the wait before the first retry; the bound doubles with each further
	// retry, up to MaxBackoff. The wait is drawn at random below the bound (full jitter),
	// so that requests that failed together do not come back together, and it is never
	// shorter than the pause the upstream asked for.
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// Defaults for retries and the request deadline, used where a configuration sets none.
const (
	// DefaultRetries is one retry: it fixes the one-off 500 and the short 429, and more
	// would multiply with the retries clients make themselves (two in OpenAI's and
	// Anthropic's SDKs).
	DefaultRetries = 1
	// DefaultBackoff and DefaultMaxBackoff are the official SDKs' own bounds.
	DefaultBackoff    = 500 * time.Millisecond
	DefaultMaxBackoff = 8 * time.Second
	// DefaultRequestTimeout bounds the time from the whole request body to the first byte
	// of an answer, over every attempt, wait and failover: as long as one candidate's
	// header timeout, since a non-streamed answer's first byte comes only when its
	// generation is done.
	DefaultRequestTimeout = 10 * time.Minute
)

// DefaultRetry is the retry policy of a candidate that sets none.
var DefaultRetry = Retry{Retries: DefaultRetries, Backoff: DefaultBackoff, MaxBackoff: DefaultMaxBackoff}

// Retryable reports whether another attempt on the same candidate can fix a failure: the
// upstream could not be reached or dropped the connection before answering, took too
// long to start its answer, or said it is busy or failing for now (429, 500, 502, 503,
// 504). A wrong credential, a missing model, a broken answer or the client's own mistake
// would only fail again.
func Retryable(reason Reason, status int) bool {
	switch reason {
	case ReasonConnect, ReasonTimeout, ReasonRateLimit:
		return true
	case ReasonStatus:
		switch status {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	return false
}

// Wait is how long to wait before retry n (1 for the first): a draw u in [0, 1) of the
// exponential bound, or the upstream's own hint when that is longer.
func (r Retry) Wait(n int, hint time.Duration, u float64) time.Duration {
	bound := r.Backoff
	for i := 1; i < n && bound < r.MaxBackoff; i++ {
		bound *= 2
	}
	bound = min(bound, r.MaxBackoff)
	return max(time.Duration(u*float64(bound)), hint)
}
