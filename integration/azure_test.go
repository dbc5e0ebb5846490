package integration

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// Distinctive values of the Azure side that must never reach a client.
const (
	azureKey        = "zz-azure-resource-key-5d1c"
	azureDeployment = "zz-azure-deployment"
	azureClassicDep = "zz-azure-classic-dep"
)

// azureUpstream is a simulated Azure resource that records what it received.
type azureUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

func newAzureUpstream(t *testing.T) *azureUpstream {
	a := &azureUpstream{}
	a.Server = httptest.NewServer(simulator.NewAzure(simulator.AzureConfig{APIKey: azureKey,
		Observe: func(r *http.Request, body []byte) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.seen = append(a.seen, seenRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
				Header: r.Header.Clone(), Body: append([]byte(nil), body...)})
		}}))
	t.Cleanup(a.Close)
	return a
}

func (a *azureUpstream) requests() []seenRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seenRequest(nil), a.seen...)
}

func (a *azureUpstream) port() string {
	return strconv.Itoa(a.Listener.Addr().(*net.TCPAddr).Port)
}

// azureCandidate is a candidate block reached through the Azure channel.
func azureCandidate(name, proto, model string, priority int, channelLines ...string) string {
	return "\t\t\tcandidate " + name + " {\n\t\t\t\tprotocol " + proto + "\n\t\t\t\tupstream_model " + model +
		"\n\t\t\t\tpriority " + strconv.Itoa(priority) + "\n\t\t\t\tchannel azure {\n\t\t\t\t\t" +
		strings.Join(channelLines, "\n\t\t\t\t\t") + "\n\t\t\t\t}\n\t\t\t}\n"
}

// assertNothingOfAzure fails when what the client got names the Azure side: its
// deployments, key, address, identifying headers or content-filter verdicts.
func assertNothingOfAzure(t *testing.T, g *gateway, az *azureUpstream, r *result) {
	t.Helper()
	g.assertNoLeak(t, r)
	var all strings.Builder
	all.Write(r.Body)
	for name, values := range r.Header {
		all.WriteString("\n" + name + ": " + strings.Join(values, ","))
	}
	g.up.assertNoLeakIn(t, "what the client received", all.String(),
		azureKey, azureDeployment, azureClassicDep, ":"+az.port(), "zz-azure",
		simulator.AzureRegion, simulator.AzureModelSession, "Apim-Request-Id", "X-Ms-Region", "Azureml",
		"filter_results", "content_filter", "prompt_annotations")
}

