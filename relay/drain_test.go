package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
	"github.com/switchyard-gw/switchyard/protocols"
	"github.com/switchyard-gw/switchyard/routing"
)

// firstWrite is a ResponseRecorder that says when the first bytes of an answer were
// written; its body is read only once Serve has returned.
type firstWrite struct {
	*httptest.ResponseRecorder
	once    sync.Once
	written chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	defer w.once.Do(func() { close(w.written) })
	return w.ResponseRecorder.Write(p)
}

func (w *firstWrite) Unwrap() http.ResponseWriter { return w.ResponseRecorder }

// serveDraining serves req in the background against ups (tried in order) with a Drain
// of its own; it returns the Drain, the writer, and a wait for what Serve gave.
func serveDraining(t *testing.T, req *Request, ups ...*Upstream) (*Drain, *firstWrite, func() *recorded) {
	t.Helper()
	for i, up := range ups {
		up.Candidate.Priority = i
	}
	d := NewDrain()
	req.Drain = d
	w := &firstWrite{ResponseRecorder: httptest.NewRecorder(), written: make(chan struct{})}
	r := &recorded{rec: w.ResponseRecorder}
	req.Finalize = func(o *Outcome) {
		r.finalized++
		r.atFinalize = w.Body.String()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.out, r.err = Serve(context.Background(), w, req, ups)
	}()
	return d, w, func() *recorded {
		t.Helper()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Serve did not return after the drain")
		}
		return r
	}
}

// endless is an upstream stream that sends one event of text, then nothing until the
// gateway hangs up.
func endless(text string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// A stream still running when the drain ends it gets the family's error event, saying
// the gateway is stopping, after its record: billed once for the text it delivered. The
// candidate did nothing wrong: its health does not move, and no other is tried.
func TestADrainEndsAStreamWithTheErrorEventAndBillsIt(t *testing.T) {
	text := strings.Repeat("z", 80)
	var others atomic.Int32
	up := testUpstream(t, "endless", endless(text), routing.Timeouts{Idle: time.Hour})
	d, w, wait := serveDraining(t, chatRequest(t, protocols.KindChat, streamedChat), up,
		testUpstream(t, "other", counted(&others), routing.Timeouts{}))
	<-w.written // the stream reached the client
	d.End()
	r := wait()

	require.Nil(t, r.err)
	assert.Equal(t, "shutdown", r.out.StreamEnd())
	assert.Equal(t, "stream_error", r.out.Result())
	events := strings.Split(strings.TrimSpace(r.rec.Body.String()), "\n\n")
	last := events[len(events)-1]
	assert.Contains(t, last, `"error"`, "the stream ends with the family's error frame")
	assert.Contains(t, last, protocols.StreamShutdown)
	assert.Equal(t, 1, r.finalized, "billed once")
	assert.NotContains(t, r.atFinalize, protocols.StreamShutdown, "the record precedes the last bytes")
	u := metering.Bill(r.out.Obs, func() int64 { return 10 })
	assert.Equal(t, protocols.Usage{Input: 10, Output: 20, Estimated: true}, u, "the 80 characters it delivered")
	assert.Zero(t, up.Health.Snapshot(time.Now()).RecentFailures, "a stop is not the candidate's failure")
	assert.Zero(t, others.Load(), "no failover")
}

// A request whose answer has not begun when the drain comes is answered 503, retry at
// once elsewhere; nothing is billed, no candidate's health moves, no other is tried; a
// request that comes after the drain calls no upstream.
func TestADrainBeforeTheAnswerIsA503(t *testing.T) {
	gotBody, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	var others atomic.Int32
	held := testUpstream(t, "held", heldAnswer(gotBody, release, 200, "text/event-stream", chatStream("m")), routing.Timeouts{})
	other := testUpstream(t, "other", counted(&others), routing.Timeouts{})
	d, _, wait := serveDraining(t, chatRequest(t, protocols.KindChat, streamedChat), held, other)
	<-gotBody
	d.End()
	r := wait()

	require.NotNil(t, r.err)
	assert.Equal(t, http.StatusServiceUnavailable, r.err.Status)
	assert.Equal(t, protocols.CodeShuttingDown, r.err.Code)
	assert.Equal(t, 1, r.err.RetryAfter)
	assert.Equal(t, 1, r.finalized, "the upstream had the whole request: its work is billed")
	assert.Zero(t, held.Health.Snapshot(time.Now()).RecentFailures)
	assert.Zero(t, others.Load(), "no failover")

	// The drain has ended: a later request tries no candidate.
	req := chatRequest(t, protocols.KindChat, streamedChat)
	req.Drain = d
	out, apiErr := Serve(context.Background(), httptest.NewRecorder(), req, []*Upstream{other})
	require.NotNil(t, apiErr)
	assert.Equal(t, protocols.CodeShuttingDown, apiErr.Code)
	assert.Empty(t, out.Attempts)
}

// BenchmarkDrainWatch is what a Drain adds to each attempt: watching its clock and
// forgetting it, from every core at once.
func BenchmarkDrainWatch(b *testing.B) {
	d := NewDrain()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := &attemptClock{}
		for pb.Next() {
			d.watch(c)
			d.unwatch(c)
		}
	})
}
