package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/alerts"
	"github.com/switchyard-gw/switchyard/internal/pgtest"
	"github.com/switchyard-gw/switchyard/internal/redistest"
	"github.com/switchyard-gw/switchyard/simulator"
)

const webhookSecret = "whsec-alerts-test-5d1c"

// webhookReceiver is an alert receiver on 127.0.0.1 that checks each delivery's
// signature and keeps the valid ones.
type webhookReceiver struct {
	*httptest.Server
	mu         sync.Mutex
	deliveries []gjson.Result
	ids        map[string]int // Switchyard-Delivery -> times received
	bad        int
	refused    int         // tries answered 503 while down
	down       atomic.Bool // while set, every try gets 503
	slow       time.Duration
	arrived    chan struct{}
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	r := &webhookReceiver{ids: map[string]int{}, arrived: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		// A slow receiver: a delivery in flight for a while, during which another
		// gateway polling the outbox must not send it too.
		time.Sleep(r.slow)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down.Load() {
			r.refused++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if alerts.Verify(webhookSecret, req.Header.Get(alerts.SignatureHeader), body, time.Now(), 5*time.Minute) != nil {
			r.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.deliveries = append(r.deliveries, gjson.ParseBytes(body))
		r.ids[req.Header.Get("Switchyard-Delivery")]++
		select {
		case r.arrived <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *webhookReceiver) of(kind string) []gjson.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []gjson.Result
	for _, d := range r.deliveries {
		if d.Get("kind").String() == kind {
			out = append(out, d)
		}
	}
	return out
}

func (r *webhookReceiver) block(url string) string {
	return "\t\talerts {\n\t\t\twebhook " + url + "/hooks/T0KEN-path {\n\t\t\t\tsecret " + webhookSecret +
		"\n\t\t\t}\n\t\t\tbudget_thresholds 50 100\n\t\t\tpoll 100ms\n\t\t}\n"
}

// flakyUpstream is the simulator behind a switch: while down, every call gets 503.
type flakyUpstream struct {
	*httptest.Server
	down atomic.Bool
}

func newFlakyUpstream(t *testing.T) *flakyUpstream {
	f := &flakyUpstream{}
	sim := simulator.New(simulator.Config{APIKey: upstreamCred})
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			http.Error(w, `{"error":{"message":"overloaded","type":"server_error"}}`, http.StatusServiceUnavailable)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// TestAlertsForBudgetAndCircuit: real requests take a key's budget past 50% and 100%
// (one signed delivery each), and a candidate whose upstream fails opens its circuit
// (one delivery) and closes it again when the upstream recovers (one more). The console
// API lists the webhook by scheme and host only, and the deliveries as sent.
func TestAlertsForBudgetAndCircuit(t *testing.T) {
	rcv := newWebhookReceiver(t)
	up := newUpstream(t)
	flaky := newFlakyUpstream(t)
	const alertKey = "sk-alert-key-0123456789abcdef"
	models := pricedChat("http://"+up.hostport(), upstreamPrefix+"-c") +
		"\t\tmodel flaky {\n" + candidate("only", "family_a", flaky.URL+"/v1", upstreamPrefix+"-f") + "\t\t}\n"
	options := rcv.block(rcv.URL) +
		"\t\thealth {\n\t\t\tfailure_threshold 2\n\t\t\tcooldown 200ms\n\t\t\tmax_cooldown 200ms\n\t\t\tprobe off\n\t\t}\n" +
		fmt.Sprintf("\t\tkey alerted %s {\n\t\t\tbudget 0.04/month\n\t\t}\n", alertKey)
	g := startGatewayWith(t, up, models, options)

	// Each answer is 10 output tokens at 1000 per million: 0.01 of a 0.04 budget.
	body := `{"model":"priced-chat","max_tokens":10,"messages":[{"role":"user","content":"Hello"}]}`
	for i := range 4 {
		r := g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+alertKey)
		require.Equal(t, 200, r.Status, "request %d: %s", i, r.Body)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, rcv.of("budget"), 2)
	}, waitShort, pollEvery, "a delivery at 50%% and one at 100%%")
	budget := rcv.of("budget")
	assert.Equal(t, int64(50), budget[0].Get("budget.threshold_percent").Int())
	assert.Equal(t, int64(100), budget[1].Get("budget.threshold_percent").Int())
	assert.Equal(t, "static:alerted", budget[0].Get("budget.id").String())
	assert.Equal(t, "key", budget[0].Get("budget.scope").String())
	assert.Equal(t, int64(40_000), budget[1].Get("budget.limit_micros").Int())
	assert.Equal(t, int64(40_000), budget[1].Get("budget.spent_micros").Int())
	assert.Contains(t, budget[1].Get("text").String(), "100% of its month budget")

	// The candidate fails: the circuit opens after two failures.
	flaky.down.Store(true)
	chat := `{"model":"flaky","messages":[{"role":"user","content":"Hi"}]}`
	require.Eventually(t, func() bool {
		g.call(t, "POST", "/v1/chat/completions", chat)
		return len(rcv.of("circuit")) > 0
	}, waitShort, pollEvery, "an open alert")
	open := rcv.of("circuit")[0]
	assert.Equal(t, "open", open.Get("circuit.state").String())
	assert.Equal(t, "flaky", open.Get("circuit.model").String())
	assert.Equal(t, "only", open.Get("circuit.candidate").String())

	// It recovers: the first request after the cooldown probes it and closes the circuit.
	flaky.down.Store(false)
	require.Eventually(t, func() bool {
		return g.call(t, "POST", "/v1/chat/completions", chat).Status == 200
	}, waitShort, pollEvery)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, rcv.of("circuit"), 2)
	}, waitShort, pollEvery, "a closed alert")
	assert.Equal(t, "closed", rcv.of("circuit")[1].Get("circuit.state").String())

	rcv.mu.Lock()
	assert.Zero(t, rcv.bad, "every delivery is signed with the secret")
	for id, n := range rcv.ids {
		assert.Equal(t, 1, n, "delivery %s sent once", id)
	}
	all := fmt.Sprint(rcv.deliveries)
	rcv.mu.Unlock()
	up.assertNoLeakIn(t, "alert bodies", all, alertKey, webhookSecret, flaky.URL)

	// The admin API: the webhook by scheme and host, never its path or secret, and the
	// deliveries sent (the worker marks a delivery sent once the receiver has answered,
	// a moment after the receiver has it).
	var view struct {
		Webhooks []struct {
			Endpoint string   `json:"endpoint"`
			Events   []string `json:"events"`
		} `json:"webhooks"`
		Deliveries []struct {
			Kind, State, Text string
		} `json:"deliveries"`
	}
	var raw []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(g.admin + "/switchyard/alerts")
		if !assert.NoError(c, err) {
			return
		}
		raw, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !assert.Equal(c, 200, resp.StatusCode, "%s", raw) || !assert.NoError(c, json.Unmarshal(raw, &view)) {
			return
		}
		if assert.Len(c, view.Deliveries, 4) {
			for _, d := range view.Deliveries {
				assert.Equal(c, "sent", d.State, "%s", d.Text)
			}
		}
	}, waitShort, pollEvery, "four deliveries, each marked sent")
	require.Len(t, view.Webhooks, 1)
	assert.Equal(t, rcv.URL, view.Webhooks[0].Endpoint)
	assert.NotContains(t, string(raw), "T0KEN")
	assert.NotContains(t, string(raw), webhookSecret)
	assert.True(t, strings.HasPrefix(view.Deliveries[0].Text, "Switchyard: candidate only of model flaky takes traffic again"))
}

