package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// switchable is an upstream that can be made to fail (500) and recover at will. It
// answers the gateway's background health probes (GET …/models) itself, failing them
// too while it fails, and counts them apart from the requests of clients.
type switchable struct {
	*httptest.Server
	failing atomic.Bool
	hits    atomic.Int64 // client requests
	probes  atomic.Int64 // health probes
}

func newSwitchable(t *testing.T) *switchable {
	s := &switchable{}
	sim := simulator.New(simulator.Config{APIKey: upstreamCred})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			s.probes.Add(1)
			w.Header().Set("Content-Type", "application/json")
			if s.failing.Load() {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":{"message":"down","type":"server_error","param":null,"code":null}}`)
				return
			}
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		s.hits.Add(1)
		if s.failing.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"down","type":"server_error","param":null,"code":null}}`)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// healthRow reads one candidate's live health from the admin API.
func (g *gateway) healthRow(t *testing.T, model, cand string) gjson.Result {
	t.Helper()
	resp, err := http.Get(g.admin + "/switchyard/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "%s", b)
	for _, row := range gjson.GetBytes(b, "candidates").Array() {
		if row.Get("model").Str == model && row.Get("candidate").Str == cand {
			return row
		}
	}
	t.Fatalf("no health row for %s/%s in %s", model, cand, b)
	return gjson.Result{}
}

const pairHealth = "\t\thealth {\n\t\t\tfailure_threshold 3\n\t\t\twindow 30s\n\t\t\tcooldown 1s\n\t\t\tmax_cooldown 4s\n\t\t}\n"

// pair declares a model with a switchable primary candidate and a healthy backup.
func pair(bad *switchable, good *upstream) string {
	return "\t\tmodel pair {\n" +
		candidate("flaky", "family_a", bad.URL+"/v1", "up-flaky") +
		candidate("steady", "family_a", "http://"+good.hostport()+"/v1", "up-steady", "priority 1") + "\t\t}\n"
}

// circuitHealth opens a circuit after three failures for three seconds, at every trip:
// long enough that the hundred requests below all fall inside one cooldown, even under
// the race detector on a busy machine (they take well under a second). Background probes
// are off: this is recovery by live requests (recovery_test.go has the probes).
const circuitHealth = "\t\thealth {\n\t\t\tfailure_threshold 3\n\t\t\twindow 30s\n\t\t\tcooldown 3s\n\t\t\tmax_cooldown 3s\n\t\t\tprobe off\n\t\t}\n"

func TestCircuitOpensAndRecovers(t *testing.T) {
	bad, good := newSwitchable(t), newUpstream(t)
	g := startGatewayWith(t, good, pair(bad, good), circuitHealth)
	bad.failing.Store(true)

	// Until the circuit opens, requests that land on the failing candidate fail over.
	for i := 0; i < 20; i++ {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"pair","messages":[]}`)
		require.Equal(t, 200, r.Status, "failover hides the failing candidate: %s", r.Body)
	}
	opened := g.healthRow(t, "pair", "flaky")
	require.Equal(t, "open", opened.Get("state").Str)
	trips := opened.Get("consecutive_trips").Int()

	// With the circuit open, the next 100 requests go straight to the healthy candidate.
	hitsBefore := bad.hits.Load()
	began := time.Now()
	for i := 0; i < 100; i++ {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"pair","messages":[]}`)
		require.Equal(t, 200, r.Status)
	}
	took := time.Since(began)
	straight := 100 - int(bad.hits.Load()-hitsBefore)
	t.Logf("after the circuit opened: %d of 100 requests went straight to the healthy candidate, 0 failed (%v)", straight, took.Round(time.Millisecond))
	still := g.healthRow(t, "pair", "flaky")
	require.Equal(t, "open", still.Get("state").Str, "the hundred requests took %v, longer than the cooldown: nothing was measured", took)
	require.Equal(t, trips, still.Get("consecutive_trips").Int(), "no probe happened during the hundred")
	assert.Equal(t, 100, straight)

	// Recovered: it is not probed before its cooldown ends, and is probed (and takes
	// traffic again) by the first request after it ends.
	bad.failing.Store(false)
	remaining := time.Duration(g.healthRow(t, "pair", "flaky").Get("cooldown_remaining_s").Float() * float64(time.Second))
	recovered := time.Now()
	hitsBefore = bad.hits.Load()
	require.Eventually(t, func() bool {
		r, err := g.send("POST", "/v1/chat/completions", `{"model":"pair","messages":[]}`)
		return err == nil && r.Status == 200 && bad.hits.Load() > hitsBefore
	}, 10*time.Second, pollEvery, "the recovered candidate was never probed")
	back := time.Since(recovered)
	t.Logf("recovered candidate took traffic again after %v; its cooldown had %v left", back.Round(time.Millisecond), remaining.Round(time.Millisecond))
	// cooldown_remaining_s is rounded to 10 ms; a request is sent every 20 ms, and under
	// the race detector one takes up to a few tens.
	assert.GreaterOrEqual(t, back, remaining-50*time.Millisecond, "probed before its cooldown ended")
	assert.Less(t, back, remaining+time.Second, "not probed once its cooldown ended")
	assert.Equal(t, "closed", g.healthRow(t, "pair", "flaky").Get("state").Str, "a successful probe closes the circuit")
}

func TestRetryAfterPutsACandidateInCooldown(t *testing.T) {
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel limited {\n" +
		candidate("busy", "family_a", a, "up+rate-limit") +
		candidate("spare", "family_a", a, "up-spare", "priority 1") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"limited","messages":[]}`)
	require.Equal(t, 200, r.Status, "the spare serves while the busy one asks for a pause")
	row := g.healthRow(t, "limited", "busy")
	assert.Equal(t, "open", row.Get("state").Str, "one 429 with retry-after opens it at once")
	assert.InDelta(t, 2, row.Get("cooldown_remaining_s").Float(), 0.5, "for as long as the upstream asked")

	before := up.count()
	for i := 0; i < 5; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", `{"model":"limited","messages":[]}`).Status)
	}
	assert.Equal(t, before+5, up.count(), "during the cooldown only the spare is called")
	for _, req := range up.requests[before:] {
		assert.Contains(t, string(req.Body), "up-spare")
	}
}

