package integration

import (
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
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// pausing is an upstream that answers clients 429 with whatever Retry-After it is given,
// or serves them (the simulator) when it is given none, and records the time of each
// background probe (GET …/models), which it always passes.
type pausing struct {
	*httptest.Server
	mu         sync.Mutex
	retryAfter string // "": serve
	probes     []time.Time
	served     atomic.Int64 // client requests answered 200
}

func newPausing(t *testing.T) *pausing {
	p := &pausing{}
	sim := simulator.New(simulator.Config{APIKey: upstreamCred})
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		retryAfter := p.retryAfter
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			p.probes = append(p.probes, time.Now())
			p.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		p.mu.Unlock()
		if retryAfter != "" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}`)
			return
		}
		p.served.Add(1)
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *pausing) askFor(retryAfter string) {
	p.mu.Lock()
	p.retryAfter = retryAfter
	p.mu.Unlock()
}

// probesSince are the probes that came at or after t.
func (p *pausing) probesSince(t time.Time) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Time
	for _, at := range p.probes {
		if !at.Before(t) {
			out = append(out, at)
		}
	}
	return out
}

// pauseHealth caps every pause at 2 s (max_cooldown); probes are on, as by default.
const pauseHealth = "\t\thealth {\n\t\t\tcooldown 1s\n\t\t\tmax_cooldown 2s\n\t\t}\n"

const pauseMaxCooldown = 2 * time.Second

func pausedModel(p *pausing, backup *upstream) string {
	return "\t\tmodel paused {\n" +
		candidate("primary", "family_a", p.URL+"/v1", upstreamPrefix+"-primary") +
		candidate("backup", "family_a", "http://"+backup.hostport()+"/v1", upstreamPrefix+"-backup", "priority 1") + "\t\t}\n"
}

const pausedRequest = `{"model":"paused","messages":[{"role":"user","content":"hi"}]}`

// A 429 whose Retry-After asks for decades (a huge number, a date in 2100, a number past
// what a duration can hold) pauses the candidate for max_cooldown at most, never for the
// decades and never not at all; when the pause ends a background probe brings it back.
// An operator's reset through the admin API brings it back at once, and the audit trail
// records who did it.
func TestAPauseAskedForIsBoundedProbedAtItsEndAndResettable(t *testing.T) {
	primary, backup := newPausing(t), newUpstream(t)
	g := startGatewayWith(t, backup, pausedModel(primary, backup), pauseHealth)

	for _, asked := range []string{"999999999", "Fri, 01 Jan 2100 00:00:00 GMT", "99999999999999999999"} {
		t.Run(asked, func(t *testing.T) {
			primary.askFor(asked)
			began := time.Now()
			r := g.call(t, "POST", "/v1/chat/completions", pausedRequest)
			require.Equal(t, http.StatusOK, r.Status, "the backup serves: %s", r.Body)

			row := g.healthRow(t, "paused", "primary")
			require.Equal(t, "open", row.Get("state").Str, "one 429 with Retry-After pauses it: %s", row.Raw)
			assert.True(t, row.Get("paused").Bool(), "%s", row.Raw)
			left := row.Get("cooldown_remaining_s").Float()
			assert.Greater(t, left, 0.0, "%s", row.Raw)
			assert.LessOrEqual(t, left, pauseMaxCooldown.Seconds(), "the pause is at most max_cooldown: %s", row.Raw)

			// The upstream is fine again; the pause still holds until it ends, then a
			// probe (not a client's request) brings the candidate back.
			primary.askFor("")
			servedBefore := primary.served.Load()
			r = g.call(t, "POST", "/v1/chat/completions", pausedRequest)
			require.Equal(t, http.StatusOK, r.Status)
			assert.Equal(t, servedBefore, primary.served.Load(), "no client request reaches a paused candidate")

			require.Eventually(t, func() bool {
				return g.healthRow(t, "paused", "primary").Get("state").Str == "closed"
			}, pauseMaxCooldown+waitShort, pollEvery, "the candidate came back after its pause")
			probes := primary.probesSince(began)
			require.NotEmpty(t, probes, "a probe brought it back")
			assert.GreaterOrEqual(t, probes[0].Sub(began), pauseMaxCooldown-100*time.Millisecond,
				"not probed before the pause ended (first probe %v after the 429)", probes[0].Sub(began))
			r = g.call(t, "POST", "/v1/chat/completions", pausedRequest)
			require.Equal(t, http.StatusOK, r.Status)
			assert.Equal(t, servedBefore+1, primary.served.Load(), "the primary serves again")
		})
	}

	t.Run("reset", func(t *testing.T) {
		primary.askFor("999999999")
		require.Equal(t, http.StatusOK, g.call(t, "POST", "/v1/chat/completions", pausedRequest).Status)
		require.True(t, g.healthRow(t, "paused", "primary").Get("paused").Bool())
		primary.askFor("")

		reset := adminPost(t, g, "/switchyard/health/paused/primary/reset")
		require.Equal(t, http.StatusOK, reset.Status, "%s", reset.Body)
		assert.Equal(t, "open", gjson.GetBytes(reset.Body, "was").Str, "%s", reset.Body)
		assert.Equal(t, "closed", gjson.GetBytes(reset.Body, "candidate.state").Str, "%s", reset.Body)
		row := g.healthRow(t, "paused", "primary")
		assert.Equal(t, "closed", row.Get("state").Str, "%s", row.Raw)
		assert.False(t, row.Get("paused").Bool(), "%s", row.Raw)

		servedBefore := primary.served.Load()
		require.Equal(t, http.StatusOK, g.call(t, "POST", "/v1/chat/completions", pausedRequest).Status)
		assert.Equal(t, servedBefore+1, primary.served.Load(), "served by the primary at once, not after its pause")

		audit := adminGet(t, g, "/switchyard/audit?limit=5")
		entry := gjson.GetBytes(audit, "entries.0")
		assert.Equal(t, "candidate.reset", entry.Get("action").Str, "%s", audit)
		assert.Equal(t, "admin API", entry.Get("actor").Str, "%s", audit)
		assert.Equal(t, "paused/primary", entry.Get("target").Str, "%s", audit)

		// A candidate the model does not have is refused, and nothing is recorded.
		missing := adminPost(t, g, "/switchyard/health/paused/nobody/reset")
		assert.Equal(t, http.StatusNotFound, missing.Status, "%s", missing.Body)
		assert.Equal(t, entry.Get("id").Int(), gjson.GetBytes(adminGet(t, g, "/switchyard/audit?limit=1"), "entries.0.id").Int())
	})
}

// The console resets a candidate's health with its change header and records the
// operator's login as who did it; without the header it changes nothing.
func TestConsoleResetsACandidatesHealth(t *testing.T) {
	g, _ := startConsoleGateway(t, newUpstream(t))
	login := []string{"Authorization", basicAuth(consoleUser, consolePassword)}
	withHeader := append([]string{"X-Switchyard-Console", "1"}, login...)

	res := g.call(t, "POST", "/console/api/health/chat-a/main/reset", `{}`, login...)
	assert.Equal(t, http.StatusForbidden, res.Status, "%s", res.Body)
	res = g.call(t, "GET", "/console/api/audit", "", login...)
	assert.Empty(t, gjson.GetBytes(res.Body, "entries").Array(), "%s", res.Body)

	res = g.call(t, "POST", "/console/api/health/chat-a/main/reset", `{}`, withHeader...)
	require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
	res = g.call(t, "GET", "/console/api/audit", "", login...)
	entry := gjson.GetBytes(res.Body, "entries.0")
	assert.Equal(t, "candidate.reset", entry.Get("action").Str, "%s", res.Body)
	assert.Equal(t, "break-glass "+consoleUser+" from 127.0.0.1", entry.Get("actor").Str, "%s", res.Body)
	assert.Equal(t, "chat-a/main", entry.Get("target").Str, "%s", res.Body)
}

func adminPost(t *testing.T, g *gateway, path string) *result {
	t.Helper()
	resp, err := http.Post(g.admin+path, "application/json", nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return &result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func adminGet(t *testing.T, g *gateway, path string) []byte {
	t.Helper()
	resp, err := http.Get(g.admin + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return b
}