func TestAzureCandidatesServeChatResponsesAndMessagesUnseen(t *testing.T) {
	up := newUpstream(t)
	az := newAzureUpstream(t)
	endpoint := "endpoint http://127.0.0.1:" + az.port()
	plainA := "http://" + up.hostport() + "/v1"
	models := "" +
		"\t\tmodel gpt-az {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", azureDeployment, 0, endpoint, "mode v1", "api_key "+azureKey) +
		candidate("plain", "family_a", plainA, upstreamPrefix+"-plain", "priority 1") + "\t\t}\n" +
		"\t\tmodel gpt-classic {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", upstreamPrefix+"-classic", 0, endpoint, "deployment "+azureClassicDep, "api_key "+azureKey) +
		"\t\t}\n" +
		"\t\tmodel gpt-throttled {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", azureDeployment+"+rate-limit+retry-after-30s+retry-in-message", 0, endpoint, "mode v1", "api_key "+azureKey) +
		candidate("plain", "family_a", plainA, upstreamPrefix+"-plain", "priority 1") + "\t\t}\n" +
		"\t\tmodel gpt-throttled-alone {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", azureDeployment+"+rate-limit+retry-after-30s+retry-in-message", 0, endpoint, "mode v1", "api_key "+azureKey) +
		"\t\t}\n" +
		"\t\tmodel claude-az {\n\t\t\tprotocols family_b\n" +
		azureCandidate("foundry", "family_b", azureDeployment+"-claude", 0, endpoint, "mode foundry", "api_key "+azureKey) +
		"\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	t.Run("chat", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"gpt-az","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Equal(t, "gpt-az", gjson.GetBytes(r.Body, "model").Str)
		assert.Equal(t, simulator.ReplyText, gjson.GetBytes(r.Body, "choices.0.message.content").Str)
		assertNothingOfAzure(t, g, az, r)
		seen := az.requests()
		require.NotEmpty(t, seen)
		last := seen[len(seen)-1]
		assert.Equal(t, "/openai/v1/chat/completions", last.Path)
		assert.Equal(t, azureKey, last.Header.Get("Api-Key"))
		assert.Empty(t, last.Header.Get("Authorization"), "the client's key stays at the gateway")
		assert.Equal(t, azureDeployment, gjson.GetBytes(last.Body, "model").Str, "v1 takes the deployment as the model")
		assert.Zero(t, up.count(), "the Azure candidate served it")
	})

	t.Run("chat streamed", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/chat/completions",
			`{"model":"gpt-az","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assertNothingOfAzure(t, g, az, r)
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		assert.Equal(t, "[DONE]", events[len(events)-1].Data)
		var text strings.Builder
		for _, ev := range events[:len(events)-1] {
			chunk := gjson.Parse(ev.Data)
			assert.Equal(t, "gpt-az", chunk.Get("model").Str, "every chunk names the client's model: %s", ev.Data)
			assert.NotEmpty(t, chunk.Get("id").Str, "no chunk of Azure's filter: %s", ev.Data)
			text.WriteString(chunk.Get("choices.0.delta.content").Str)
		}
		assert.Equal(t, simulator.ReplyText, text.String())
		assert.True(t, gjson.Parse(events[len(events)-2].Data).Get("usage.total_tokens").Int() > 0, "the usage chunk arrives")
	})

	t.Run("responses", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/responses", `{"model":"gpt-az","input":"hi"}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Equal(t, "gpt-az", gjson.GetBytes(r.Body, "model").Str)
		assertNothingOfAzure(t, g, az, r)
		seen := az.requests()
		assert.Equal(t, "/openai/v1/responses", seen[len(seen)-1].Path)
	})

	t.Run("classic deployment", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"gpt-classic","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assertNothingOfAzure(t, g, az, r)
		assert.Equal(t, "[DONE]", parseSSE(t, r.Body)[len(parseSSE(t, r.Body))-1].Data)
		seen := az.requests()
		last := seen[len(seen)-1]
		assert.Equal(t, "/openai/deployments/"+azureClassicDep+"/chat/completions", last.Path)
		assert.Equal(t, "api-version=2024-10-21", last.RawQuery)

		r = g.call(t, "POST", "/v1/responses", `{"model":"gpt-classic","input":"hi"}`)
		assert.NotEqual(t, 200, r.Status, "the classic API offers no Responses and there is no other candidate")
		assertNothingOfAzure(t, g, az, r)
	})

	t.Run("throttled azure moves on", func(t *testing.T) {
		before := len(up.seenFor(upstreamPrefix + "-plain"))
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"gpt-throttled","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assert.Equal(t, "gpt-throttled", gjson.GetBytes(r.Body, "model").Str)
		assert.Len(t, up.seenFor(upstreamPrefix+"-plain"), before+1, "the plain candidate served it")
		assertNothingOfAzure(t, g, az, r)
	})

	t.Run("throttled alone", func(t *testing.T) {
		// Azure said how long only in its message; the gateway still knows to wait that long.
		r := g.call(t, "POST", "/v1/chat/completions", `{"model":"gpt-throttled-alone","messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusServiceUnavailable, r.Status)
		wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
		assert.InDelta(t, 30, wait, 1)
		assertNothingOfAzure(t, g, az, r)
	})

	t.Run("foundry messages", func(t *testing.T) {
		r := g.call(t, "POST", "/v1/messages",
			`{"model":"claude-az","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "", "x-api-key", testKey, "anthropic-version", "2023-06-01")
		require.Equal(t, 200, r.Status, "%s", r.Body)
		assertNothingOfAzure(t, g, az, r)
		events := parseSSE(t, r.Body)
		require.NotEmpty(t, events)
		assert.Equal(t, "message_start", events[0].Name)
		assert.Equal(t, "claude-az", gjson.Get(events[0].Data, "message.model").Str)
		assert.Equal(t, "message_stop", events[len(events)-1].Name)
		seen := az.requests()
		last := seen[len(seen)-1]
		assert.Equal(t, "/anthropic/v1/messages", last.Path)
		assert.Equal(t, azureKey, last.Header.Get("X-Api-Key"))
		assert.Equal(t, "2023-06-01", last.Header.Get("Anthropic-Version"))
	})
}

// TestAzureEndpointKeepsItsPathPrefix: an `endpoint` with a path (an API gateway in
// front of the resource) keeps it in every upstream URL, through the assembled gateway.
func TestAzureEndpointKeepsItsPathPrefix(t *testing.T) {
	const prefix = "/apim/azure-openai"
	var mu sync.Mutex
	var paths []string
	sim := simulator.NewAzure(simulator.AzureConfig{APIKey: azureKey})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, prefix+"/") {
			http.Error(w, `{"error":{"code":"404","message":"Resource not found"}}`, http.StatusNotFound)
			return
		}
		http.StripPrefix(prefix, sim).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	up := newUpstream(t)
	endpoint := "endpoint " + srv.URL + prefix
	models := "\t\tmodel gpt-prefixed {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", azureDeployment, 0, endpoint, "mode v1", "api_key "+azureKey) + "\t\t}\n" +
		"\t\tmodel gpt-prefixed-classic {\n\t\t\tprotocols family_a\n" +
		azureCandidate("azure", "family_a", upstreamPrefix+"-classic", 0, endpoint, "deployment "+azureClassicDep, "api_key "+azureKey) + "\t\t}\n" +
		"\t\tmodel claude-prefixed {\n\t\t\tprotocols family_b\n" +
		azureCandidate("foundry", "family_b", azureDeployment+"-claude", 0, endpoint, "mode foundry", "api_key "+azureKey) + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	for _, tc := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"gpt-prefixed","messages":[{"role":"user","content":"hi"}]}`, prefix + "/openai/v1/chat/completions"},
		{"/v1/responses", `{"model":"gpt-prefixed","input":"hi"}`, prefix + "/openai/v1/responses"},
		{"/v1/chat/completions", `{"model":"gpt-prefixed-classic","messages":[{"role":"user","content":"hi"}]}`,
			prefix + "/openai/deployments/" + azureClassicDep + "/chat/completions"},
		{"/v1/messages", `{"model":"claude-prefixed","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, prefix + "/anthropic/v1/messages"},
	} {
		r := g.call(t, http.MethodPost, tc.path, tc.body, "anthropic-version", "2023-06-01")
		assert.Equal(t, http.StatusOK, r.Status, "%s: %s", tc.want, r.Body)
		mu.Lock()
		require.NotEmpty(t, paths)
		assert.Equal(t, tc.want, paths[len(paths)-1])
		mu.Unlock()
		g.up.assertNoLeakIn(t, "the answer", string(r.Body), prefix, "apim")
	}
}
