package integration

import (
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// generating is an upstream that records every generation it is asked for, by upstream
// model, and answers it as the model's name says: "-slow" takes the whole body and then
// answers nothing until the test ends (a generation longer than the header timeout),
// "-down" answers 500, anything else is served by the simulator. Probes (GET …/models)
// pass and are not recorded.
type generating struct {
	*httptest.Server
	mu      sync.Mutex
	started map[string]int
	release chan struct{}
}

func newGenerating(t *testing.T) *generating {
	g := &generating{started: map[string]int{}, release: make(chan struct{})}
	sim := simulator.New(simulator.Config{APIKey: upstreamCred})
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		model := gjson.GetBytes(body, "model").Str
		g.mu.Lock()
		g.started[model]++
		g.mu.Unlock()
		switch {
		case strings.HasSuffix(model, "-slow"):
			select {
			case <-g.release:
			case <-r.Context().Done():
			}
		case strings.HasSuffix(model, "-down"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"down","type":"server_error","param":null,"code":null}}`)
		default:
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			sim.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(g.Close)
	t.Cleanup(func() { close(g.release) }) // runs first: the handlers end before Close waits for them
	return g
}

func (g *generating) count(model string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started[model]
}

// A non-streamed answer that outlasts the candidate's header_timeout, once the upstream
// has the whole request, starts exactly one generation: no retry, no failover (unless the
// model opts in), a 504 in the family's envelope naming the timeout, the candidate's
// health untouched, and the attempt billed in the ledger as its input, estimated. And
// `retries 10` never makes more attempts on one candidate than its failure_threshold.
func TestATimeoutAfterTheWholeBodyStartsOneGeneration(t *testing.T) {
	up, backup := newGenerating(t), newUpstream(t)
	a, b := up.URL+"/v1", "http://"+backup.hostport()+"/v1"
	slow := []string{"header_timeout 300ms", "retries 3"}
	models := "" +
		"\t\tmodel long {\n\t\t\trequest_timeout 1m\n\t\t\tprice input 2 output 8\n" +
		candidate("slow", "family_a", a, upstreamPrefix+"-long-slow", slow...) +
		candidate("spare", "family_a", b, upstreamPrefix+"-spare", "priority 1") + "\t\t}\n" +
		"\t\tmodel long-b {\n\t\t\trequest_timeout 1m\n" +
		candidate("slow", "family_b", up.URL, upstreamPrefix+"-longb-slow", slow...) + "\t\t}\n" +
		"\t\tmodel long-fo {\n\t\t\trequest_timeout 1m\n\t\t\tfailover_after_timeout\n" +
		candidate("slow", "family_a", a, upstreamPrefix+"-fo-slow", slow...) +
		candidate("spare", "family_a", b, upstreamPrefix+"-fo-spare", "priority 1") + "\t\t}\n" +
		"\t\tmodel flaky {\n" +
		candidate("down", "family_a", a, upstreamPrefix+"-flaky-down", "retries 10") + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	health := "\t\thealth {\n\t\t\tfailure_threshold 3\n\t\t\tprobe_interval 10ms\n\t\t\tprobe_max_interval 10ms\n\t\t}\n" +
		"\t\tretry {\n\t\t\tbackoff 30ms 30ms\n\t\t}\n"
	g := startGatewayWith(t, backup, models, "\t\tstore sqlite "+dbPath+"\n"+health)
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	prompt := strings.Repeat("tell me a long story ", 40)
	r := g.call(t, "POST", "/v1/chat/completions", `{"model":"long","messages":[{"role":"user","content":"`+prompt+`"}]}`)
	assert.Equal(t, 1, up.count(upstreamPrefix+"-long-slow"), "one generation, not one per retry")
	assert.Empty(t, backup.seenFor(upstreamPrefix+"-spare"), "no failover by default")
	e := familyA(t, r, http.StatusGatewayTimeout, "server_error")
	assert.Equal(t, "upstream_timeout", e.Get("code").Str)
	assert.Contains(t, e.Get("message").Str, "header_timeout (300ms)")
	assert.Equal(t, "false", r.Header.Get("X-Should-Retry"), "SDKs are told not to start the work again")
	g.assertNoLeak(t, r)
	row := g.healthRow(t, "long", "slow")
	assert.Equal(t, "closed", row.Get("state").Str, "%s", row.Raw)
	assert.Zero(t, row.Get("recent_failures").Int(), "a long generation is not the candidate's failure: %s", row.Raw)
	assert.Equal(t, 1.0, row.Get("success_rate").Float(), "%s", row.Raw)

	rec := record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, "slow", rec.Candidate, "billed to the candidate that had the work")
	assert.Equal(t, http.StatusGatewayTimeout, rec.Status)
	assert.Equal(t, 1, rec.Attempts)
	assert.Positive(t, rec.Input, "the input the upstream was given is billed")
	assert.Zero(t, rec.Output)
	assert.True(t, rec.Estimated, "flagged estimated")
	assert.Equal(t, (rec.Input*2_000_000+500_000)/1_000_000, rec.Cost, "at the model's input price")

	// Family B: the same, in its own envelope.
	r = g.call(t, "POST", "/v1/messages", `{"model":"long-b","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`,
		"anthropic-version", "2023-06-01")
	assert.Equal(t, 1, up.count(upstreamPrefix+"-longb-slow"))
	eb := familyB(t, r, http.StatusGatewayTimeout, "timeout_error")
	assert.Contains(t, eb.Get("message").Str, "header_timeout")

	// Opted in: it fails over once, and still does not retry the slow one.
	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"long-fo","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, 1, up.count(upstreamPrefix+"-fo-slow"))
	assert.Len(t, backup.seenFor(upstreamPrefix+"-fo-spare"), 1)
	assert.Zero(t, g.healthRow(t, "long-fo", "slow").Get("recent_failures").Int())
	rec = record(t, db, r.Header.Get("X-Switchyard-Request-Id"))
	assert.Equal(t, "spare", rec.Candidate)
	assert.True(t, rec.Estimated, "the abandoned attempt's input is billed on top, estimated")

	// retries 10 on a failing candidate whose probes pass: at most failure_threshold.
	r = g.call(t, "POST", "/v1/chat/completions", `{"model":"flaky","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "%s", r.Body)
	assert.LessOrEqual(t, up.count(upstreamPrefix+"-flaky-down"), 3, "no more attempts than failure_threshold")
}
