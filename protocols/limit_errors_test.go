package protocols

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

func TestLimitErrorsInEachFamilysEnvelope(t *testing.T) {
	for _, c := range []struct {
		name                    string
		err                     *APIError
		typePath, codePath      string
		wantType, wantCode      string
		retryAfter, retryAfterM string
		shouldRetry             string
	}{
		{"rate A", ErrRateLimited(FamilyA, "rpm", 1500*time.Millisecond), "error.type", "error.code", "rate_limit_error", "rate_limit_exceeded", "2", "1500", ""},
		{"rate B", ErrRateLimited(FamilyB, "rpm", 10*time.Millisecond), "error.type", "error.code", "rate_limit_error", "rate_limit_exceeded", "1", "10", ""},
		{"budget A, resets in 20 min", ErrBudgetExceeded(FamilyA, "budget", 20*time.Minute+time.Millisecond), "error.type", "error.code", "insufficient_quota", "budget_exceeded", "1201", "", "false"},
		{"budget B, resets in 3 days", ErrBudgetExceeded(FamilyB, "budget", 72*time.Hour), "error.type", "error.code", "rate_limit_error", "budget_exceeded", "", "", "false"},
		{"budget B, never resets", ErrBudgetExceeded(FamilyB, "budget", 0), "error.type", "error.code", "rate_limit_error", "budget_exceeded", "", "", "false"},
		{"unavailable A", ErrLimitsUnavailable(FamilyA), "error.type", "error.code", "service_unavailable", "limits_unavailable", "1", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c.err.Write(rec, "sy_1")
			body := rec.Body.String()
			assert.Equal(t, c.wantType, gjson.Get(body, c.typePath).String(), body)
			assert.Equal(t, c.wantCode, gjson.Get(body, c.codePath).String(), body)
			assert.Equal(t, c.retryAfter, rec.Header().Get("Retry-After"))
			assert.Equal(t, c.retryAfterM, rec.Header().Get("Retry-After-Ms"))
			assert.Equal(t, c.shouldRetry, rec.Header().Get("X-Should-Retry"))
			if c.err.Family == FamilyB {
				assert.Equal(t, "error", gjson.Get(body, "type").String())
			}
		})
	}
	assert.Equal(t, http.StatusTooManyRequests, ErrBudgetExceeded(FamilyA, "x", 0).Status)
}

func TestRateLimitHeadersInEachFamilysNames(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	h := http.Header{}
	SetRateLimitHeaders(FamilyA, h, LimitRequests, 60, 59, time.Second, now)
	SetRateLimitHeaders(FamilyA, h, LimitTokens, 100000, -5, 6*time.Minute, now)
	assert.Equal(t, "60", h.Get("x-ratelimit-limit-requests"))
	assert.Equal(t, "59", h.Get("x-ratelimit-remaining-requests"))
	assert.Equal(t, "1s", h.Get("x-ratelimit-reset-requests"))
	assert.Equal(t, "0", h.Get("x-ratelimit-remaining-tokens"), "an overdrawn allowance shows as none left")
	assert.Equal(t, "6m0s", h.Get("x-ratelimit-reset-tokens"))

	h = http.Header{}
	SetRateLimitHeaders(FamilyB, h, LimitTokens, 80000, 79000, 1500*time.Millisecond, now)
	assert.Equal(t, "80000", h.Get("anthropic-ratelimit-tokens-limit"))
	assert.Equal(t, "79000", h.Get("anthropic-ratelimit-tokens-remaining"))
	reset, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-tokens-reset"))
	require.NoError(t, err)
	assert.Equal(t, now.Add(time.Second), reset)
	assert.Empty(t, h.Get("x-ratelimit-limit-tokens"))
}