func TestFirstByteAndIdleLimits(t *testing.T) {
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	b := "http://" + up.hostport()
	// The upstream had the whole request when its limit ran out: failing over then is the
	// operator's choice (failover_after_timeout), and the candidate's health does not move.
	models := "\t\tmodel slow-first {\n\t\t\tfailover_after_timeout\n" +
		candidate("slow", "family_a", a, "up+slow-headers-3s", "first_byte_timeout 300ms") +
		candidate("quick", "family_a", a, "up-quick", "priority 1") + "\t\t}\n" +
		"\t\tmodel stalls {\n" +
		candidate("stall", "family_b", b, "up+stall", "idle_timeout 400ms") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	const slowHeaders = 3 * time.Second // the slow candidate's upstream waits this long
	for _, stream := range []string{"false", "true"} {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"slow-first","stream":`+stream+`,"messages":[]}`)
		require.Equal(t, 200, r.Status)
		assert.Contains(t, string(r.Body), `"model":"slow-first"`)
		t.Logf("stream %s: answered by the quick candidate after %v", stream, r.Elapsed.Round(time.Millisecond))
		assert.Less(t, r.Elapsed, slowHeaders, "moved on after the first-byte limit, before the slow upstream answered")
	}
	assert.Zero(t, g.healthRow(t, "slow-first", "slow").Get("recent_failures").Int(), "a timeout after the whole body is not held against it")

	// A stream that stalls after its first event ends with a native error: the upstream
	// never sends again, so without the idle limit the call would run into the client's
	// timeout and fail.
	r := g.bounded(t, "POST", "/v1/messages", `{"model":"stalls","max_tokens":64,"stream":true,"messages":[]}`, "anthropic-version", v1)
	require.Equal(t, 200, r.Status)
	events := parseSSE(t, r.Body)
	require.GreaterOrEqual(t, len(events), 2)
	assert.Equal(t, "message_start", events[0].Name)
	assert.Equal(t, "error", events[len(events)-1].Name)
	g.assertNoLeak(t, &result{Body: r.Body, Header: r.Header})
}

func TestConversationAffinity(t *testing.T) {
	one, two := newSwitchable(t), newSwitchable(t)
	up := newUpstream(t)
	models := "\t\tmodel duo {\n" +
		candidate("one", "family_b", one.URL, "up-one") +
		candidate("two", "family_b", two.URL, "up-two") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")
	body := `{"model":"duo","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`

	// Each conversation stays on one candidate.
	for _, session := range []string{"sess-a", "sess-b", "sess-c", "sess-d"} {
		o, w := one.hits.Load(), two.hits.Load()
		for i := 0; i < 6; i++ {
			r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1, "X-Claude-Code-Session-Id", session)
			require.Equal(t, 200, r.Status)
		}
		dOne, dTwo := one.hits.Load()-o, two.hits.Load()-w
		assert.True(t, (dOne == 6 && dTwo == 0) || (dOne == 0 && dTwo == 6), "session %s went to both (%d/%d)", session, dOne, dTwo)
	}

	// Without an identity, requests spread over both.
	o, w := one.hits.Load(), two.hits.Load()
	for i := 0; i < 40; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1).Status)
	}
	assert.Positive(t, one.hits.Load()-o)
	assert.Positive(t, two.hits.Load()-w)

	// When the conversation's candidate fails, the conversation moves and stays moved.
	// Which candidate holds it is read from this conversation's own requests.
	moving := func() (dOne, dTwo int64) {
		t.Helper()
		o, w := one.hits.Load(), two.hits.Load()
		r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1, "X-Claude-Code-Session-Id", "sess-move")
		require.Equal(t, 200, r.Status, "%s", r.Body)
		return one.hits.Load() - o, two.hits.Load() - w
	}
	dOne, dTwo := moving()
	require.True(t, dOne+dTwo == 1, "one request, one upstream call (%d/%d)", dOne, dTwo)
	holder, other := one, two
	if dTwo == 1 {
		holder, other = two, one
	}
	holder.failing.Store(true)
	h, o := holder.hits.Load(), other.hits.Load()
	r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1, "X-Claude-Code-Session-Id", "sess-move")
	require.Equal(t, 200, r.Status, "the failure is hidden by failover: %s", r.Body)
	require.Equal(t, h+1, holder.hits.Load(), "the conversation's candidate was tried first")
	require.Equal(t, o+1, other.hits.Load(), "and the other one served it")
	holder.failing.Store(false)
	h, o = holder.hits.Load(), other.hits.Load()
	for i := 0; i < 4; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/messages", body, "anthropic-version", v1, "X-Claude-Code-Session-Id", "sess-move").Status)
	}
	assert.Equal(t, h, holder.hits.Load(), "the moved conversation does not go back, though its first candidate has recovered")
	assert.Equal(t, o+4, other.hits.Load(), "the moved conversation stays where it now is")

	// Codex's prompt_cache_key is a conversation identity too.
	o, w = one.hits.Load(), two.hits.Load()
	codex := `{"model":"duo","max_tokens":64,"messages":[],"prompt_cache_key":"thread-42"}`
	for i := 0; i < 12; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/messages", codex, "anthropic-version", v1).Status)
	}
	dOne, dTwo = one.hits.Load()-o, two.hits.Load()-w
	assert.True(t, dOne == 0 || dTwo == 0, "prompt_cache_key keeps one candidate (%d/%d)", dOne, dTwo)
}

