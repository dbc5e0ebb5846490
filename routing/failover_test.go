package routing

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFailoverStatus(t *testing.T) {
	cases := map[int]bool{
		200: false, 201: false, 204: false, 304: false,
		400: false, // the client's mistake: passed back
		401: true,  // the candidate's credential
		402: false,
		403: true,
		404: true, // the candidate's upstream model is missing
		405: false,
		408: true,
		409: false,
		413: false,
		422: false,
		429: true,
		499: false,
		500: true, 501: true, 502: true, 503: true, 504: true, 529: true,
	}
	for code, want := range cases {
		assert.Equal(t, want, FailoverStatus(code), "%d", code)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	const limit = 5 * time.Minute

	cases := []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"20"}}, 20 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"milliseconds", http.Header{"Retry-After-Ms": {"19500"}}, 19500 * time.Millisecond},
		{"milliseconds preferred", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}}, 250 * time.Millisecond},
		{"junk milliseconds fall back to seconds", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, 3 * time.Second},
		{"zero milliseconds fall back to seconds", http.Header{"Retry-After-Ms": {"0"}, "Retry-After": {"3"}}, 3 * time.Second},
		{"http date", http.Header{"Retry-After": {"Sun, 22 Nov 2026 12:00:30 GMT"}}, 30 * time.Second},
		{"http date in the past", http.Header{"Retry-After": {"Sun, 22 Nov 2026 11:59:00 GMT"}}, 0},
		{"zero", http.Header{"Retry-After": {"0"}}, 0},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"negative milliseconds", http.Header{"Retry-After-Ms": {"-5"}}, 0},
		{"junk", http.Header{"Retry-After": {"in a while"}}, 0},
		{"junk NaN", http.Header{"Retry-After": {"NaN"}}, 0},
		{"empty", http.Header{"Retry-After": {""}}, 0},
		{"tiny underflow", http.Header{"Retry-After": {"1e-400"}}, 0},
		// However long the pause asked for, it is the limit: never ignored, never longer.
		{"just past the limit", http.Header{"Retry-After": {"301"}}, limit},
		{"31 years", http.Header{"Retry-After": {"999999999"}}, limit},
		{"past a duration's range", http.Header{"Retry-After": {"9999999999999"}}, limit},
		{"past a float's range", http.Header{"Retry-After": {"1e400"}}, limit},
		{"infinity", http.Header{"Retry-After": {"Infinity"}}, limit},
		{"infinite milliseconds", http.Header{"Retry-After-Ms": {"+Inf"}}, limit},
		{"huge milliseconds", http.Header{"Retry-After-Ms": {"99999999999999999999"}}, limit},
		{"http date in 2100", http.Header{"Retry-After": {"Fri, 01 Jan 2100 00:00:00 GMT"}}, limit},
		{"http date past a duration's range", http.Header{"Retry-After": {"Mon, 01 Jan 9999 00:00:00 GMT"}}, limit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RetryAfter(tc.h, now, limit))
		})
	}
	assert.Zero(t, RetryAfter(http.Header{"Retry-After": {"20"}}, now, 0), "no room for a pause: none")
}

func TestParsePrice(t *testing.T) {
	ok := []struct {
		in   string
		want int64
	}{
		{"0.15", 150_000},
		{"3", 3_000_000},
		{"12.5", 12_500_000},
		{".5", 500_000},
		{"0.000001", 1},
		{"0", 0},
		{"0.0", 0},
		{"2.", 2_000_000},
		{" 1.25 ", 1_250_000},
		{"75", 75_000_000},
		{"1000000", 1_000_000_000_000},
	}
	for _, tc := range ok {
		got, err := ParsePrice(tc.in)
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}

	bad := []string{"", " ", ".", "0.1234567", "-1", "-0.5", "+1", "1.-5", "1.+5", "abc", "1e3", "0x10", "1,5", "1.5.5", "1_000", "$3", "3 USD", "99999999999999999999"}
	for _, in := range bad {
		_, err := ParsePrice(in)
		if assert.Error(t, err, "%q", in) {
			assert.Contains(t, err.Error(), "price", "%q", in)
		}
	}
}
