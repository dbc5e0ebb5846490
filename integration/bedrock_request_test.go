package integration

import (
	"encoding/base64"
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

const (
	bedrockAKID   = "AKIDINTEGRATION00001"
	bedrockSecret = "integration/bedrock+secret0001"
	bedrockARN    = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"
)

// bedrockSeen is what a simulated Bedrock received.
type bedrockSeen struct {
	mu      sync.Mutex
	paths   []string
	bodies  [][]byte
	headers []http.Header
}

func (s *bedrockSeen) record(r *http.Request, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paths = append(s.paths, r.URL.EscapedPath())
	s.bodies = append(s.bodies, append([]byte(nil), body...))
	s.headers = append(s.headers, r.Header.Clone())
}

func (s *bedrockSeen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.paths)
}

// bedrockCandidate is a candidate block reached through the bedrock channel at endpoint.
func bedrockCandidate(name, endpoint, model, priority string) string {
	return "\t\t\tcandidate " + name + " {\n\t\t\t\tprotocol family_b\n\t\t\t\tupstream_model " + model +
		"\n\t\t\t\tpriority " + priority + "\n\t\t\t\tchannel bedrock {\n\t\t\t\t\tregion us-east-1\n" +
		"\t\t\t\t\tendpoint " + endpoint + "\n\t\t\t\t\taccess_key_id " + bedrockAKID +
		"\n\t\t\t\t\tsecret_access_key " + bedrockSecret + "\n\t\t\t\t}\n\t\t\t}\n"
}

