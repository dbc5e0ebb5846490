package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// serveLeaving serves req in the background with a client the test makes leave (leave),
// and returns what Serve gave once it has returned (wait).
func serveLeaving(t *testing.T, req *Request, ups ...*Upstream) (leave context.CancelFunc, wait func() *recorded) {
	t.Helper()
	for i, up := range ups {
		up.Candidate.Priority = i
	}
	r := &recorded{rec: httptest.NewRecorder()}
	req.Finalize = func(o *Outcome) {
		r.finalized++
		r.atFinalize = r.rec.Body.String()
		r.attemptsAtFinalize = len(o.Attempts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.out, r.err = Serve(ctx, r.rec, req, ups)
	}()
	return cancel, func() *recorded {
		t.Helper()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Serve did not return")
		}
		return r
	}
}

// heldAnswer is an upstream that reads the whole body, says so on gotBody, and answers
// only once release is closed: the client can be made to leave in between.
func heldAnswer(gotBody chan<- struct{}, release <-chan struct{}, status int, contentType, answer string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		gotBody <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}
}

// counted is an upstream that answers well and counts its calls.
func counted(calls *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"y","model":"m","usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}
}

// A client that leaves once the upstream has its whole body does not make the work free:
// the answer is read on, without a byte to the client, and metered once with the
// upstream's own usage; no other candidate is tried, and the candidate's health is as it
// was.
func TestAClientThatLeavesBeforeTheAnswerIsStillBilled(t *testing.T) {
	text := strings.Repeat("x", 400)
	cases := []struct {
		name, contentType, body, answer string
		want                            protocols.Usage // what is billed
	}{
		{"a JSON answer", "application/json", `{"model":"svc","messages":[]}`,
			`{"id":"x","model":"` + hiddenModel + `","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":22}}`,
			protocols.Usage{Input: 11, Output: 22}},
		{"a stream with its usage", "text/event-stream", streamedChat, chatStream(hiddenModel),
			protocols.Usage{Input: 7, Output: 1}},
		{"a stream without usage: the text read on is estimated", "text/event-stream", streamedChat,
			"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\ndata: [DONE]\n\n",
			protocols.Usage{Input: 3, Output: 100, Estimated: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gotBody, release := make(chan struct{}, 1), make(chan struct{})
			held := testUpstream(t, "held", heldAnswer(gotBody, release, http.StatusOK, tc.contentType, tc.answer), routing.Timeouts{})
			var otherCalls atomic.Int32
			other := testUpstream(t, "other", counted(&otherCalls), routing.Timeouts{})
			leave, wait := serveLeaving(t, chatRequest(t, protocols.KindChat, tc.body), held, other)

			<-gotBody
			leave()
			close(release)
			r := wait()

			require.Nil(t, r.err)
			assert.Equal(t, 1, r.finalized, "metered exactly once")
			assert.True(t, r.out.ClientGone)
			assert.Equal(t, "client_gone", r.out.Result())
			assert.Equal(t, tc.want, metering.Bill(r.out.Obs, func() int64 { return 3 }), "the request's input, estimated: 3 tokens")
			assert.Equal(t, http.StatusOK, r.out.Status, "the record has the upstream's status")
			require.NotNil(t, r.out.Served)
			assert.Equal(t, "held", r.out.Served.Candidate.Name)
			assert.Zero(t, r.rec.Body.Len(), "nothing is written to a client that left")
			assert.Empty(t, r.rec.Header(), "not even headers")
			assert.Zero(t, otherCalls.Load(), "no other candidate is tried after the client left")
			assert.Len(t, r.out.Attempts, 1)
			snap := held.Health.Snapshot(time.Now())
			assert.Zero(t, snap.RecentFailures, "the client's leaving is not the candidate's failure")
			assert.Equal(t, "closed", snap.State)
		})
	}
}

// An upstream that fails (or refuses) while its answer is read on for a client that left
// bills nothing, as the same answer would have had the client stayed, and moves on to no
// other candidate.
func TestAFailureReadOnForAClientThatLeftBillsNothing(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusBadRequest} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			gotBody, release := make(chan struct{}, 1), make(chan struct{})
			failing := testUpstream(t, "failing", heldAnswer(gotBody, release, status, "application/json", `{"error":{"message":"no"}}`), routing.Timeouts{})
			var otherCalls atomic.Int32
			other := testUpstream(t, "other", counted(&otherCalls), routing.Timeouts{})
			leave, wait := serveLeaving(t, chatRequest(t, protocols.KindChat, `{"model":"svc","messages":[]}`), failing, other)

			<-gotBody
			leave()
			close(release)
			r := wait()

			require.Nil(t, r.err)
			assert.Zero(t, r.finalized, "nothing billed")
			assert.True(t, r.out.ClientGone)
			assert.Nil(t, r.out.Served)
			assert.Zero(t, r.rec.Body.Len())
			assert.Zero(t, otherCalls.Load(), "no failover after the client left")
			assert.Zero(t, failing.Health.Snapshot(time.Now()).RecentFailures, "health does not move because the client left")
		})
	}
}

