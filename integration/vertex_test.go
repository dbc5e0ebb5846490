package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