// TestAlertsOnceFromTwoGatewaysSharingPostgres: two gateway processes share PostgreSQL
// (the outbox) and Redis (the budget's counters). A crossing is noticed while the
// receiver is down, the gateway that noticed it is killed, and another is started in
// its place: the delivery still arrives, once, and so does the next crossing's, noticed
// by the other gateway; every threshold once, whichever gateway sent it.
func TestAlertsOnceFromTwoGatewaysSharingPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway and runs two of them with Redis and PostgreSQL")
	}
	rd := redistest.Start(t)
	dsn := pgtest.SchemaDSN(t)
	caddy := buildCaddyCLI(t)
	up := newUpstream(t)
	rcv := newWebhookReceiver(t)
	rcv.slow = 500 * time.Millisecond // five polls of the other gateway
	option := func(dir string) func(int) string {
		return func(int) string {
			return fmt.Sprintf(`		store postgres %q
		journal %s
		limits {
			redis %s
		}
		key budgeted %s {
			budget 0.04/month
		}
		alerts {
			webhook %s/hooks/T0KEN-path {
				secret %s
			}
			budget_thresholds 50 100
			poll 100ms
			backoff 1s 1s
		}
`, dsn, filepath.Join(dir, "journal"), rd.URL(), budgetKey, rcv.URL, webhookSecret) + pricedChat("http://"+up.hostport(), upstreamPrefix+"-c")
		}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	a := startGatewayProcess(t, caddy, "a", dirA, option(dirA))
	b := startGatewayProcess(t, caddy, "b", dirB, option(dirB))
	body := `{"model":"priced-chat","max_tokens":10,"messages":[{"role":"user","content":"Hello"}]}`
	spend := func(g *processGateway) {
		r, err := g.send("POST", "/v1/chat/completions", body, "Authorization", "Bearer "+budgetKey)
		require.NoError(t, err)
		require.Equal(t, 200, r.Status, "%s", r.Body)
	}

	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	rcv.down.Store(true)
	spend(a)
	spend(a) // 50%, noticed by a
	// a is killed between tries, once its second has come back refused: a gateway killed
	// during a try holds the row for its lease (30 s), which is the lease's point, not
	// what this test is about.
	require.Eventually(t, func() bool {
		rcv.mu.Lock()
		refused := rcv.refused
		rcv.mu.Unlock()
		var waiting int
		return refused >= 2 && conn.QueryRow(t.Context(),
			`SELECT count(*) FROM alert_outbox WHERE state = 'pending' AND claimed_by IS NULL`).Scan(&waiting) == nil && waiting == 1
	}, waitLong, pollEvery, "the 50%% delivery tried while the receiver is down")
	a.kill(t)
	a = startGatewayProcess(t, caddy, "a2", dirA, option(dirA))
	rcv.down.Store(false)
	spend(b)
	spend(a) // 100%
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, rcv.of("budget"), 2)
	}, waitLong, pollEvery, "both thresholds delivered")

	// Once every row is sent, no worker claims it again: what the receiver has is all.
	require.Eventually(t, func() bool {
		var pending int
		return conn.QueryRow(t.Context(), `SELECT count(*) FROM alert_outbox WHERE state <> 'sent'`).Scan(&pending) == nil && pending == 0
	}, waitLong, pollEvery)
	var rows int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM alert_outbox`).Scan(&rows))
	assert.Equal(t, 2, rows, "one row per threshold, whichever gateway noticed it")
	var thresholds []int64
	for _, d := range rcv.of("budget") {
		thresholds = append(thresholds, d.Get("budget.threshold_percent").Int())
	}
	// The 50% delivery waits out its back-off, so it may arrive after the 100% one.
	assert.ElementsMatch(t, []int64{50, 100}, thresholds)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	assert.Zero(t, rcv.bad)
	assert.Len(t, rcv.ids, 2)
	for id, n := range rcv.ids {
		assert.Equal(t, 1, n, "delivery %s sent once", id)
	}
}

// TestAlertsAreNotSentOnARedirect: a receiver that answers 307 to another host does not
// get the delivery sent there. The other host receives nothing (not the signed body,
// nor the webhook's URL with its path token as a Referer), and the console lists the
// delivery as not sent, its last error the 307.
func TestAlertsAreNotSentOnARedirect(t *testing.T) {
	other := newWebhookReceiver(t)
	var othersTries atomic.Int32
	otherHandler := other.Config.Handler
	other.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		othersTries.Add(1)
		otherHandler.ServeHTTP(w, r)
	})
	tried := make(chan struct{}, 100)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
		select {
		case tried <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(redirecting.Close)
	up := newUpstream(t)
	const alertKey = "sk-redirect-key-0123456789abcdef"
	options := other.block(redirecting.URL) + fmt.Sprintf("\t\tkey alerted %s {\n\t\t\tbudget 0.04/month\n\t\t}\n", alertKey)
	g := startGatewayWith(t, up, pricedChat("http://"+up.hostport(), upstreamPrefix+"-c"), options)

	body := `{"model":"priced-chat","max_tokens":10,"messages":[{"role":"user","content":"Hello"}]}`
	for i := range 2 { // 50% of the budget
		r := g.call(t, "POST", "/v1/chat/completions", body, "Authorization", "Bearer "+alertKey)
		require.Equal(t, 200, r.Status, "request %d: %s", i, r.Body)
	}
	select {
	case <-tried:
	case <-time.After(waitShort):
		t.Fatal("the configured receiver got no try")
	}

	var view struct {
		Deliveries []struct {
			Kind      string `json:"kind"`
			State     string `json:"state"`
			Attempts  int    `json:"attempts"`
			LastError string `json:"last_error"`
		} `json:"deliveries"`
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(g.admin + "/switchyard/alerts")
		if !assert.NoError(c, err) {
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if assert.NoError(c, json.Unmarshal(raw, &view)) && assert.Len(c, view.Deliveries, 1) {
			assert.GreaterOrEqual(c, view.Deliveries[0].Attempts, 1, "the try is recorded")
		}
	}, waitShort, pollEvery)
	d := view.Deliveries[0]
	assert.Equal(t, "budget", d.Kind)
	assert.NotEqual(t, "sent", d.State, "a 3xx is a failed try")
	assert.Contains(t, d.LastError, "status 307")
	assert.NotContains(t, d.LastError, "T0KEN")
	assert.Zero(t, othersTries.Load(), "the redirect's target received nothing")
}
