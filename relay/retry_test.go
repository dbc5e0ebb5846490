package relay

import (
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

const plainChat = `{"model":"svc","messages":[{"role":"user","content":"hello there"}]}`

// flaky answers its first failures requests with fail, then with a chat answer; it
// notes when each request came.
type flaky struct {
	mu       sync.Mutex
	failures int
	fail     func(w http.ResponseWriter)
	seen     []time.Time
}

func (f *flaky) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen = append(f.seen, time.Now())
	failing := len(f.seen) <= f.failures
	f.mu.Unlock()
	if failing {
		f.fail(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(chatAnswer))
}

func (f *flaky) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.seen...)
}

func status(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error":{"message":"failed on purpose","type":"server_error"}}`))
	}
}

// reset drops the connection with a TCP reset before any byte of an answer.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	_ = conn.Close()
}

// retrying is an upstream whose candidate retries: quick back-offs, so tests stay fast.
func retrying(t *testing.T, name string, f *flaky, retries int) *Upstream {
	up := testUpstream(t, name, f.handle, routing.Timeouts{})
	up.Candidate.Retry = routing.Retry{Retries: retries, Backoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
	return up
}

func TestARetryFixesAFailureThatRetryingCanFix(t *testing.T) {
	for name, fail := range map[string]func(http.ResponseWriter){
		"500": status(500), "502": status(502), "503": status(503), "504": status(504),
		"429 without a hint": status(429), "reset before any byte": reset,
	} {
		t.Run(name, func(t *testing.T) {
			f := &flaky{failures: 1, fail: fail}
			up := retrying(t, "only", f, 1)
			r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
			require.Nil(t, r.err, "a single candidate that fails once is retried")
			assert.Equal(t, 200, r.rec.Code)
			require.Len(t, r.out.Attempts, 2)
			assert.Equal(t, 0, r.out.Attempts[0].Retry)
			assert.NotEqual(t, routing.ReasonNone, r.out.Attempts[0].Reason)
			assert.Equal(t, 1, r.out.Attempts[1].Retry)
			assert.Equal(t, routing.ReasonNone, r.out.Attempts[1].Reason)
			assert.Len(t, f.times(), 2)
			assert.Equal(t, 1, r.finalized)
		})
	}
}

func TestRetryingCannotFixEveryFailure(t *testing.T) {
	for name, fail := range map[string]func(http.ResponseWriter){
		"400": status(400), "401": status(401), "403": status(403), "404": status(404), "422": status(422),
		"context length": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`))
		},
		"not JSON": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":`))
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := &flaky{failures: 1, fail: fail}
			up := retrying(t, "only", f, 3)
			serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
			assert.Len(t, f.times(), 1, "tried once: another attempt would fail the same way")
		})
	}
}

func TestAHealthyAlternativeAnswersBeforeARetry(t *testing.T) {
	first := &flaky{failures: 1, fail: status(500)}
	second := &flaky{}
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), retrying(t, "first", first, 2), retrying(t, "second", second, 2))
	require.Nil(t, r.err)
	assert.Equal(t, "second", r.out.Served.Candidate.Name, "failover costs no wait; a retry does")
	assert.Len(t, first.times(), 1, "not retried once another candidate served")
	require.Len(t, r.out.Attempts, 2)
	assert.Zero(t, r.out.Attempts[1].Wait)
}

func TestRetriesComeOnlyAfterEveryCandidateHadItsTurn(t *testing.T) {
	first := &flaky{failures: 1, fail: status(503)}
	second := &flaky{failures: 1, fail: status(503)}
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), retrying(t, "first", first, 1), retrying(t, "second", second, 1))
	require.Nil(t, r.err)
	require.Len(t, r.out.Attempts, 3)
	assert.Equal(t, []string{"first", "second"}, []string{r.out.Attempts[0].Candidate, r.out.Attempts[1].Candidate})
	assert.Equal(t, 0, r.out.Attempts[1].Retry)
	assert.Equal(t, 1, r.out.Attempts[2].Retry, "the soonest retry serves")
}

