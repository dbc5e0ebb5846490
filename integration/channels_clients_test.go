package integration

// Real clients through the supply channels: the official Anthropic JavaScript SDK and
// Claude Code, against models the gateway serves through Bedrock and Vertex (played by
// the simulator, see channelSim). A client must not be able to tell the channel.

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/switchyard-gw/switchyard/simulator"
)

// channelSecrets are what identifies a channel's account, project, region or upstream
// model: none of it may reach a client.
var channelSecrets = []string{
	bedrockARN, "123456789012", "inference-profile", "anthropic.claude-sonnet", "us-east-1", "amazon-bedrock",
	vertexProject, vertexSA, "us-east5", "claude-v@20250929", "20250929",
	"msg_bdrk_", "msg_vrtx_", "req_vrtx_", "req_bdrk_",
}

// assertNoChannelLeak fails for each channel secret or upstream leak marker in text,
// whatever its case (header names come lower-cased from fetch).
func assertNoChannelLeak(t *testing.T, up *upstream, where, text string) {
	t.Helper()
	lower := strings.ToLower(text)
	for _, secret := range append(up.leakMarkers(), channelSecrets...) {
		if i := strings.Index(lower, strings.ToLower(secret)); i >= 0 {
			t.Errorf("%s holds %q: …%s…", where, secret, lower[max(0, i-60):min(len(lower), i+len(secret)+60)])
		}
	}
}

// seenAll is every request the upstream has recorded so far.
func seenAll(up *upstream) []seenRequest {
	up.mu.Lock()
	defer up.mu.Unlock()
	return append([]seenRequest(nil), up.requests...)
}

// channelOutcome is one line of what channels.mjs printed.
type channelOutcome struct {
	Case   string          `json:"case"`
	Model  string          `json:"model"`
	Models []string        `json:"models"`
	Text   string          `json:"text"`
	Events []string        `json:"events"`
	Usage  json.RawMessage `json:"usage"`
	Seen   string          `json:"seen"`
	Error  string          `json:"error"`
	Status any             `json:"status"`
}

// The JavaScript SDK gets from a model served through Bedrock, and from one served
// through Vertex, what it gets from the plain API: the reply, its own model id, every
// event of a stream in the same order up to message_stop, the usage; and nothing that
// names the account, project, region or upstream model.
func TestJavaScriptSDKThroughBedrockAndVertex(t *testing.T) {
	k := needClients(t)
	sim := newChannelSim(t)
	plain := candidate("plain", "family_b", "http://"+sim.up.hostport(), upstreamPrefix+"-plain")
	models := "\t\tmodel via-bedrock {\n" + sim.bedrock(bedrockARN, "0") + "\t\t}\n" +
		"\t\tmodel via-vertex {\n" + sim.vertex("0") + "\t\t}\n" +
		"\t\tmodel via-api {\n" + plain + "\t\t}\n"
	g := startGatewayWith(t, sim.up, models, "")
	proxy := startRefusingProxy(t)
	box := k.newSandbox(t, proxy, "ANTHROPIC_BASE_URL="+g.base, "ANTHROPIC_API_KEY="+testKey,
		"SY_ANTHROPIC_MODELS=via-api,via-bedrock,via-vertex")
	run := box.run(t, clientRunTimeout, k.node, filepath.Join(k.clients, "channels.mjs"))
	require.Equal(t, 0, run.exit, "channels.mjs failed:\n%s", run)
	assert.Empty(t, proxy.seen(), "the SDK tried to reach something other than the gateway")
	assertNoChannelLeak(t, sim.up, "what the SDK printed", run.stdout+run.stderr)

	outcomes := outcomesOf(t, "channels.mjs", run.stdout, func(o channelOutcome) string { return o.Case })
	check := func(t *testing.T, name string) channelOutcome {
		t.Helper()
		o, ok := outcomes[name]
		require.True(t, ok, "channels.mjs did not report %q:\n%s", name, run)
		require.Empty(t, o.Error, "the SDK raised (HTTP status %v)", o.Status)
		assert.Equal(t, simulator.ReplyText, o.Text, "the reply text")
		u := gjson.ParseBytes(o.Usage)
		for _, p := range []string{"input_tokens", "output_tokens"} {
			assert.Positive(t, u.Get(p).Int(), "usage.%s in %s", p, o.Usage)
		}
		assertNoChannelLeak(t, sim.up, name, o.Seen)
		return o
	}
	plainStream := check(t, "via-api messages stream")
	require.NotEmpty(t, plainStream.Events)
	assert.Equal(t, "message_stop", plainStream.Events[len(plainStream.Events)-1])

	for _, model := range []string{"via-bedrock", "via-vertex"} {
		t.Run(model+" messages", func(t *testing.T) {
			assert.Equal(t, model, check(t, model+" messages").Model, "the client's own model id")
		})
		t.Run(model+" messages stream", func(t *testing.T) {
			o := check(t, model+" messages stream")
			assert.Equal(t, []string{model}, o.Models, "the client's own model id in message_start")
			assert.Equal(t, plainStream.Events, o.Events, "every event, in the plain API's order, up to message_stop")
		})
	}

	// Each call went through its channel: InvokeModel on Bedrock, rawPredict on Vertex.
	paths := map[string]int{}
	for _, r := range seenAll(sim.up) {
		switch {
		case strings.HasSuffix(r.Path, "/invoke"), strings.HasSuffix(r.Path, "/invoke-with-response-stream"):
			paths["bedrock "+r.Path[strings.LastIndexByte(r.Path, '/')+1:]]++
		case strings.HasSuffix(r.Path, ":rawPredict"), strings.HasSuffix(r.Path, ":streamRawPredict"):
			paths["vertex "+r.Path[strings.LastIndexByte(r.Path, ':')+1:]]++
		case r.Path == "/v1/messages":
			paths["api messages"]++
		}
	}
	assert.Equal(t, map[string]int{
		"api messages": 2, "bedrock invoke": 1, "bedrock invoke-with-response-stream": 1,
		"vertex rawPredict": 1, "vertex streamRawPredict": 1,
	}, paths, "one upstream request per SDK call, each on its channel")
}

