package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

const (
	vertexProject = "vx-secret-project-9"
	vertexSA      = "gateway@vx-secret-project-9.iam.gserviceaccount.com"
)

// vertexGateway runs the gateway with model claude-v, whose candidates reach the
// simulator as Vertex AI: first one that is rate limited, then a working one. The
// service account's token_uri is the simulator's /token, which knows its public key.
func vertexGateway(t *testing.T) *gateway {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	up := &upstream{}
	up.Server = httptest.NewServer(simulator.New(simulator.Config{
		VertexPublicKey: &key.PublicKey,
		Observe:         up.record(func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/publishers/") }),
	}))
	t.Cleanup(up.Close)
	saFile := writeServiceAccount(t, key, up.URL+"/token")

	cand := func(name, model, prio string) string {
		return "\t\t\tcandidate " + name + " {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model " + model + "\n\t\t\t\tpriority " + prio + "\n" +
			"\t\t\t\tchannel vertex {\n\t\t\t\t\tproject " + vertexProject + "\n\t\t\t\t\tregion us-east5\n" +
			"\t\t\t\t\tendpoint " + up.URL + "\n\t\t\t\t\tcredentials_file " + saFile + "\n\t\t\t\t}\n\t\t\t}\n"
	}
	models := "\t\tmodel claude-v {\n\t\t\tprotocols family_b\n" +
		cand("limited", upstreamPrefix+"-v+rate-limit", "1") +
		cand("good", upstreamPrefix+"-v@20250929", "2") + "\t\t}\n"
	return startGatewayWith(t, up, models, "")
}

// writeServiceAccount writes a service-account file for key, whose tokens come from
// tokenURL (the simulator's /token), and returns its path.
func writeServiceAccount(t *testing.T, key *rsa.PrivateKey, tokenURL string) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": vertexProject, "client_email": vertexSA, "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"token_uri":   tokenURL,
	})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "vertex-sa.json")
	require.NoError(t, os.WriteFile(path, sa, 0o600))
	return path
}