func TestRetriesAreBoundedAndBackOff(t *testing.T) {
	f := &flaky{failures: 100, fail: status(503)}
	up := retrying(t, "only", f, 2)
	up.Candidate.Retry = routing.Retry{Retries: 2, Backoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	// A circuit that never opens: only the retry count bounds the attempts.
	up.Health = routing.NewHealth(routing.HealthPolicy{FailureThreshold: 100})
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.NotNil(t, r.err)
	assert.Equal(t, 503, r.err.Status, "answered once the retries are spent")
	seen := f.times()
	assert.Len(t, seen, 3, "one try and two retries")
	for i, a := range r.out.Attempts[1:] {
		assert.LessOrEqual(t, a.Wait, 100*time.Millisecond, "retry %d waited within its bound", i+1)
		assert.GreaterOrEqual(t, seen[i+1].Sub(seen[i]), a.Wait, "retry %d started after its wait", i+1)
	}
}

func TestARetryWaitsForTheUpstreamsRetryAfter(t *testing.T) {
	f := &flaky{failures: 1, fail: status(429, "Retry-After-Ms", "400")}
	up := retrying(t, "only", f, 1)
	up.Candidate.Retry.MaxBackoff = time.Second // a pause within the back-off's bound is waited out
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.Nil(t, r.err, "the pause it asked for was waited out, then it served")
	seen := f.times()
	require.Len(t, seen, 2)
	assert.GreaterOrEqual(t, seen[1].Sub(seen[0]), 400*time.Millisecond, "never sooner than it asked")
	assert.Equal(t, "closed", up.Health.Snapshot(time.Now()).State, "the retry's success ended the pause")
}

func TestTheRequestDeadlineBoundsRetries(t *testing.T) {
	f := &flaky{failures: 1, fail: status(429, "Retry-After", "2")}
	up := retrying(t, "only", f, 1)
	up.Candidate.Retry.MaxBackoff = 8 * time.Second
	req := chatRequest(t, protocols.KindChat, plainChat)
	req.Timeout = 500 * time.Millisecond
	began := time.Now()
	r := serveRecorded(t, req, up)
	require.NotNil(t, r.err)
	assert.Equal(t, 503, r.err.Status)
	assert.Less(t, time.Since(began), time.Second, "a retry that would start after the deadline is not waited for")
	assert.Len(t, f.times(), 1)
	assert.Equal(t, 2, r.err.RetryAfter, "the client is told when the candidate is back")
}

func TestTheRequestDeadlineEndsASlowAttemptWithoutBlame(t *testing.T) {
	slow := testUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}, routing.Timeouts{})
	req := chatRequest(t, protocols.KindChat, plainChat)
	req.Timeout = 300 * time.Millisecond
	began := time.Now()
	r := serveRecorded(t, req, slow)
	require.NotNil(t, r.err)
	assert.Less(t, time.Since(began), 2*time.Second)
	require.Len(t, r.out.Attempts, 1)
	assert.Equal(t, routing.ReasonDeadline, r.out.Attempts[0].Reason)
	assert.Equal(t, http.StatusGatewayTimeout, r.err.Status, "the client is told its time ran out, not that no candidate was there")
	assert.Equal(t, protocols.CodeDeadline, r.err.Code)
	assert.Equal(t, "deadline", r.out.Result())
	snap := slow.Health.Snapshot(time.Now())
	assert.Zero(t, snap.RecentFailures, "the candidate was not given its own time: its health does not move")
}

func TestNoRetryAfterTheFirstByte(t *testing.T) {
	var hits int
	var mu sync.Mutex
	up := testUpstream(t, "cut", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n"))
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}, routing.Timeouts{})
	up.Candidate.Retry = routing.Retry{Retries: 3, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, streamedChat), up)
	assert.NotNil(t, r.out.StreamError)
	assert.Equal(t, 1, hits, "the client had its first byte: the stream ends with an error event, not a retry")
}

func TestAFirstEventLimitMovesOnFromASilentStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	silent := testUpstream(t, "silent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, routing.Timeouts{FirstToken: 200 * time.Millisecond})
	quick := testUpstream(t, "quick", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{})
	began := time.Now()
	req := chatRequest(t, protocols.KindChat, streamedChat)
	req.FailoverAfterTimeout = true
	r := serveRecorded(t, req, silent, quick)
	require.Nil(t, r.err)
	assert.Equal(t, "quick", r.out.Served.Candidate.Name)
	assert.Equal(t, routing.ReasonTimeout, r.out.Attempts[0].Reason)
	assert.True(t, r.out.Attempts[0].Abandoned, "the upstream had the whole body")
	assert.Less(t, time.Since(began), 5*time.Second, "moved on at the first-event limit, not the first-byte one (60 s)")
}

func TestTheFirstByteLimitStillBoundsTheFirstEvent(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	silent := testUpstream(t, "silent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, routing.Timeouts{FirstByte: 200 * time.Millisecond, FirstToken: time.Minute})
	quick := testUpstream(t, "quick", sseHandler(chatStream(hiddenModel), false), routing.Timeouts{})
	began := time.Now()
	req := chatRequest(t, protocols.KindChat, streamedChat)
	req.FailoverAfterTimeout = true
	r := serveRecorded(t, req, silent, quick)
	require.Nil(t, r.err)
	assert.Equal(t, "quick", r.out.Served.Candidate.Name)
	assert.Less(t, time.Since(began), 5*time.Second, "a longer first-event limit does not stretch the first-byte limit")
}

func TestRetryWaits(t *testing.T) {
	r := routing.Retry{Retries: 5, Backoff: 100 * time.Millisecond, MaxBackoff: 350 * time.Millisecond}
	assert.Equal(t, 50*time.Millisecond, r.Wait(1, 0, 0.5), "full jitter below the first bound")
	assert.Equal(t, 100*time.Millisecond, r.Wait(2, 0, 0.5), "the bound doubles")
	assert.Equal(t, 175*time.Millisecond, r.Wait(3, 0, 0.5), "up to the cap")
	assert.Equal(t, 175*time.Millisecond, r.Wait(60, 0, 0.5), "however many retries")
	assert.Equal(t, 2*time.Second, r.Wait(1, 2*time.Second, 0.5), "never sooner than the upstream asked")
}

func TestALongPauseIsTheClientsToWaitOut(t *testing.T) {
	f := &flaky{failures: 1, fail: status(429, "Retry-After", "30")}
	up := retrying(t, "only", f, 1)
	up.Candidate.Retry.MaxBackoff = 8 * time.Second
	began := time.Now()
	r := serveRecorded(t, chatRequest(t, protocols.KindChat, plainChat), up)
	require.NotNil(t, r.err)
	assert.Less(t, time.Since(began), 2*time.Second, "the request is not held for the pause")
	assert.Equal(t, 30, r.err.RetryAfter)
	assert.Len(t, f.times(), 1)
}
