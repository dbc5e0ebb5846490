package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// probeUpstream is a candidate of the family on a test server; base is the path its URL
// ends in.
func probeUpstream(t *testing.T, family protocols.Family, base string, timeouts routing.Timeouts, handler http.HandlerFunc) *Upstream {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + base)
	require.NoError(t, err)
	up := NewUpstream("svc", &routing.Candidate{Name: "c", Protocol: family, BaseURL: u,
		UpstreamModel: hiddenModel, Credential: hiddenCred, Timeouts: timeouts}, Options{})
	t.Cleanup(up.Close)
	return up
}

// The probe lists models in the family's own way, with the candidate's credential in the
// family's header and no other header a client could have sent.
func TestProbeRequestPerFamily(t *testing.T) {
	for _, tc := range []struct {
		family protocols.Family
		base   string
		path   string
		want   http.Header
	}{
		{protocols.FamilyA, "/v1", "/v1/models", http.Header{"Authorization": {"Bearer " + hiddenCred}}},
		{protocols.FamilyA, "/openai/v1/", "/openai/v1/models", http.Header{"Authorization": {"Bearer " + hiddenCred}}},
		{protocols.FamilyB, "", "/v1/models", http.Header{"X-Api-Key": {hiddenCred}, "Anthropic-Version": {"2023-06-01"}}},
		{protocols.FamilyB, "/proxy", "/proxy/v1/models", http.Header{"X-Api-Key": {hiddenCred}, "Anthropic-Version": {"2023-06-01"}}},
	} {
		seen := make(chan *http.Request, 1)
		up := probeUpstream(t, tc.family, tc.base, routing.Timeouts{}, func(w http.ResponseWriter, r *http.Request) {
			seen <- r
			_, _ = w.Write([]byte(`{"data":[]}`))
		})
		out := up.Probe(context.Background())
		assert.Equal(t, routing.ProbePass, out.Result)
		r := <-seen
		assert.Equal(t, http.MethodGet, r.Method, tc.path)
		assert.Equal(t, tc.path, r.URL.Path)
		assert.Empty(t, r.URL.RawQuery)
		assert.Zero(t, r.ContentLength, "no body")
		want := tc.want.Clone()
		want.Set("Accept", "application/json")
		want.Set("Accept-Encoding", "identity")
		want.Set("User-Agent", "Go-http-client/1.1")
		assert.Equal(t, want, r.Header, "%s: the family's credential header and nothing else", tc.path)
	}
}

func TestProbeClassification(t *testing.T) {
	for _, tc := range []struct {
		status     int
		header     map[string]string
		want       routing.ProbeResult
		retryAfter time.Duration
	}{
		{200, nil, routing.ProbePass, 0},
		{204, nil, routing.ProbePass, 0},
		{404, nil, routing.ProbeNotOffered, 0},
		{405, nil, routing.ProbeNotOffered, 0},
		{500, nil, routing.ProbeFail, 0},
		{502, nil, routing.ProbeFail, 0},
		{401, nil, routing.ProbeFail, 0},
		{403, nil, routing.ProbeFail, 0},
		{302, map[string]string{"Location": "/elsewhere"}, routing.ProbeFail, 0},
		{429, nil, routing.ProbeFail, 0},
		{429, map[string]string{"Retry-After": "7"}, routing.ProbeFail, 7 * time.Second},
		{503, map[string]string{"Retry-After-Ms": "1500"}, routing.ProbeFail, 1500 * time.Millisecond},
		{503, map[string]string{"Retry-After": "99999999999"}, routing.ProbeFail, routing.DefaultHealthPolicy.MaxCooldown}, // at most max_cooldown
		{500, map[string]string{"Retry-After": "7"}, routing.ProbeFail, 0},                                                 // only a 429 or 503 asks for a pause
	} {
		up := probeUpstream(t, protocols.FamilyA, "/v1", routing.Timeouts{}, func(w http.ResponseWriter, r *http.Request) {
			for k, v := range tc.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(tc.status)
		})
		out := up.Probe(context.Background())
		assert.Equal(t, tc.want, out.Result, "%d %v", tc.status, tc.header)
		assert.Equal(t, tc.retryAfter, out.RetryAfter, "%d %v", tc.status, tc.header)
	}

	// Nobody listening: the connection is refused.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	u, err := url.Parse(closed.URL + "/v1")
	require.NoError(t, err)
	gone := NewUpstream("svc", &routing.Candidate{Name: "c", Protocol: protocols.FamilyA, BaseURL: u}, Options{})
	assert.Equal(t, routing.ProbeFail, gone.Probe(context.Background()).Result)
}

// A probe is bounded in time and in what it reads: an upstream that never ends its
// answer does not hold it past its limit, nor a large body past 64 KiB.
func TestProbeIsBounded(t *testing.T) {
	assert.Equal(t, 10*time.Second, (&Upstream{Candidate: &routing.Candidate{}}).probeTimeout(), "default dial 5s + 5s")
	assert.Equal(t, 6*time.Second, (&Upstream{Candidate: &routing.Candidate{Timeouts: routing.Timeouts{Dial: time.Second}}}).probeTimeout())
	assert.Equal(t, 10*time.Second, (&Upstream{Candidate: &routing.Candidate{Timeouts: routing.Timeouts{Dial: time.Minute}}}).probeTimeout(), "capped")

	release := make(chan struct{})
	defer close(release)
	silent := probeUpstream(t, protocols.FamilyA, "/v1", routing.Timeouts{}, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	assert.Equal(t, routing.ProbeFail, silent.Probe(ctx).Result)
	assert.Less(t, time.Since(began), 5*time.Second, "the caller's deadline holds")

	// 2xx headers and a large body that never ends: the probe reads 64 KiB and is done.
	endless := probeUpstream(t, protocols.FamilyA, "/v1", routing.Timeouts{}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = w.Write([]byte(strings.Repeat("x", 256<<10)))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	done := make(chan routing.ProbeOutcome, 1)
	go func() { done <- endless.Probe(context.Background()) }()
	select {
	case out := <-done:
		assert.Equal(t, routing.ProbePass, out.Result)
	case <-time.After(8 * time.Second): // well inside the probe's own 10s limit
		t.Fatal("the probe read on past 64 KiB of a body that never ends")
	}
}