// Claude Code against a model whose first candidate is Bedrock and whose second is Vertex:
// Bedrock throttles the first request, the gateway moves on to Vertex before Claude Code
// sees a byte, and Claude Code prints the answer as if nothing had happened. The upstream
// saw Bedrock's request, then Vertex's; the ledger bills Vertex, after two attempts.
func TestClaudeCodeFailsOverFromBedrockToVertex(t *testing.T) {
	k := needClients(t)
	sim := newChannelSim(t)
	models := "\t\tmodel claude-chan {\n\t\t\tprotocols family_b\n\t\t\tprice input 1 output 5\n" +
		sim.bedrock(bedrockARN+"+rate-limit+first-1", "0", "price input 3 output 15") +
		sim.vertex("1", "price input 4 output 20") + "\t\t}\n"
	dbPath := filepath.Join(t.TempDir(), "usage.db")
	g := startGatewayWith(t, sim.up, models, "\t\tstore sqlite "+dbPath+"\n")
	db, err := sql.Open("sqlite", dbPath)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	proxy := startRefusingProxy(t)
	tap := startWiretap(t, g.base)

	run := claudePrint(t, k, &gateway{base: tap.url, up: sim.up}, proxy, "Say hello.",
		"ANTHROPIC_API_KEY="+testKey, "ANTHROPIC_MODEL=claude-chan", "CLAUDE_CODE_MAX_RETRIES=0")
	require.Equal(t, 0, run.exit, "claude -p failed:\n%s", run)
	assert.Contains(t, run.stdout, simulator.ReplyText, "the answer Claude Code printed")
	assertNoChannelLeak(t, sim.up, "what Claude Code printed", run.stdout+run.stderr)

	// Claude Code asked once and was answered at once: the throttling never reached it.
	var requestID string
	var asked int
	for _, x := range tap.exchanges() {
		if x.method == "POST" && strings.HasPrefix(x.uri, "/v1/messages") {
			asked++
			assert.Equal(t, 200, x.status, "%s", x.body)
			requestID = x.header.Get("X-Switchyard-Request-Id")
		}
	}
	require.Equal(t, 1, asked, "one messages request for one prompt")

	// Upstream: Bedrock's stream first (throttled), then Vertex's.
	var order []string
	for _, r := range seenAll(sim.up) {
		switch {
		case strings.HasSuffix(r.Path, "/invoke-with-response-stream"):
			order = append(order, "bedrock")
		case strings.HasSuffix(r.Path, ":streamRawPredict"):
			order = append(order, "vertex")
		}
	}
	assert.Equal(t, []string{"bedrock", "vertex"}, order, "Bedrock tried first, then Vertex")

	require.NotEmpty(t, requestID, "the gateway's request id")
	rec := record(t, db, requestID)
	assert.Equal(t, "vertex", rec.Candidate, "Vertex served")
	assert.Equal(t, 2, rec.Attempts, "Bedrock, then Vertex")
	assert.Equal(t, (rec.Input*4_000_000+rec.Output*20_000_000+500_000)/1_000_000, rec.Cost, "at Vertex's price")
}
