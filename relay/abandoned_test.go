package relay

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// stallingUpstream takes the whole body, then answers nothing until the test ends: a
// generation longer than the candidate's header timeout. It counts the requests.
func stallingUpstream(t *testing.T, name string, hits *atomic.Int32, timeouts routing.Timeouts) *Upstream {
	release := make(chan struct{})
	up := testUpstream(t, name, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, timeouts)
	t.Cleanup(func() { close(release) }) // before the server's own Close, which waits for the handler
	up.Candidate.Retry = routing.Retry{Retries: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	return up
}

// A non-streamed answer that outlasts the header timeout after the upstream had the
// whole body is not asked for again, anywhere: the request ends with a 504 that names
// the limit, the candidate's health does not move, and the attempt is billed.
func TestATimeoutAfterTheWholeBodyIsNotRetriedAndIsBilled(t *testing.T) {
	var stalledHits, otherHits atomic.Int32
	stalled := stallingUpstream(t, "slow", &stalledHits, routing.Timeouts{Header: 150 * time.Millisecond})
	other := stallingUpstream(t, "other", &otherHits, routing.Timeouts{})
	var finalized *Outcome
	req := chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[{"role":"user","content":"write a long story"}]}`)
	req.Timeout = time.Minute
	r := serveRecorded(t, req, stalled, other)
	finalized = r.out

	assert.Equal(t, int32(1), stalledHits.Load(), "one generation, not one per retry")
	assert.Zero(t, otherHits.Load(), "no failover by default")
	require.NotNil(t, r.err)
	assert.Equal(t, http.StatusGatewayTimeout, r.err.Status)
	assert.Equal(t, protocols.CodeUpstreamTimeout, r.err.Code)
	assert.Contains(t, r.err.Message, "header_timeout (150ms)")
	assert.True(t, r.err.NoRetry, "SDKs are told not to start the work again")
	assert.NotContains(t, r.err.Message, hiddenModel)

	require.Len(t, r.out.Attempts, 1)
	assert.True(t, r.out.Attempts[0].Abandoned)
	snap := stalled.Health.Snapshot(time.Now())
	assert.Equal(t, "closed", snap.State)
	assert.Zero(t, snap.RecentFailures, "a long generation is not the candidate's failure")
	assert.Equal(t, 1.0, snap.SuccessRate)

	assert.Equal(t, 1, r.finalized, "billed once")
	assert.True(t, finalized.TimedOut)
	assert.Equal(t, "slow", finalized.Served.Candidate.Name, "billed to the candidate that had the work")
	assert.Equal(t, http.StatusGatewayTimeout, finalized.Status)
	assert.True(t, finalized.Obs.Billable)
	assert.Zero(t, finalized.Abandoned, "the record stands for the one abandoned attempt")
	assert.Equal(t, "upstream_timeout", finalized.Result())
}

// With failover_after_timeout the request goes on to the next candidate once, still
// without retrying the one that timed out or moving its health.
func TestFailoverAfterTimeoutMovesOnOnce(t *testing.T) {
	var stalledHits atomic.Int32
	stalled := stallingUpstream(t, "slow", &stalledHits, routing.Timeouts{Header: 150 * time.Millisecond})
	var goodHits atomic.Int32
	good := testUpstream(t, "good", func(w http.ResponseWriter, r *http.Request) {
		goodHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"y","model":"` + hiddenModel + `","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`))
	}, routing.Timeouts{})
	req := chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[{"role":"user","content":"hi"}]}`)
	req.FailoverAfterTimeout = true
	r := serveRecorded(t, req, stalled, good)
	require.Nil(t, r.err)
	assert.Equal(t, "good", r.out.Served.Candidate.Name)
	assert.Equal(t, int32(1), stalledHits.Load())
	assert.Equal(t, int32(1), goodHits.Load())
	assert.Zero(t, stalled.Health.Snapshot(time.Now()).RecentFailures)
	assert.Equal(t, 1, r.out.Abandoned, "the served record also bills the abandoned attempt's input")
}

// A request never makes more attempts on one candidate than its failure_threshold, even
// when background probes pass in between and close its circuit again.
func TestRetriesOnOneCandidateStopAtItsFailureThreshold(t *testing.T) {
	var hits atomic.Int32
	failing := testUpstream(t, "failing", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"message":"down"}}`))
	}, routing.Timeouts{})
	failing.Candidate.Retry = routing.Retry{Retries: 10, Backoff: 20 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	failing.Health.SetPolicy(routing.HealthPolicy{FailureThreshold: 3, ProbeInterval: time.Millisecond, ProbeMaxInterval: time.Millisecond})
	prober := routing.StartProber([]routing.ProbeTarget{{Health: failing.Health,
		Probe: func(context.Context) routing.ProbeOutcome { return routing.ProbeOutcome{Result: routing.ProbePass} }}}, time.Millisecond)
	t.Cleanup(prober.Stop)

	r := serveRecorded(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), failing)
	require.NotNil(t, r.err)
	assert.Equal(t, int32(3), hits.Load(), "at most failure_threshold attempts on the candidate")
}
