package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/metering"
)

// requestLogGateway runs a gateway with a store and: a model whose first candidate
// fails before the second serves, a model whose one candidate fails once and is tried
// again, a model no candidate answers, and a key allowed one request a minute.
func requestLogGateway(t *testing.T) *gateway {
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel flaky {\n" +
		candidate("broken", "family_a", a, upstreamPrefix+"-x+fail-503", "priority 1") +
		candidate("good", "family_a", a, upstreamPrefix+"-good", "priority 2") + "\t\t}\n" +
		"\t\tmodel again {\n" + candidate("once", "family_a", a, upstreamPrefix+"-x+fail-503+first-1", "retries 1") + "\t\t}\n" +
		"\t\tmodel down {\n" + candidate("dead", "family_a", a, upstreamPrefix+"-x+fail-500") + "\t\t}\n"
	return startGatewayWith(t, up, models, "\t\tkey one-a-minute "+limitedKey+" {\n\t\t\trpm 1\n\t\t}\n")
}

// requestLog asks the admin API for the request log.
func (g *gateway) requestLog(t *testing.T, query url.Values) metering.RequestPage {
	t.Helper()
	resp, err := http.Get(g.admin + "/switchyard/requests?" + query.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var page metering.RequestPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	return page
}

// A key hammering its limit cannot turn each refusal into a ledger row: the log keeps ten
// of its refusals a second, and a served request after them is logged as ever.
func TestTheRequestLogKeepsOnlyAFewRefusalsOfAHammeringKey(t *testing.T) {
	g := requestLogGateway(t)
	chat := `{"model":"flaky","messages":[{"role":"user","content":"hi"}]}`
	require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+limitedKey).Status)
	start := time.Now()
	const hammer = 200
	for range hammer {
		require.Equal(t, 429, g.call(t, "POST", "/v1/chat/completions", chat, "Authorization", "Bearer "+limitedKey).Status)
	}
	seconds := int(time.Since(start)/time.Second) + 1
	// The ledger writes its journal in order: once this later answer is in the log, every
	// refusal journaled before it is too.
	last := g.call(t, "POST", "/v1/chat/completions", chat)
	require.Equal(t, 200, last.Status)
	require.Eventually(t, func() bool {
		page := g.requestLog(t, url.Values{"limit": {"1"}})
		return len(page.Requests) == 1 && page.Requests[0].RequestID == last.Header.Get("X-Switchyard-Request-Id")
	}, waitShort, pollEvery)
	refused := g.requestLog(t, url.Values{"status": {"429"}, "limit": {"500"}}).Requests
	assert.GreaterOrEqual(t, len(refused), 10, "refusals are still logged")
	assert.LessOrEqual(t, len(refused), 10*(seconds+1), "%d refusals in %d s", hammer, seconds)
}

