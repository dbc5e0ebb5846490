package alerts

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The verification example of docs/operations.md, run: a receiver recomputes the HMAC over
// "<t>.<body>" with the shared secret.
func TestSignatureVerifies(t *testing.T) {
	body := []byte(`{"id":7,"kind":"budget"}`)
	at := time.Unix(1_764_000_000, 0)
	header := Sign("whsec_test", at, body)
	// The same value as docs/operations.md's shell example:
	//   printf '%s' '1764000000.{"id":7,"kind":"budget"}' | openssl dgst -sha256 -hmac whsec_test
	assert.Equal(t, "t=1764000000,v1=b50d43646feda2128d4a57876603c5d091b693e404d7158aa5583c0cd1dafff7", header)

	require.NoError(t, Verify("whsec_test", header, body, at.Add(time.Minute), 5*time.Minute))
	assert.ErrorIs(t, Verify("other-secret", header, body, at, 5*time.Minute), ErrBadSignature)
	assert.ErrorIs(t, Verify("whsec_test", header, []byte(`{"id":8,"kind":"budget"}`), at, 5*time.Minute), ErrBadSignature, "a changed body")
	forged := strings.Replace(header, "t=1764000000", "t=1764000600", 1)
	assert.ErrorIs(t, Verify("whsec_test", forged, body, at.Add(10*time.Minute), 5*time.Minute), ErrBadSignature, "the time is signed too")
	assert.ErrorIs(t, Verify("whsec_test", header, body, at.Add(10*time.Minute), 5*time.Minute), ErrStale, "a replay later")
	// A time ahead of the receiver's clock by more than the tolerance is refused too: a
	// signature made for later (a leaked secret, a sender's clock set forward) would
	// otherwise stay valid until then.
	assert.ErrorIs(t, Verify("whsec_test", header, body, at.Add(-10*time.Minute), 5*time.Minute), ErrStale, "a signature from the future")
	require.NoError(t, Verify("whsec_test", header, body, at.Add(-time.Minute), 5*time.Minute), "a clock a little behind the sender's")
	assert.ErrorIs(t, Verify("whsec_test", "garbage", body, at, time.Minute), ErrBadSignature)
}

func budgetEvent(threshold int) Event {
	return Event{Kind: KindBudget, At: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC), Budget: &BudgetEvent{
		Scope: "key", ID: "k_123", Period: "month", PeriodStart: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Threshold: threshold, LimitMicros: 2_000_000, SpentMicros: 1_000_500,
	}}
}

func TestBodies(t *testing.T) {
	e := budgetEvent(50)
	b, err := Body(FormatJSON, 42, &e)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	assert.EqualValues(t, 42, got["id"])
	assert.Equal(t, "budget", got["kind"])
	assert.EqualValues(t, 50, got["budget"].(map[string]any)["threshold_percent"])
	assert.Equal(t, "Switchyard: key k_123 has spent 50% of its month budget (1.0005 of 2.00).", got["text"])
	assert.NotContains(t, got, "circuit")

	b, err = Body(FormatSlack, 42, &e)
	require.NoError(t, err)
	assert.JSONEq(t, `{"text":"Switchyard: key k_123 has spent 50% of its month budget (1.0005 of 2.00)."}`, string(b))

	c := Event{Kind: KindCircuit, At: e.At, Circuit: &CircuitEvent{Model: "m", Candidate: "primary", State: "open", Reason: "status_5xx"}}
	assert.Equal(t, "Switchyard: candidate primary of model m is out of service (circuit open after status_5xx failures).", c.Text())
}

func TestDedupeKeys(t *testing.T) {
	a, b := budgetEvent(50), budgetEvent(50)
	b.At = b.At.Add(time.Hour)
	b.Budget.SpentMicros++
	assert.Equal(t, a.DedupeKey(), b.DedupeKey(), "one alert per threshold per period, whoever notices")
	c := budgetEvent(80)
	assert.NotEqual(t, a.DedupeKey(), c.DedupeKey())
	d := budgetEvent(50)
	d.Budget.PeriodStart = d.Budget.PeriodStart.AddDate(0, 1, 0)
	assert.NotEqual(t, a.DedupeKey(), d.DedupeKey(), "next month alerts again")
}

// memOutbox is an Outbox in memory.
type memOutbox struct {
	mu   sync.Mutex
	rows []Delivery
	fail error
}