func TestVertexCandidateThroughTheGateway(t *testing.T) {
	g := vertexGateway(t)
	leaks := []string{vertexProject, vertexSA, "ya29.", "us-east5", "aiplatform"}
	const body = `{"model":"claude-v","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	headers := []string{"anthropic-version", "2023-06-01", "anthropic-beta", "interleaved-thinking-2025-05-14"}

	r := g.call(t, http.MethodPost, "/v1/messages", body, headers...)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	assert.Equal(t, simulator.ReplyText, gjson.GetBytes(r.Body, "content.0.text").Str)
	assert.Equal(t, "claude-v", gjson.GetBytes(r.Body, "model").Str, "the client sees its own model name")
	g.assertNoLeak(t, r)
	g.up.assertNoLeakIn(t, "the answer", string(r.Body), leaks...)

	seen := vertexSeen(g.up)
	require.Len(t, seen, 2, "the rate-limited candidate, then the good one")
	assert.True(t, strings.HasSuffix(seen[0].Path, "/models/"+upstreamPrefix+"-v+rate-limit:rawPredict"), seen[0].Path)
	good := seen[1]
	assert.Equal(t, "/v1/projects/"+vertexProject+"/locations/us-east5/publishers/anthropic/models/"+upstreamPrefix+"-v@20250929:rawPredict", good.Path)
	assert.True(t, strings.HasPrefix(good.Header.Get("Authorization"), "Bearer ya29.sim-"), "an access token from the token endpoint")
	assert.Empty(t, good.Header.Get("Anthropic-Version"))
	assert.Equal(t, "interleaved-thinking-2025-05-14", good.Header.Get("Anthropic-Beta"))
	assert.False(t, gjson.GetBytes(good.Body, "model").Exists())
	assert.Equal(t, "vertex-2023-10-16", gjson.GetBytes(good.Body, "anthropic_version").Str)

	stream := strings.Replace(body, `{`, `{"stream":true,`, 1)
	r = g.call(t, http.MethodPost, "/v1/messages", stream, headers...)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	assert.Contains(t, r.Header.Get("Content-Type"), "text/event-stream")
	events := parseSSE(t, r.Body)
	require.NotEmpty(t, events)
	assert.Equal(t, "message_start", events[0].Name)
	assert.Equal(t, "message_stop", events[len(events)-1].Name)
	assert.Equal(t, "claude-v", gjson.Get(events[0].Data, "message.model").Str)
	var text strings.Builder
	for _, e := range events {
		text.WriteString(gjson.Get(e.Data, "delta.text").Str)
	}
	assert.Equal(t, simulator.ReplyText, text.String())
	g.assertNoLeak(t, r)
	g.up.assertNoLeakIn(t, "the stream", string(r.Body), leaks...)
	last := vertexSeen(g.up)
	assert.True(t, strings.HasSuffix(last[len(last)-1].Path, ":streamRawPredict"), last[len(last)-1].Path)

	r = g.call(t, http.MethodPost, "/v1/messages/count_tokens", `{"model":"claude-v","messages":[{"role":"user","content":"hi"}]}`, headers...)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	assert.Positive(t, gjson.GetBytes(r.Body, "input_tokens").Int())
	last = vertexSeen(g.up)
	assert.True(t, strings.HasSuffix(last[len(last)-1].Path, "/models/count-tokens:rawPredict"), last[len(last)-1].Path)
}

// vertexSeen is every request that reached Vertex's paths, in order.
func vertexSeen(u *upstream) []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.requests...)
}

// vertexErrorsGateway runs model claude-vx-bad, whose only candidate reaches a Vertex
// endpoint that refuses the request in Anthropic's envelope with Vertex's own request
// id, and claude-vx-quota, whose only candidate is over its Google quota (429
// RESOURCE_EXHAUSTED, in an array, without Retry-After), beside claude-native-quota,
// whose only candidate is the family's own API answering 429.
func vertexErrorsGateway(t *testing.T) *gateway {
	t.Helper()
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"ya29.errors-test","expires_in":3600,"token_type":"Bearer"}`))
	}))
	t.Cleanup(tokens.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	saFile := writeServiceAccount(t, key, tokens.URL+"/token")
	vertexEnd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_vrtx_011CX6sWnm678g4YPRps1ESQ")
		switch {
		case strings.Contains(r.URL.Path, "/models/bad:"):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_vrtx_011CX6sWnm678g4YPRps1ESQ"}`))
		default:
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`[{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude. Please submit a quota increase request.","status":"RESOURCE_EXHAUSTED"}}]`))
		}
	}))
	t.Cleanup(vertexEnd.Close)
	vx := func(model string) string {
		return "\t\t\tcandidate vertex {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model " + model + "\n" +
			"\t\t\t\tchannel vertex {\n\t\t\t\t\tproject " + vertexProject + "\n\t\t\t\t\tregion us-east5\n" +
			"\t\t\t\t\tendpoint " + vertexEnd.URL + "\n\t\t\t\t\tcredentials_file " + saFile + "\n\t\t\t\t}\n\t\t\t}\n"
	}
	up := newUpstream(t)
	models := "\t\tmodel claude-vx-bad {\n\t\t\tprotocols family_b\n" + vx("bad") + "\t\t}\n" +
		"\t\tmodel claude-vx-quota {\n\t\t\tprotocols family_b\n" + vx("quota") + "\t\t}\n" +
		"\t\tmodel claude-native-quota {\n\t\t\tprotocols family_b\n" +
		candidate("native", "family_b", "http://"+up.hostport(), upstreamPrefix+"-nq+rate-limit+no-retry-after") + "\t\t}\n"
	return startGatewayWith(t, up, models, "")
}