// The request log shows a failover with a retry, a request no candidate answered and a
// limit's refusal, each with its flags and attempts, through the admin API and the CLI;
// never a secret or an upstream's name.
func TestRequestLogShowsFailoversRetriesAndRefusals(t *testing.T) {
	g := requestLogGateway(t)
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	served := g.call(t, "POST", "/v1/chat/completions", chat("flaky"))
	require.Equal(t, 200, served.Status, "%s", served.Body)
	again := g.call(t, "POST", "/v1/chat/completions", chat("again"))
	require.Equal(t, 200, again.Status, "%s", again.Body)
	failed := g.call(t, "POST", "/v1/chat/completions", chat("down"))
	require.GreaterOrEqual(t, failed.Status, 500, "%s", failed.Body)
	require.Equal(t, 200, g.call(t, "POST", "/v1/chat/completions", chat("flaky"), "Authorization", "Bearer "+limitedKey).Status)
	refused := g.call(t, "POST", "/v1/chat/completions", chat("flaky"), "Authorization", "Bearer "+limitedKey)
	require.Equal(t, 429, refused.Status, "%s", refused.Body)

	// The ledger writes in batches: wait for all five rows.
	var page metering.RequestPage
	require.Eventually(t, func() bool {
		page = g.requestLog(t, nil)
		return len(page.Requests) == 5
	}, waitShort, pollEvery, "the request log never held the five requests")
	byID := map[string]metering.RequestRow{}
	for _, r := range page.Requests {
		byID[r.RequestID] = r
	}
	assert.Equal(t, refused.Header.Get("X-Switchyard-Request-Id"), page.Requests[0].RequestID, "newest first")

	s := byID[served.Header.Get("X-Switchyard-Request-Id")]
	assert.Equal(t, metering.OutcomeServed, s.Outcome)
	assert.Equal(t, "good", s.Candidate)
	assert.Equal(t, "test", s.KeyName)
	assert.True(t, s.FailedOver, "broken failed, good served")
	assert.False(t, s.Retried)
	require.Len(t, s.Tries, 2)
	assert.Equal(t, []string{"broken", "good"}, []string{s.Tries[0].Candidate, s.Tries[1].Candidate})
	assert.Equal(t, 503, s.Tries[0].Status)
	assert.NotEmpty(t, s.Tries[0].Reason)
	assert.Empty(t, s.Tries[1].Reason, "the serving attempt has no failover reason")
	assert.Positive(t, s.Input+s.Output)

	r := byID[again.Header.Get("X-Switchyard-Request-Id")]
	assert.True(t, r.Retried, "once was tried twice")
	assert.False(t, r.FailedOver, "on the same candidate")
	require.Len(t, r.Tries, 2)
	assert.Equal(t, 503, r.Tries[0].Status)
	assert.Equal(t, 1, r.Tries[1].Retry)
	assert.Equal(t, 200, r.Tries[1].Status)

	f := byID[failed.Header.Get("X-Switchyard-Request-Id")]
	assert.Equal(t, metering.OutcomeFailed, f.Outcome)
	assert.Equal(t, failed.Status, f.Status)
	require.NotEmpty(t, f.Tries)
	assert.Equal(t, "dead", f.Tries[0].Candidate)
	assert.Equal(t, 500, f.Tries[0].Status)

	rf := byID[refused.Header.Get("X-Switchyard-Request-Id")]
	assert.Equal(t, metering.OutcomeRefused, rf.Outcome)
	assert.Equal(t, "key_requests", rf.RefusedBy)
	assert.Equal(t, "one-a-minute", rf.KeyName)
	assert.Equal(t, 429, rf.Status)
	assert.Empty(t, rf.Tries, "no upstream was called")
	assert.Zero(t, rf.CostMicros)

	// Filters: by key, by model, by status.
	byKey := g.requestLog(t, url.Values{"key": {rf.KeyID}})
	assert.Len(t, byKey.Requests, 2)
	assert.Len(t, g.requestLog(t, url.Values{"model": {"down"}}).Requests, 1)
	assert.Len(t, g.requestLog(t, url.Values{"status": {"429"}}).Requests, 1)
	two := g.requestLog(t, url.Values{"limit": {"2"}})
	require.Len(t, two.Requests, 2)
	require.NotEmpty(t, two.Next)
	rest := g.requestLog(t, url.Values{"limit": {"3"}, "cursor": {two.Next}})
	assert.Len(t, rest.Requests, 3)
	assert.Empty(t, rest.Next)
	resp, err := http.Get(g.admin + "/switchyard/requests?cursor=garbage!")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// Refused and failed requests are not usage: three requests were served.
	resp, err = http.Get(g.admin + "/switchyard/usage")
	require.NoError(t, err)
	var usage struct{ Total metering.Row }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&usage))
	resp.Body.Close()
	assert.Equal(t, int64(3), usage.Total.Requests)

	// The CLI prints the same log, attempts beneath the rows that had several.
	out := runSwitchyardCLI(t, "requests", "--address", g.admin)
	t.Logf("caddy switchyard requests:\n%s", out)
	for _, want := range []string{"failed-over", "retried", "refused:key_requests", "failed", "attempt", "broken", "good", "one-a-minute"} {
		assert.Contains(t, out, want)
	}
	down := runSwitchyardCLI(t, "requests", "--model", "down", "--address", g.admin)
	assert.Equal(t, len(f.Tries), strings.Count(down, "attempt"), "each attempt beneath the failed request:\n%s", down)

	for _, text := range []string{out, string(mustJSON(t, page))} {
		assert.NotContains(t, text, testKey)
		assert.NotContains(t, text, limitedKey)
		g.up.assertNoLeakIn(t, "request log", text)
	}
}