func (m *memOutbox) Enqueue(_ context.Context, ds []NewDelivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
next:
	for _, d := range ds {
		for _, r := range m.rows {
			if r.Webhook == d.Webhook && r.Dedupe == d.Dedupe {
				continue next
			}
		}
		m.rows = append(m.rows, Delivery{ID: int64(len(m.rows) + 1), Webhook: d.Webhook, Kind: d.Kind, Dedupe: d.Dedupe,
			Event: d.Event, State: StatePending, CreatedAt: d.At, NextAt: d.At})
	}
	return nil
}

func (m *memOutbox) Claim(_ context.Context, _ string, now time.Time, _ time.Duration, limit int) ([]Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Delivery
	for _, r := range m.rows {
		if r.State == StatePending && !r.NextAt.After(now) && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *memOutbox) Finish(_ context.Context, id int64, _ string, state string, attempts int, next time.Time, lastError string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.rows[id-1]
	r.State, r.Attempts, r.NextAt, r.LastError = state, attempts, next, lastError
	return nil
}

func (m *memOutbox) Release(context.Context, string) error { return nil }

func (m *memOutbox) Recent(context.Context, int) ([]Delivery, error) { return nil, nil }

func (m *memOutbox) row(i int) Delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows[i]
}

// receiver answers with the statuses it is given, in turn, then 200.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	bodies   [][]byte
	headers  []http.Header
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, body)
	r.headers = append(r.headers, req.Header.Clone())
	status := http.StatusOK
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	r.mu.Unlock()
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "nope")
}

func TestWorkerRetriesWithBackoffThenGivesUp(t *testing.T) {
	rcv := &receiver{statuses: []int{503, 500, 502, 503}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	box := &memOutbox{}
	w := &Worker{
		Outbox: box, Owner: "gw", Now: func() time.Time { return now },
		Webhooks:    []Webhook{{URL: srv.URL + "/hook/T0KEN", Secret: "s3cret", Format: FormatJSON}},
		BaseBackoff: 10 * time.Second, MaxBackoff: 30 * time.Second, MaxAttempts: 4,
	}
	ctx := context.Background()
	e := budgetEvent(80)
	e.At = now
	w.Notify(e)
	w.Notify(e) // noticed twice: one row
	require.NoError(t, w.Flush(ctx))
	require.Len(t, box.rows, 1)

	var waits []time.Duration
	for attempt := 1; attempt <= 4; attempt++ {
		n, err := w.SendDue(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "attempt %d", attempt)
		r := box.row(0)
		assert.Equal(t, attempt, r.Attempts)
		assert.NotContains(t, r.LastError, "T0KEN", "the URL's token is not kept")
		if r.State != StatePending {
			assert.Equal(t, StateFailed, r.State)
			assert.Equal(t, 4, attempt, "gives up after MaxAttempts")
			break
		}
		assert.Contains(t, r.LastError, "status 5")
		waits = append(waits, r.NextAt.Sub(now))
		n, err = w.SendDue(ctx)
		require.NoError(t, err)
		assert.Zero(t, n, "not due before its back-off")
		now = r.NextAt
	}
	assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}, waits, "doubling, capped")
	assert.Len(t, rcv.bodies, 4)
	for i, b := range rcv.bodies {
		assert.NoError(t, Verify("s3cret", rcv.headers[i].Get(SignatureHeader), b, time.Now(), time.Minute))
		assert.Equal(t, "1", rcv.headers[i].Get("Switchyard-Delivery"))
	}
}

func TestWorkerStopsRetryingPastMaxAge(t *testing.T) {
	srv := httptest.NewServer(&receiver{statuses: []int{500, 500, 500}})
	defer srv.Close()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	box := &memOutbox{}
	w := &Worker{Outbox: box, Owner: "gw", Now: func() time.Time { return now },
		Webhooks:    []Webhook{{URL: srv.URL, Secret: "s", Format: FormatSlack}},
		BaseBackoff: time.Minute, MaxBackoff: time.Hour, MaxAttempts: 100, MaxAge: 90 * time.Second}
	e := budgetEvent(50)
	e.At = now
	w.Notify(e)
	require.NoError(t, w.Flush(context.Background()))
	_, err := w.SendDue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, StatePending, box.row(0).State, "next try at +1m, within 90s")
	now = box.row(0).NextAt
	_, err = w.SendDue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, StateFailed, box.row(0).State, "the next try (+3m) would be past the max age")
}