// A Vertex refusal in Anthropic's envelope reaches the client with its status and
// message, and with the gateway's request id where Vertex wrote its own (req_vrtx_…
// would name the channel), in the body as in the headers.
func TestVertexErrorCarriesTheGatewaysRequestID(t *testing.T) {
	g := vertexErrorsGateway(t)
	r := g.call(t, http.MethodPost, "/v1/messages", `{"model":"claude-vx-bad","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		"anthropic-version", v1)
	require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
	assert.Equal(t, "invalid_request_error", gjson.GetBytes(r.Body, "error.type").Str)
	assert.Equal(t, "max_tokens: Field required", gjson.GetBytes(r.Body, "error.message").Str)
	id := r.Header.Get("X-Switchyard-Request-Id")
	require.NotEmpty(t, id)
	assert.Equal(t, id, gjson.GetBytes(r.Body, "request_id").Str, "the gateway's id stands in the body")
	assert.Empty(t, r.Header.Get("Request-Id"))
	g.assertNoLeak(t, r)
	g.up.assertNoLeakIn(t, "the error", string(r.Body)+fmt.Sprint(r.Header), "req_vrtx", "vrtx", vertexProject)
}

// A model's only candidate over its quota is answered as a plain candidate's 429 is:
// the gateway retries it, then answers 503 with Retry-After for the client to decide
// (docs/health-and-failover.md), in the family's envelope, without Google's text.
func TestASoleVertexCandidatesQuotaIsAnsweredAsANativeOnesIs(t *testing.T) {
	g := vertexErrorsGateway(t)
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	}
	native := g.call(t, http.MethodPost, "/v1/messages", body("claude-native-quota"), "anthropic-version", v1)
	vertex := g.call(t, http.MethodPost, "/v1/messages", body("claude-vx-quota"), "anthropic-version", v1)
	assert.Equal(t, http.StatusServiceUnavailable, native.Status, "%s", native.Body)
	assert.Equal(t, native.Status, vertex.Status, "%s", vertex.Body)
	assert.Equal(t, gjson.GetBytes(native.Body, "error.type").Str, gjson.GetBytes(vertex.Body, "error.type").Str)
	assert.Equal(t, "error", gjson.GetBytes(vertex.Body, "type").Str)
	assert.NotEmpty(t, vertex.Header.Get("Retry-After"))
	g.assertNoLeak(t, vertex)
	g.up.assertNoLeakIn(t, "the answer", string(vertex.Body)+fmt.Sprint(vertex.Header),
		"RESOURCE_EXHAUSTED", "Quota exceeded", "aiplatform", vertexProject, "req_vrtx")
}

// TestAHungVertexTokenEndpointHoldsNoRequest: a token endpoint that takes the request
// and never answers does not hold the client past the model's deadline: the request is
// answered 503 at its deadline, and so is the next one, while the endpoint still hangs.
func TestAHungVertexTokenEndpointHoldsNoRequest(t *testing.T) {
	release := make(chan struct{})
	var asked atomic.Int32
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(tokens.Close)
	t.Cleanup(func() { close(release) })
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	saFile := writeServiceAccount(t, key, tokens.URL+"/token")
	up := newUpstream(t)
	models := "\t\tmodel claude-hung {\n\t\t\tprotocols family_b\n\t\t\trequest_timeout 1s\n" +
		"\t\t\tcandidate vertex {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model claude-x@1\n" +
		"\t\t\t\tchannel vertex {\n\t\t\t\t\tproject " + vertexProject + "\n\t\t\t\t\tregion us-east5\n" +
		"\t\t\t\t\tendpoint " + up.URL + "\n\t\t\t\t\tcredentials_file " + saFile + "\n\t\t\t\t}\n\t\t\t}\n\t\t}\n"
	g := startGatewayWith(t, up, models, "")
	for i := range 2 {
		start := time.Now()
		r := g.call(t, http.MethodPost, "/v1/messages", `{"model":"claude-hung","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			"anthropic-version", v1)
		took := time.Since(start)
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, "request %d: %s", i, r.Body)
		// The token fetch's own bound is 30 s: an answer well before it came from the
		// request's deadline.
		assert.Less(t, took, 10*time.Second, "request %d waited on the token endpoint", i)
		g.assertNoLeak(t, r)
	}
	assert.Equal(t, int32(1), asked.Load(), "one fetch waits on the endpoint for both requests")
}