// TestBedrockRequestsThroughTheGateway sends Messages and count_tokens requests to models whose
// candidates are reached through Bedrock: the simulated Bedrock checks each signature,
// path and body, and a throttled Bedrock candidate fails over to the plain API.
func TestBedrockRequestsThroughTheGateway(t *testing.T) {
	seen := &bedrockSeen{}
	br := httptest.NewServer(simulator.New(simulator.Config{
		BedrockAccessKeyID: bedrockAKID, BedrockSecretKey: bedrockSecret, Observe: seen.record,
	}))
	t.Cleanup(br.Close)
	up := newUpstream(t)
	models := "\t\tmodel claude-br {\n\t\t\tprotocols family_b\n" + bedrockCandidate("bedrock", br.URL, bedrockARN, "0") + "\t\t}\n" +
		"\t\tmodel claude-fo {\n\t\t\tprotocols family_b\n" +
		bedrockCandidate("throttled", br.URL, "us.anthropic.claude-x+rate-limit", "0") +
		candidate("plain", "family_b", "http://"+up.hostport(), upstreamPrefix+"-good", "priority 1") + "\t\t}\n"
	g := startGatewayWith(t, up, models, "")

	body := `{"model":"claude-br","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", "2023-06-01",
		"anthropic-beta", "interleaved-thinking-2025-05-14,context-1m-2025-08-07")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, simulator.ReplyText, gjson.GetBytes(r.Body, "content.0.text").String())
	assert.Equal(t, "claude-br", gjson.GetBytes(r.Body, "model").String(), "the client sees its own model name")
	assert.NotContains(t, string(r.Body), "123456789012")
	require.Equal(t, 1, seen.count())
	assert.Equal(t, "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-20250514-v1:0/invoke", seen.paths[0])
	sent := seen.bodies[0]
	assert.False(t, gjson.GetBytes(sent, "model").Exists())
	assert.Equal(t, "bedrock-2023-05-31", gjson.GetBytes(sent, "anthropic_version").String())
	assert.Equal(t, `["interleaved-thinking-2025-05-14","context-1m-2025-08-07"]`, gjson.GetBytes(sent, "anthropic_beta").Raw)

	// count_tokens: Bedrock's CountTokens counts the InvokeModel body; the client gets
	// the Anthropic API's own answer.
	r = g.call(t, "POST", "/v1/messages/count_tokens",
		`{"model":"claude-br","system":"be brief","messages":[{"role":"user","content":"count me"}]}`,
		"anthropic-version", "2023-06-01", "anthropic-beta", "context-1m-2025-08-07")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, 2, seen.count())
	assert.Equal(t, "/model/arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-sonnet-4-20250514-v1:0/count-tokens", seen.paths[1])
	inner, err := base64.StdEncoding.DecodeString(gjson.GetBytes(seen.bodies[1], "input.invokeModel.body").String())
	require.NoError(t, err)
	assert.False(t, gjson.GetBytes(inner, "model").Exists())
	assert.Equal(t, "bedrock-2023-05-31", gjson.GetBytes(inner, "anthropic_version").String())
	assert.Equal(t, `["context-1m-2025-08-07"]`, gjson.GetBytes(inner, "anthropic_beta").Raw)
	assert.Equal(t, "count me", gjson.GetBytes(inner, "messages.0.content").String())
	// The simulator counts len/4+1 tokens of the body it was asked to count.
	assert.JSONEq(t, `{"input_tokens":`+strconv.Itoa(len(inner)/4+1)+`}`, string(r.Body))

	// Throttled on Bedrock, served by the plain API.
	r = g.call(t, "POST", "/v1/messages", strings.Replace(body, "claude-br", "claude-fo", 1), "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, "claude-fo", gjson.GetBytes(r.Body, "model").String())
	assert.Equal(t, 3, seen.count(), "the Bedrock candidate was tried first")
	assert.Len(t, up.seenFor(upstreamPrefix+"-good"), 1)
}

// TestBedrockMessagesEndpointThroughTheGateway sends a plain and a streamed Messages request
// to a model whose candidate is reached through Bedrock's Messages endpoint (`api
// messages`): the simulated Bedrock checks the signature, and the client gets the
// Anthropic API's own answer and SSE under its own model name.
func TestBedrockMessagesEndpointThroughTheGateway(t *testing.T) {
	seen := &bedrockSeen{}
	br := httptest.NewServer(simulator.New(simulator.Config{
		BedrockAccessKeyID: bedrockAKID, BedrockSecretKey: bedrockSecret, Observe: seen.record,
	}))
	t.Cleanup(br.Close)
	up := newUpstream(t)
	const upstreamID = "us.anthropic.claude-opus-4-7"
	cand := strings.Replace(bedrockCandidate("bedrock-msg", br.URL, upstreamID, "0"),
		"region us-east-1\n", "region us-east-1\n\t\t\t\t\tapi messages\n", 1)
	g := startGatewayWith(t, up, "\t\tmodel claude-bm {\n\t\t\tprotocols family_b\n"+cand+"\t\t}\n", "")

	body := `{"model":"claude-bm","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	r := g.call(t, "POST", "/v1/messages", body, "anthropic-version", "2023-06-01", "anthropic-beta", "context-1m-2025-08-07")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Equal(t, simulator.ReplyText, gjson.GetBytes(r.Body, "content.0.text").String())
	assert.Equal(t, "claude-bm", gjson.GetBytes(r.Body, "model").String(), "the client sees its own model name")
	require.Equal(t, 1, seen.count())
	assert.Equal(t, "/anthropic/v1/messages", seen.paths[0])
	assert.Equal(t, upstreamID, gjson.GetBytes(seen.bodies[0], "model").String(), "the Bedrock id travels in the body")
	assert.False(t, gjson.GetBytes(seen.bodies[0], "anthropic_version").Exists())
	assert.Equal(t, "2023-06-01", seen.headers[0].Get("Anthropic-Version"))
	assert.Equal(t, "context-1m-2025-08-07", seen.headers[0].Get("Anthropic-Beta"))
	assert.Contains(t, seen.headers[0].Get("Authorization"), "/us-east-1/bedrock/aws4_request")

	r = g.call(t, "POST", "/v1/messages", strings.Replace(body, `{`, `{"stream":true,`, 1), "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	assert.Contains(t, r.Header.Get("Content-Type"), "text/event-stream")
	events := parseSSE(t, r.Body)
	require.NotEmpty(t, events)
	assert.Equal(t, "message_start", events[0].Name)
	assert.Equal(t, "message_stop", events[len(events)-1].Name)
	assert.Equal(t, "claude-bm", gjson.Get(events[0].Data, "message.model").Str)
	var text strings.Builder
	for _, e := range events {
		text.WriteString(gjson.Get(e.Data, "delta.text").Str)
	}
	assert.Equal(t, simulator.ReplyText, text.String())
	assert.NotContains(t, string(r.Body), upstreamID)
	require.Equal(t, 2, seen.count())
	assert.Equal(t, "text/event-stream", seen.headers[1].Get("Accept"))
	assert.True(t, gjson.GetBytes(seen.bodies[1], "stream").Bool())
}