func TestWorkerKeepsEventsWhileTheOutboxIsAway(t *testing.T) {
	box := &memOutbox{fail: io.ErrUnexpectedEOF}
	w := &Worker{Outbox: box, Owner: "gw", Webhooks: []Webhook{
		{URL: "http://127.0.0.1:1/a", Kinds: []Kind{KindCircuit}},
		{URL: "http://127.0.0.1:1/b"},
	}}
	w.Notify(budgetEvent(50))
	assert.Error(t, w.Flush(context.Background()))
	box.fail = nil
	require.NoError(t, w.Flush(context.Background()))
	require.Len(t, box.rows, 1, "kept, and only for the webhook that wants budget events")
	wb := Webhook{URL: "http://127.0.0.1:1/b"}
	assert.Equal(t, wb.ID(), box.rows[0].Webhook)
}

func TestEndpointHidesThePath(t *testing.T) {
	w := Webhook{URL: "https://hooks.slack.com/services/T000/B000/XXXX"}
	assert.Equal(t, "https://hooks.slack.com", w.Endpoint())
	assert.NotContains(t, w.ID(), "XXXX")
}

// A ledger alert says the store is away, when the outbox is too: it goes straight to
// its webhooks, and only the other events wait for the store.
func TestLedgerAlertBypassesAnOutboxThatIsAway(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	box := &memOutbox{fail: io.ErrUnexpectedEOF}
	w := &Worker{Outbox: box, Owner: "gw", Webhooks: []Webhook{{URL: srv.URL, Secret: "s", Format: FormatJSON}}}
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w.Notify(Event{Kind: KindLedger, At: at, Ledger: &LedgerEvent{Journal: "gw-1", FailingSince: at.Add(-time.Minute)}})
	w.Notify(budgetEvent(50))
	assert.Error(t, w.Flush(context.Background()))
	require.Len(t, rcv.bodies, 1, "the ledger alert, at once")
	assert.NoError(t, Verify("s", rcv.headers[0].Get(SignatureHeader), rcv.bodies[0], time.Now(), time.Minute))
	assert.Equal(t, "0", rcv.headers[0].Get("Switchyard-Delivery"))
	assert.Equal(t, "ledger", rcv.headers[0].Get("Switchyard-Event"))

	box.fail = nil
	require.NoError(t, w.Flush(context.Background()))
	require.Len(t, box.rows, 1, "only the budget alert waited for the outbox")
	assert.Equal(t, KindBudget, box.rows[0].Kind)
}

// A receiver that redirects does not get the delivery sent on: the signed body and the
// webhook's URL (its path may hold a token, and would travel as the Referer) go to the
// configured URL only, and the 3xx is a failed try.
func TestWorkerDoesNotFollowRedirects(t *testing.T) {
	elsewhere := &receiver{}
	other := httptest.NewServer(elsewhere)
	defer other.Close()
	configured := &receiver{}
	var redirected sync.WaitGroup
	redirected.Add(1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		configured.ServeHTTP(httptest.NewRecorder(), r)
		http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
		redirected.Done()
	}))
	defer srv.Close()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	box := &memOutbox{}
	w := &Worker{Outbox: box, Owner: "gw", Now: func() time.Time { return now },
		Webhooks:    []Webhook{{URL: srv.URL + "/hook/T0KEN", Secret: "s", Format: FormatJSON}},
		MaxAttempts: 1}
	e := budgetEvent(80)
	e.At = now
	w.Notify(e)
	require.NoError(t, w.Flush(context.Background()))
	n, err := w.SendDue(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	redirected.Wait()

	require.Len(t, configured.bodies, 1, "the configured URL got the try")
	elsewhere.mu.Lock()
	assert.Zero(t, len(elsewhere.bodies), "the redirect's target got nothing")
	elsewhere.mu.Unlock()
	r := box.row(0)
	assert.Equal(t, StateFailed, r.State, "a 3xx is a failed try (here the only one allowed)")
	assert.Contains(t, r.LastError, "status 307")
	assert.NotContains(t, r.LastError, "T0KEN")

	// The same with a client of the caller's own, which would follow redirects.
	w.Client = &http.Client{}
	box.rows = nil
	redirected.Add(1)
	e.Budget.Threshold = 100
	w.Notify(e)
	require.NoError(t, w.Flush(context.Background()))
	_, err = w.SendDue(context.Background())
	require.NoError(t, err)
	redirected.Wait()
	elsewhere.mu.Lock()
	assert.Zero(t, len(elsewhere.bodies), "nor with a client given to the worker")
	elsewhere.mu.Unlock()
	assert.Equal(t, StateFailed, box.row(0).State)
}
