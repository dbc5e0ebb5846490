package vertex_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/channel/vertex"
	"github.com/switchyard-gw/switchyard/simulator"
)

// simChannel is a channel to the simulator acting as Vertex and as Google's token endpoint.
func simChannel(t *testing.T) (*vertex.Channel, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var paths []string
	sim := httptest.NewServer(simulator.New(simulator.Config{
		VertexPublicKey: &testKey().PublicKey,
		Observe: func(r *http.Request, _ []byte) {
			mu.Lock()
			defer mu.Unlock()
			paths = append(paths, r.URL.Path)
		},
	}))
	t.Cleanup(sim.Close)
	ch, err := vertex.New(context.Background(), vertex.Config{
		Project: "sim-proj", Region: "us-east5", Endpoint: sim.URL,
		CredentialsJSON: serviceAccountJSON(t, sim.URL+"/token"),
	})
	require.NoError(t, err)
	return ch, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), paths...) }
}

func roundTrip(t *testing.T, ch *vertex.Channel, op any, body string, stream bool) (*http.Response, []byte) {
	t.Helper()
	o := messagesOp
	if op == "count" {
		o = countOp
	}
	h := http.Header{}
	h.Set("Anthropic-Version", "2023-06-01")
	req, err := ch.NewRequest(context.Background(), o, []byte(body), stream, h)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	ch.Response(o, resp)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, b
}

func TestThroughSimulator(t *testing.T) {
	ch, paths := simChannel(t)

	resp, b := roundTrip(t, ch, "messages", `{"model":"claude-sim@1","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, false)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, simulator.ReplyText, gjson.GetBytes(b, "content.0.text").Str)
	assert.Equal(t, "claude-sim@1", gjson.GetBytes(b, "model").Str, "the simulator answered for the model in the URL")

	resp, b = roundTrip(t, ch, "messages", `{"model":"claude-sim@1","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	assert.True(t, strings.HasPrefix(string(b), "event: message_start\n"), string(b))
	assert.Contains(t, string(b), "event: message_stop\n")

	resp, b = roundTrip(t, ch, "count", `{"model":"claude-sim@1","messages":[{"role":"user","content":"hi"}]}`, false)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Positive(t, gjson.GetBytes(b, "input_tokens").Int())

	assert.Equal(t, []string{
		"/v1/projects/sim-proj/locations/us-east5/publishers/anthropic/models/claude-sim@1:rawPredict",
		"/v1/projects/sim-proj/locations/us-east5/publishers/anthropic/models/claude-sim@1:streamRawPredict",
		"/v1/projects/sim-proj/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict",
	}, filterModelPaths(paths()))
}

func filterModelPaths(ps []string) []string {
	var out []string
	for _, p := range ps {
		if strings.Contains(p, "/publishers/") {
			out = append(out, p)
		}
	}
	return out
}

func TestSimulatorRateLimitIsAnAnthropicRateLimit(t *testing.T) {
	ch, _ := simChannel(t)
	resp, b := roundTrip(t, ch, "messages", `{"model":"claude-sim+rate-limit","max_tokens":20,"messages":[]}`, false)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "rate_limit_error", gjson.GetBytes(b, "error.type").Str, string(b))
	assert.Contains(t, gjson.GetBytes(b, "error.message").Str, "Quota exceeded")
	assert.NotContains(t, string(b), "sim-proj", "the project in Google's message is redacted")

	resp, b = roundTrip(t, ch, "messages", `{"model":"claude-sim+fail-503","max_tokens":20,"stream":true,"messages":[]}`, true)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "error", gjson.GetBytes(b, "type").Str, string(b))
}