// A client that leaves after the upstream has its whole body no longer cancels the
// upstream request (the work is started and billed upstream, so its answer is awaited to
// be billed), but the request outlives its client only within the candidate's own limits.
func TestAnUpstreamRequestOutlivesItsClientOnlyWithinItsLimits(t *testing.T) {
	cancelled := make(chan time.Duration, 1)
	started := make(chan time.Time, 1)
	hold := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the connection closing.
		_, _ = io.ReadAll(r.Body)
		start := time.Now()
		started <- start
		<-r.Context().Done()
		cancelled <- time.Since(start)
	}))
	t.Cleanup(hold.Close)
	up := newUpstream(t)
	const firstByte = 500 * time.Millisecond
	g := startGatewayWith(t, up, "\t\tmodel held {\n"+candidate("hold", "family_a", hold.URL+"/v1", "up-hold", "first_byte_timeout 500ms")+"\t\t}\n", "")

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.base+"/v1/chat/completions", strings.NewReader(`{"model":"held","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	gone := time.Now()
	cancel()
	// The upstream holds the request until it is cancelled: without the first-byte limit it
	// would outlive the test. How late past the limit it comes is logged, not asserted (a
	// figure of wall-clock time under the race detector on a shared machine).
	select {
	case held := <-cancelled:
		t.Logf("upstream request cancelled %v after the client went away", time.Since(gone).Round(time.Millisecond))
		// The gateway's first-byte clock starts before the upstream has read the body, so
		// the upstream sees a little less than the limit; a cancel with the client would
		// come within milliseconds.
		assert.GreaterOrEqual(t, held, firstByte-100*time.Millisecond, "the upstream had the whole body: its answer was awaited, not cancelled with the client")
	case <-time.After(waitShort):
		t.Fatal("the upstream request outlived its limits")
	}
	// The candidate is not blamed for the client leaving.
	assert.Equal(t, "closed", g.healthRow(t, "held", "hold").Get("state").Str)
	assert.Equal(t, int64(0), g.healthRow(t, "held", "hold").Get("recent_failures").Int())
}

func TestHealthSurvivesReload(t *testing.T) {
	bad, good := newSwitchable(t), newUpstream(t)
	models := pair(bad, good)
	g := startGatewayWith(t, good, models, pairHealth)
	bad.failing.Store(true)
	for i := 0; i < 12; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", `{"model":"pair","messages":[]}`).Status)
	}
	require.Equal(t, "open", g.healthRow(t, "pair", "flaky").Get("state").Str)

	// Reload with a further model: the flaky candidate is unchanged, its health is kept.
	extra := "\t\tmodel extra {\n" + candidate("x", "family_a", "http://"+good.hostport()+"/v1", "up-x") + "\t\t}\n"
	g.reload(t, strings.Replace(g.caddyfile, models, models+extra, 1))
	require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", `{"model":"extra","messages":[]}`).Status, "the new config is live")
	assert.Equal(t, "open", g.healthRow(t, "pair", "flaky").Get("state").Str, "health survived the reload")
	hits := bad.hits.Load()
	for i := 0; i < 10; i++ {
		require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", `{"model":"pair","messages":[]}`).Status)
	}
	assert.Equal(t, hits, bad.hits.Load(), "the open circuit is still respected")
}

func TestReloadDropsNoInFlightStream(t *testing.T) {
	up := newUpstream(t)
	models := "\t\tmodel dripping {\n" + candidate("d", "family_b", "http://"+up.hostport(), "up+drip-150ms") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	const streams = 6
	var wg sync.WaitGroup
	var underWay sync.WaitGroup // each stream's first event has arrived
	var finished atomic.Int64   // streams wholly read
	results := make([][]sseEvent, streams)
	errs := make([]error, streams)
	underWay.Add(streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			first := sync.OnceFunc(underWay.Done)
			defer first() // a stream that fails before its first event must not hang the test
			req, _ := http.NewRequest("POST", g.base+"/v1/messages", strings.NewReader(`{"model":"dripping","max_tokens":64,"stream":true,"messages":[]}`))
			req.Header.Set("x-api-key", testKey)
			req.Header.Set("anthropic-version", v1)
			resp, err := boundedClient.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			var b []byte
			buf := make([]byte, 4096)
			for {
				n, err := resp.Body.Read(buf)
				b = append(b, buf[:n]...)
				if strings.Contains(string(b), "event: message_start") {
					first()
				}
				if err != nil {
					if err != io.EOF {
						errs[i] = err
					}
					break
				}
			}
			finished.Add(1)
			results[i] = parseSSE(t, b)
		}(i)
	}
	underWay.Wait()
	require.Zero(t, finished.Load(), "a stream ended before the reload: it would not show what a reload does to one")
	g.reload(t, strings.Replace(g.caddyfile, "model dripping {", "model dripping {\n\t\t\tdisplay_name Reloaded", 1))
	reloadedWhileOpen := streams - int(finished.Load())
	wg.Wait()
	t.Logf("%d of %d streams were under way when the reload finished", reloadedWhileOpen, streams)
	assert.Positive(t, reloadedWhileOpen, "every stream had ended before the reload finished")
	for i, events := range results {
		require.NoError(t, errs[i], "stream %d", i)
		require.NotEmpty(t, events, "stream %d got nothing", i)
		assert.Equal(t, "message_stop", events[len(events)-1].Name, "stream %d was cut by the reload", i)
	}
	r := g.call(t, "GET", "/v1/models/dripping", "")
	assert.Equal(t, "Reloaded", gjson.GetBytes(r.Body, "display_name").Str)
}

// Parallel requests while candidates flip between healthy and failing: every answer is
// a success or a clean 503, and the race detector (make test) sees no data race.
func TestConcurrentFlipping(t *testing.T) {
	bad, other := newSwitchable(t), newSwitchable(t)
	up := newUpstream(t)
	models := "\t\tmodel flip {\n" +
		candidate("x", "family_a", bad.URL+"/v1", "up-x") +
		candidate("y", "family_a", other.URL+"/v1", "up-y") + "\t\t}\n"
	// Probes as quick as the cooldowns, so that they too run among the requests.
	g := startGatewayWith(t, up, models, "\t\thealth {\n\t\t\tfailure_threshold 2\n\t\t\tcooldown 50ms\n\t\t\tmax_cooldown 200ms\n"+
		"\t\t\tprobe_interval 50ms\n\t\t\tprobe_max_interval 200ms\n\t\t}\n")

	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
				bad.failing.Store(i%2 == 0)
				other.failing.Store(i%3 == 0)
			}
		}
	}()
	var ok, unavailable, other5xx atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				stream := "false"
				if i%2 == 1 {
					stream = "true"
				}
				req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(`{"model":"flip","stream":`+stream+`,"messages":[]}`))
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					other5xx.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200 && strings.Contains(string(b), `"model":"flip"`):
					ok.Add(1)
				case resp.StatusCode == 503 && gjson.GetBytes(b, "error.code").Str == "routing_no_available_channel":
					unavailable.Add(1)
				default:
					other5xx.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	t.Logf("320 requests while flipping: %d served, %d clean 503; %d background probes", ok.Load(), unavailable.Load(), bad.probes.Load()+other.probes.Load())
	assert.Zero(t, other5xx.Load())
	assert.Positive(t, ok.Load())
}

// scrapeMetrics reads Caddy's /metrics: each series ("name{labels}", as written) and its
// value.
func (g *gateway) scrapeMetrics(t *testing.T) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "a metrics line: %s", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "a metrics line: %s", line)
		out[line[:i]] = v
	}
	return out, string(b)
}

// The gateway's metrics count this test's own request, whatever earlier tests of the
// process counted: the counters are process-wide, so each is read before and after.
func TestMetricsOnCaddysEndpoint(t *testing.T) {
	g := startGateway(t)
	before, _ := g.scrapeMetrics(t)
	limited := `switchyard_circuit_state{candidate="limited",model="failover-a"}`
	assert.Equal(t, 0.0, before[limited], "a new gateway's circuits are closed")

	// Streamed, so that the in-band error of the fourth candidate is one.
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"failover-a","stream":true,"messages":[]}`)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	after, text := g.scrapeMetrics(t)

	for series, want := range map[string]float64{
		`switchyard_requests_total{candidate="good",model="failover-a",outcome="success",protocol="family_a"}`: 1,
		`switchyard_failovers_total{candidate="refused",model="failover-a",reason="connect"}`:                  1,
		`switchyard_failovers_total{candidate="broken",model="failover-a",reason="status"}`:                    1,
		`switchyard_failovers_total{candidate="limited",model="failover-a",reason="rate_limit"}`:               1,
		`switchyard_failovers_total{candidate="inband",model="failover-a",reason="inband_error"}`:              1,
		`switchyard_attempts_per_request_count{model="failover-a",protocol="family_a"}`:                        1,
		`switchyard_attempts_per_request_sum{model="failover-a",protocol="family_a"}`:                          5,
		`switchyard_attempts_per_request_bucket{model="failover-a",protocol="family_a",le="4"}`:                0,
		`switchyard_attempts_per_request_bucket{model="failover-a",protocol="family_a",le="6"}`:                1,
		`switchyard_time_to_first_byte_seconds_count{candidate="good",model="failover-a"}`:                     1,
	} {
		_, present := after[series]
		assert.True(t, present, "the metrics lack %s", series)
		assert.Equal(t, want, after[series]-before[series], "%s: by how much this request moved it", series)
	}
	assert.Equal(t, 2.0, after[limited], "one 429 with retry-after opens the circuit")
	g.up.assertNoLeakIn(t, "the metrics", text)

	var health struct {
		Candidates []map[string]any `json:"candidates"`
	}
	resp, err := http.Get(g.admin + "/switchyard/health")
	require.NoError(t, err)
	hb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, json.Unmarshal(hb, &health))
	assert.NotEmpty(t, health.Candidates)
	g.up.assertNoLeakIn(t, "the health API's answer", string(hb))
}