// runSwitchyardCLI runs `caddy switchyard <args>` in this process and returns its
// output.
func runSwitchyardCLI(t *testing.T, args ...string) string {
	t.Helper()
	c, ok := caddycmd.Commands()["switchyard"]
	require.True(t, ok)
	root := &cobra.Command{Use: "switchyard", SilenceUsage: true}
	c.CobraFunc(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	require.NoError(t, root.Execute(), out.String())
	return out.String()
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

type requestsReport struct {
	browserReport
	All            json.RawMessage `json:"all_rows"`
	Model          json.RawMessage `json:"model_rows"`
	Key            json.RawMessage `json:"key_rows"`
	ToggleExpanded string          `json:"toggle_expanded"`
	Attempts       []struct {
		Candidate, Reason, Text string
	} `json:"attempts"`
	Overflow bool `json:"overflow"`
}

type shownRequest struct {
	ID, Model, Key, Candidate, Status string
	Flags                             []string
}

// The console's Requests view, in a browser: filtered by model it shows the request
// that failed over, which opens to its attempts; filtered by key, that key's requests.
func TestConsoleInBrowserRequests(t *testing.T) {
	node := needBrowser(t)
	up := newUpstream(t)
	a := "http://" + up.hostport() + "/v1"
	models := "\t\tmodel flaky {\n" +
		candidate("broken", "family_a", a, upstreamPrefix+"-x+fail-503", "priority 1") +
		candidate("good", "family_a", a, upstreamPrefix+"-good", "priority 2") + "\t\t}\n" +
		"\t\tmodel plain {\n" + candidate("only", "family_a", a, upstreamPrefix+"-plain") + "\t\t}\n"
	ports, caddyfile := startCaddy(t, 2, func(ports []int) string {
		return "{\n\tadmin 127.0.0.1:" + strconv.Itoa(ports[1]) + "\n\tdefault_bind 127.0.0.1\n" +
			"\tswitchyard {\n\t\tstore sqlite " + filepath.Join(t.TempDir(), "keys.db") + "\n\t\tkey other " + testKey + "\n" + models + "\t}\n}\n" +
			"http://127.0.0.1:" + strconv.Itoa(ports[0]) + " {\n" +
			"\thandle_path /console/* {\n\t\tbasic_auth {\n\t\t\t" + consoleUser + " " + consolePasswordHash + "\n\t\t}\n\t\tswitchyard_console\n\t}\n" +
			"\thandle {\n\t\tswitchyard_auth\n\t\tswitchyard_model\n\t\tswitchyard_proxy\n\t}\n" +
			"\thandle_errors {\n\t\tswitchyard_errors\n\t}\n}\n"
	})
	g := &gateway{base: "http://127.0.0.1:" + strconv.Itoa(ports[0]), admin: "http://127.0.0.1:" + strconv.Itoa(ports[1]), up: up, caddyfile: caddyfile}
	g.waitReady(t)

	resp, err := http.Post(g.admin+"/switchyard/keys", "application/json", strings.NewReader(`{"name":"browser-bot"}`))
	require.NoError(t, err)
	var created struct {
		Key    struct{ ID string }
		Secret string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.NotEmpty(t, created.Secret)
	chat := func(model, secret string) *result {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer "+secret)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		return r
	}
	failedOver := chat("flaky", created.Secret)
	chat("plain", created.Secret)
	chat("plain", testKey)
	require.Eventually(t, func() bool { return len(g.requestLog(t, nil).Requests) == 3 }, waitShort, pollEvery)

	var r requestsReport
	runBrowserScript(t, node, "requests.mjs", g, 2*time.Minute, &r, "SY_MODEL=flaky", "SY_KEY_ID="+created.Key.ID)
	assert.Equal(t, 200, r.PageStatus)
	assert.Empty(t, r.PageErrors)
	assert.Empty(t, r.ConsoleErrors)
	var all, byModel, byKey []shownRequest
	require.NoError(t, json.Unmarshal(r.All, &all))
	require.NoError(t, json.Unmarshal(r.Model, &byModel))
	require.NoError(t, json.Unmarshal(r.Key, &byKey))
	assert.Len(t, all, 3)
	require.Len(t, byModel, 1, "only the flaky model's request")
	assert.Equal(t, failedOver.Header.Get("X-Switchyard-Request-Id"), byModel[0].ID)
	assert.Equal(t, "good", byModel[0].Candidate)
	assert.Equal(t, "browser-bot", byModel[0].Key)
	assert.Contains(t, byModel[0].Flags, "Failed over")
	assert.Equal(t, "true", r.ToggleExpanded)
	require.Len(t, r.Attempts, 2)
	assert.Equal(t, "broken", r.Attempts[0].Candidate)
	assert.NotEmpty(t, r.Attempts[0].Reason)
	assert.Contains(t, r.Attempts[0].Text, "503")
	assert.Equal(t, "good", r.Attempts[1].Candidate)
	assert.Contains(t, r.Attempts[1].Text, "served")
	assert.Len(t, byKey, 2, "the stored key's two requests")
	assert.False(t, r.Overflow, "the table fits its panel at 1366 pixels")
}