// A stream whose client left before its first byte is read on for no longer than the
// grace a client that leaves mid-stream gets, however long the candidate's own limits;
// what it carried by then is billed as an estimate.
func TestAStreamReadOnForAClientThatLeftEndsWithinTheGrace(t *testing.T) {
	text := strings.Repeat("z", 80)
	for name, sent := range map[string]string{
		"silent after its headers": "",
		"silent after some text":   "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gotBody, release, testOver := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
			silent := testUpstream(t, "silent", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				gotBody <- struct{}{}
				<-release
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte(sent))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-testOver: // a failing test ends without the gateway's help
				}
			}, routing.Timeouts{FirstByte: time.Hour, Idle: time.Hour})
			t.Cleanup(func() { close(testOver) })
			leave, wait := serveLeaving(t, chatRequest(t, protocols.KindChat, streamedChat), silent)

			<-gotBody
			leave()
			began := time.Now()
			close(release)
			r := wait()

			assert.Less(t, time.Since(began), clientGoneGrace+5*time.Second, "the read-on ends with the grace")
			assert.Equal(t, 1, r.finalized, "billed once")
			assert.True(t, r.out.ClientGone)
			u := metering.Bill(r.out.Obs, func() int64 { return 10 }) // the request's input estimated
			assert.Equal(t, protocols.Usage{Input: 10, Output: int64(len(sent) / 80 * 20), Estimated: true}, u)
			assert.Zero(t, r.rec.Body.Len())
		})
	}
}

// A client that leaves while its body is still being forwarded cancels the upstream at
// once: the upstream could not act on part of a body, and nothing is billed.
func TestAClientThatLeavesWhileItsBodyIsForwardedIsNotBilled(t *testing.T) {
	op := protocols.Operation{Family: protocols.FamilyA, Kind: protocols.KindResponses}
	body := `{"model":"svc","input":"` + strings.Repeat("y", 256<<10) + `"}`
	sent := len(body) / 2
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write([]byte(body[:sent])) }() // the rest never comes
	t.Cleanup(func() { _ = pw.CloseWithError(io.ErrUnexpectedEOF) })

	arriving := NewArrivingBody(op, len(body))
	_, ok := arriving.ReadUntilModel(pr)
	require.True(t, ok)
	arriving.FinishWhileForwarding(pr, func(*protocols.ParsedRequest) *protocols.APIError { return nil })

	started, ended := make(chan struct{}, 1), make(chan error, 1)
	partial := testUpstream(t, "partial", func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		_, err := io.ReadFull(r.Body, buf)
		started <- struct{}{}
		if err == nil {
			_, err = io.Copy(io.Discard, r.Body)
		}
		ended <- err
	}, routing.Timeouts{})
	var otherCalls atomic.Int32
	other := testUpstream(t, "other", counted(&otherCalls), routing.Timeouts{})
	req := &Request{Op: op, ServiceModel: "svc", Body: arriving, Header: http.Header{}}
	leave, wait := serveLeaving(t, req, partial, other)

	<-started
	left := time.Now()
	leave()
	r := wait()

	assert.Less(t, time.Since(left), time.Second/2, "cancelled at once, not when the forwarder gives up on a stalled body")
	assert.Error(t, <-ended, "the upstream's request was cut before the whole body reached it")
	assert.Zero(t, r.finalized, "nothing billed")
	assert.True(t, r.out.ClientGone)
	assert.Nil(t, r.out.Served)
	assert.Zero(t, otherCalls.Load(), "no failover after the client left")
}

// Once a stream read on for a client that left has given its final usage, the gateway
// stops reading: it does not wait out the grace for a terminator that may never come.
func TestAReadOnStopsAtTheFinalUsage(t *testing.T) {
	gotBody, release, testOver := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	up := testUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		gotBody <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "text/event-stream")
		parts := strings.SplitAfter(chatStream(hiddenModel), "\n\n")
		_, _ = w.Write([]byte(parts[0] + parts[1] + parts[2])) // no [DONE]
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-testOver:
		}
	}, routing.Timeouts{})
	t.Cleanup(func() { close(testOver) })
	leave, wait := serveLeaving(t, chatRequest(t, protocols.KindChat, streamedChat), up)

	<-gotBody
	leave()
	began := time.Now()
	close(release)
	r := wait()

	assert.Less(t, time.Since(began), clientGoneGrace, "stopped at the usage, not at the grace")
	assert.Equal(t, 1, r.finalized)
	assert.Equal(t, protocols.Usage{Input: 7, Output: 1}, metering.Bill(r.out.Obs, nil))
}
